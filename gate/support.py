"""Help-seeking in a crisis: the questions that get the support reply instead of a refusal.

A person who says they want to die and asks where to talk to someone is asking for help, not for a
method: the gate answers them with the ``support`` reply (the helplines first, no "I can't help").
:func:`seeks_support` reads the normalised question (:func:`gate.normalize.normalize`; the patterns
are folded the same way) and holds when it

- asks for someone or somewhere to turn to (who can I talk to, a helpline, "à qui parler",
  "besoin d'aide"...),
- is the asker's own crisis (a ``self_harm`` hit, or the first-person words of one: "I want to die",
  "I've been thinking about killing myself", "je pense à en finir"; a friend's crisis, a helpline
  number for a resources page or a game about suicide are questions the bot answers),
- and asks for no method, amount or way of hiding it (those keep the ``self_harm`` refusal, whose
  reply carries the same helplines).
"""

from __future__ import annotations

import re

from gate.normalize import fold_pattern

SUPPORT = "support"
"""The rule id, category, reply table and ``GateDecision.kind`` of a support decision."""


def _joined(*patterns: str) -> str:
    """The patterns as one alternation, folded like the text they read."""
    return "|".join(f"(?:{fold_pattern(p)})" for p in patterns)


_HELP = re.compile(
    _joined(
        r"\b(?:who|where|someone|somebody|anyone|anybody|a person|people)\b[^.!?]{0,40}"
        r"\b(?:talk|speak|turn|reach out|call|text|confide)\b",
        r"\b(?:hotline|helpline|help line|crisis line|crisis text|suicide line|lifeline|samaritans|988|"
        r"therapist|counsellor|counselor|counselling|counseling)\b",
        r"\b(?:need|needs|get|find|ask for|seek|looking for)\b (?:some |real |professional )?help\b",
        r"\bwhere (?:can|do|should|could) (?:i|we|he|she|they) (?:go|turn)\b",
        r"\ba qui\b[^.!?]{0,40}\b(?:parler|adresser|confier|tourner|appeler|ecrire)\b",
        r"\b(?:parler|en parler|me confier|appeler|contacter)\b[^.!?]{0,20}"
        r"\b(?:quelqu'un|quelquun|qqn|une personne|un pro\w*|un psy\w*|un medecin)\b",
        r"\b(?:numero|ligne) (?:d'ecoute|d'aide|d'urgence|a appeler|pour parler)\b|\b(?:ligne d'ecoute|3114|"
        r"sos amitie|suicide ecoute|psychologue)\b",
        r"\bbesoin (?:d'aide|de parler|d'en parler|de quelqu'un)\b",
        r"\b(?:trouver|obtenir|demander) de l'aide\b",
        r"\bqui (?:peut|pourrait) m'aider\b|\bou (?:trouver|chercher) de l'aide\b",
    )
)
# The asker's own crisis, in the first person ("a friend is suicidal", "suicide prevention" or a game
# about suicide are questions to answer, not a crisis to meet).
_CRISIS = re.compile(
    _joined(
        r"\b(?:i|i'm|im|i am|i've|ive|i have|i feel|i keep|i've been|i have been)\b[^.!?]{0,30}"
        r"\b(?:suicidal|suicide|kill(?:ing)? my ?self|end(?:ing)? (?:my life|it all)|to die|"
        r"(?:hurt|hurting|harm|harming|cut|cutting) my ?self|self[- ]?harm\w*|"
        r"(?:want|wanna) to disappear)\b",
        r"\bdon'?t want to (?:live|be alive|exist|be here) anymore\b",
        r"\b(?:je|j'|j'ai|moi)\b[^.!?]{0,30}\b(?:me tuer|me suicider|suicide|suicidaire|en finir|mourir|"
        r"me faire du mal|me scarifier|plus envie de vivre|idees noires|idees suicidaires|disparaitre)\b",
        r"\bmes (?:idees noires|idees suicidaires|pensees suicidaires)\b",
    )
)
_METHOD = re.compile(
    _joined(
        r"\b(?:how (?:many|much)|what dose|which (?:pills|drugs|medication|meds)|dose|dosage|overdose|od|"
        r"lethal|fatal|painless\w*|quickest|fastest|easiest|surest|best way|least painful|method\w*|"
        r"rope|noose|hang|hanging|bridge|jump|pills|meds|medication|bleach|razor|blade|hide|conceal|"
        r"cover up)\b",
        r"\b(?:how (?:do|can|could|would|should) i|how to|way to|ways to)\b (?:kill|end|hurt|cut|die|harm)\b",
        r"\b(?:combien|quelle dose|dose|sans douleur|sans souffrir|methode\w*|moyen de|comment (?:me tuer|"
        r"mourir|en finir|me suicider|me pendre|me couper)|cachets|medicaments|pendre|pendaison|corde|"
        r"sauter|pont|lame|rasoir|cacher|dissimuler|plus rapide|rapidement|fa[cs]on de|encourage\w*|"
        r"tenir jusqu|kilos|arreter de manger|pas de numero|sans numero)\b",
        r"\b(?:no|don'?t give me|without) (?:a |the |any )?(?:hotline|helpline|number|numbers)\b",
        r"\b(?:figur\w* out|find\w* out|notic\w*|without (?:\w+ ){0,2}knowing|(?:nobody|no one) knows|"
        r"se rende\w* compte|s'en apercev\w*|sache\w*)\b",
    )
)


# Someone else's words, quoted ("he wrote « je vais en finir »"): not the asker's crisis.
_QUOTED = re.compile(r"«[^«»]*»|“[^“”]*”|\"[^\"]*\"")
# "Not suicidal, just empty": the words of a crisis, denied.
_DENIED = re.compile(_joined(r"\bnot (?:suicidal|going to (?:hurt|kill)|planning to)\b|\bpas suicidaire\b"))


def seeks_support(normalized: str, *, in_crisis: bool) -> bool:
    """Whether the normalised question asks where to find help in a crisis, and for no method.

    ``in_crisis``: a layer already read the question as self-harm (its crisis words are then not
    needed)."""
    if _HELP.search(normalized) is None:
        return False
    if not in_crisis:
        own = (
            _QUOTED.sub(" ", normalized)
            if ("«" in normalized or '"' in normalized or "“" in normalized)
            else normalized
        )
        if _CRISIS.search(own) is None or _DENIED.search(own) is not None:
            return False
    return _METHOD.search(normalized) is None
