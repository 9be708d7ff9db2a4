"""The bot's own sentences, per language, per place and per zone: one table for every reply.

Where the member asked decides what "ask the forum" means:

- ``new_topic``: the member opened a topic for the question (post #1). Its members see it: the reply
  says so, and suggests adding what was tried, errors and versions to the topic, not opening another;
- ``reply``: the member asked inside an existing topic. The topic's members are the ones to ask; no
  advice to open a topic or to describe the problem again (the thread already does);
- ``pm``: a private message to the bot. Nobody else reads it: this is the one place where the reply
  sends the member to open a topic, with a clear title, what was tried, errors and versions.

Language: French or English, from the question (``gate.detect_language``, the gate's detector), so a
French question gets French sentences and a French footer. The LLM writes its own sentences: it is told
the question's language and, per place, how to send the member to the forum (``ask_forum``); the offline
generator and the pipeline use the sentences here verbatim.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from worker.domain import ForumPost

Place = Literal["new_topic", "reply", "pm"]
PLACES: tuple[Place, ...] = ("new_topic", "reply", "pm")
LANGUAGE_NAMES = {"en": "English", "fr": "French"}


@dataclass(frozen=True, slots=True)
class Wording:
    """The fixed sentences of a reply in one language and one place."""

    abstain: str
    normal_intro: str
    weak_intro: str
    weak_outro: str
    closest: str  # the weak zone's list of closest topics, when nothing in them can be quoted
    offline_footer: str  # a reply assembled without a language model, that cites
    offline_note: str  # one that cites nothing


def place_of(post: ForumPost) -> Place:
    """Where ``post`` asked: a private message, a new topic's first post, or a reply in a topic."""
    if post.archetype == "private_message":
        return "pm"
    return "new_topic" if post.post_number == 1 else "reply"


def wording(language: str, place: Place = "new_topic") -> Wording:
    """The sentences for ``language`` (``"fr"``, else English) at ``place``."""
    return (_FRENCH if language == "fr" else _ENGLISH)[place]


def ask_forum(place: Place) -> str:
    """The LLM's instruction on how to send the member to the forum from ``place`` (English: the
    prompt's language; the reply follows the question's)."""
    return _ASK_FORUM[place]


_ASK_FORUM: dict[Place, str] = {
    "new_topic": "The member asked in a new topic of their own, which the forum's members will read: "
    "say that they may answer there, and that adding what was tried and the exact error messages or "
    "versions to the topic helps. Do not tell them to open a new topic.",
    "reply": "The member asked in a reply inside an existing topic: say that the members who follow this "
    "topic may know. Do not tell them to open a new topic, and do not ask them to describe the problem "
    "again.",
    "pm": "The member asked in a private message that only the bot reads: say that to reach the forum's "
    "members they can open a topic with a clear title, what was tried, and the exact error messages or "
    "versions.",
}

_EN_NOTHING = "I don't know: I found nothing in the forum's history that answers this."
_FR_NOTHING = "Je ne sais pas : je n'ai rien trouvé dans l'historique du forum qui réponde à cette question."
_EN_COMMON = {
    "normal_intro": "Here is what the forum's posts say:",
    "weak_intro": "The forum's evidence on this is weak: no post answers it clearly. The closest posts say:",
    "closest": "The forum's evidence on this is weak: no post answers it clearly. The closest topics are:",
    "offline_footer": "_Assembled offline without a language model: sentences quoted from the cited posts._",
    "offline_note": "_Written offline, without a language model._",
}
_FR_COMMON = {
    "normal_intro": "Voici ce que disent les messages du forum :",
    "weak_intro": "Les éléments du forum sont faibles : aucun message n'y répond clairement. Les plus "
    "proches disent :",
    "closest": "Les éléments du forum sont faibles : aucun message n'y répond clairement. Les sujets les "
    "plus proches sont :",
    "offline_footer": "_Assemblé hors ligne, sans modèle de langue : phrases citées des messages en lien._",
    "offline_note": "_Écrit hors ligne, sans modèle de langue._",
}
_ENGLISH: dict[Place, Wording] = {
    "new_topic": Wording(
        abstain=f"{_EN_NOTHING} The forum's members will see your topic; adding what you tried, the exact "
        "error messages and versions helps them answer.",
        weak_outro="If this does not help, the forum's members will see your topic and may know more.",
        **_EN_COMMON,
    ),
    "reply": Wording(
        abstain=f"{_EN_NOTHING} The members following this topic may know more.",
        weak_outro="If this does not help, the members following this topic may know more.",
        **_EN_COMMON,
    ),
    "pm": Wording(
        abstain=f"{_EN_NOTHING} Only you and I read this conversation: to ask the forum's members, open a "
        "topic with a clear title, what you tried, and the exact error messages and versions.",
        weak_outro="If this does not help, ask the forum's members in a topic with the details of what "
        "you tried.",
        **_EN_COMMON,
    ),
}
_FRENCH: dict[Place, Wording] = {
    "new_topic": Wording(
        abstain=f"{_FR_NOTHING} Les membres du forum verront votre sujet ; y ajouter ce que vous avez "
        "essayé, les messages d'erreur et les versions exacts les aidera à répondre.",
        weak_outro="Si cela ne suffit pas, les membres du forum verront votre sujet et en savent peut-être "
        "plus.",
        **_FR_COMMON,
    ),
    "reply": Wording(
        abstain=f"{_FR_NOTHING} Les membres qui suivent ce sujet en savent peut-être plus.",
        weak_outro="Si cela ne suffit pas, les membres qui suivent ce sujet en savent peut-être plus.",
        **_FR_COMMON,
    ),
    "pm": Wording(
        abstain=f"{_FR_NOTHING} Cette conversation n'est lue que par vous et moi : pour demander aux "
        "membres du forum, ouvrez un sujet avec un titre clair, ce que vous avez essayé, et les messages "
        "d'erreur et versions exacts.",
        weak_outro="Si cela ne suffit pas, demandez aux membres du forum dans un sujet en précisant ce "
        "que vous avez essayé.",
        **_FR_COMMON,
    ),
}
