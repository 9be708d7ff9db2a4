"""``rank_answers``: which post of a hit topic the legacy path cites (worker/retrieval/legacy.py)."""

from __future__ import annotations

from worker.domain import ForumPost, ForumTopic
from worker.retrieval.legacy import rank_answers

BOTS = ("citebot",)


def post(n: int, username: str, text: str = "an answer", **fields: object) -> ForumPost:
    values: dict[str, object] = {"user_id": 10 + n, "cooked": f"<p>{text}</p>", **fields}
    return ForumPost(id=100 + n, topic_id=1, post_number=n, username=username, **values)  # type: ignore[arg-type]


def topic(*posts: ForumPost) -> ForumTopic:
    return ForumTopic(1, "Shadows", "shadows", 1, posts=posts)


def numbers(t: ForumTopic) -> list[int]:
    return [p.post_number for p in rank_answers(t, BOTS)]


def test_the_accepted_solution_comes_first_whoever_wrote_it() -> None:
    t = topic(
        post(1, "asker", "how?"),
        post(2, "bob", like_count=9),
        post(3, "asker", "solved it myself", accepted_answer=True),
    )
    assert numbers(t) == [3, 2]


def test_otherwise_the_best_liked_then_the_earliest_reply_by_another_member() -> None:
    t = topic(
        post(1, "asker", "how?"),
        post(2, "bob"),
        post(3, "asker", "thanks, still broken"),
        post(4, "carol", like_count=2),
        post(5, "dave"),
    )
    assert numbers(t) == [4, 2, 5]


def test_the_question_the_bot_and_posts_to_the_bot_are_never_answers() -> None:
    mention = '<p><a class="mention" href="/u/citebot">@citebot</a> how do I fix this?</p>'
    t = topic(
        post(1, "asker", "how?"),
        post(2, "citebot", "Here is what the forum says"),
        ForumPost(id=103, topic_id=1, post_number=3, username="bob", user_id=13, cooked=mention),
        post(4, "carol", "thanks bot", reply_to_post_number=2),  # quotes the bot: no reply_to_user
        post(5, "dave", "thanks", reply_to_username="citebot", reply_to_post_number=2),
        post(6, "erin", "whisper", post_type=4),
        post(7, "frank", "hidden", hidden=True),
        post(8, "gina", "deleted", deleted=True),
        post(9, "system", "closed", user_id=-1),
    )
    assert numbers(t) == []


def test_an_unanswered_question_has_no_answer() -> None:
    assert numbers(topic(post(1, "asker", "how?"))) == []
    assert numbers(topic(post(1, "asker", "how?"), post(2, "asker", "bump"))) == []
