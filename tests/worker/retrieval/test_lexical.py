"""The lexical channel over post_index (real PostgreSQL, migration 0003's generated column)."""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest
from pgvector.psycopg import register_vector

from tests.worker.retrieval.doubles import angle_vector, describe_category, insert_post
from worker.retrieval.lexical import (
    WEIGHTS,
    LexemeStats,
    PostgresLexicalIndex,
    clean_question,
    is_code_or_log,
    match_terms,
    tsquery_any,
)
from worker.retrieval.recall import single_connection


def test_clean_question_keeps_the_prose() -> None:
    text = (
        "Hi all,\n\nMy shadows flicker on a directional light.\n"
        "```cpp\nlight->SetShadowBias(BiasParameters(0.0001f, 0.5f));\n```\n"
        "ERROR: Could not find resource Textures/Ramp.png\n"
        "  at Urho3D::Renderer::Render() (Renderer.cpp:512)\n"
        "See https://example.com/shot.png and `SetDepthBias()` - any idea?"
    )
    cleaned = clean_question(text)
    assert cleaned.startswith("My shadows flicker on a directional light.")
    for gone in ("Hi all", "SetShadowBias", "ERROR", "Renderer.cpp", "example.com", "SetDepthBias"):
        assert gone not in cleaned
    assert "any idea?" in cleaned


@pytest.mark.parametrize(
    ("line", "code"),
    [
        ("node->SetPosition(Vector3(0, 1, 0));", True),
        ("C:\\Urho3D\\Build\\lib\\libUrho3D.a", True),
        ("[ 45%] Building CXX object Source/Urho3D/CMakeFiles/Urho3D.dir/Graphics/Light.cpp.o", True),
        ("How do I move a node smoothly towards a target?", False),
        ("I tried the sample but the model stays black.", False),
    ],
)
def test_code_and_log_lines(line: str, code: bool) -> None:
    assert is_code_or_log(line) is code


def test_tsquery_quotes_every_lexeme() -> None:
    assert tsquery_any(["shadow", "o'neil"]) == "'shadow' | 'o''neil'"


def test_idf_orders_rare_above_common() -> None:
    stats = LexemeStats(total=100, counts={"rare": 1, "common": 60})
    assert stats.idf("rare") > stats.idf("common") > 0


def test_match_terms_read_the_rarest_within_the_budget() -> None:
    stats = LexemeStats(total=1000, counts={"rare": 5, "mid": 300, "common": 600})
    terms = [("rare", 5.0), ("mid", 1.2), ("common", 0.5)]  # rarest first, as ``terms`` gives them
    assert match_terms(terms, stats, posts=1000, budget=400) == ["rare", "mid"]
    # the sample is a tenth of the index: ten times the postings
    assert match_terms(terms, stats, posts=10_000, budget=400) == ["rare"]
    assert match_terms(terms, stats, posts=1000, budget=1) == ["rare"]  # at least the rarest
    assert match_terms(terms, None, posts=1000, budget=1) == ["rare", "mid", "common"]


@pytest.fixture
def conn(db_url: str) -> Iterator[psycopg.Connection]:
    with psycopg.connect(db_url, autocommit=True) as c:
        register_vector(c)
        yield c


def fill(conn: psycopg.Connection) -> None:
    rows = [
        (1, 1, "Shadow acne on a directional light", "How do I get rid of shadow acne?"),
        (2, 1, "Shadow acne on a directional light", "Raise the depth bias of the light."),
        (3, 2, "Loading a scene", "The shadow of my model disappears after loading the scene."),
        (4, 3, "Sound stutters", "My sound stutters when the frame rate drops."),
        (5, 4, "Bias in physics", "Constraint bias makes the ragdoll jitter; lower the ERP."),
    ]
    for post_id, topic, title, body in rows:
        insert_post(conn, post_id, angle_vector(post_id), topic_id=topic, title=title, text=body)


@pytest.mark.integration
def test_search_ranks_title_hits_first_and_skips_excluded_and_restricted(conn: psycopg.Connection) -> None:
    fill(conn)
    index = PostgresLexicalIndex(single_connection(conn))
    result = index.search("Hello! Shadow acne: what depth bias?", 10, exclude_post_ids=[1])
    ids = [c.post_id for c in result.candidates]
    assert ids[0] == 2  # title and body words ("shadow acne" in the title, "depth bias" in the text)
    assert 1 not in ids  # excluded (the question's own post)
    assert 4 not in ids  # shares no word
    assert [c.lexical_rank for c in result.candidates] == list(range(1, len(ids) + 1))
    scores = [c.lexical or 0.0 for c in result.candidates]
    assert scores == sorted(scores, reverse=True)
    assert {t for t, _ in result.terms} >= {"shadow", "acn", "bias"}  # English stems
    # the same terms score posts found by another channel alike
    again = index.scores(result.terms, [2, 4, 5])
    assert again[2] == pytest.approx(result.candidates[0].lexical or 0.0)
    assert 4 not in again
    describe_category(conn, 7, restricted=True)
    conn.execute("UPDATE post_index SET category_id = 7 WHERE post_id = 2")
    assert 2 not in [c.post_id for c in index.search("shadow acne depth bias", 10).candidates]


@pytest.mark.integration
def test_a_title_hit_outweighs_a_body_hit(conn: psycopg.Connection) -> None:
    insert_post(conn, 1, angle_vector(1), topic_id=1, title="Terrain collision", text="It falls.")
    insert_post(conn, 2, angle_vector(2), topic_id=2, title="Falling objects", text="terrain collision")
    insert_post(conn, 3, angle_vector(3), topic_id=3, title="Unrelated", text="nothing in common here")
    index = PostgresLexicalIndex(single_connection(conn))
    ids = [c.post_id for c in index.search("terrain collision", 10).candidates]
    assert ids == [1, 2]


@pytest.mark.integration
def test_nothing_to_search_returns_nothing(conn: psycopg.Connection) -> None:
    fill(conn)
    index = PostgresLexicalIndex(single_connection(conn))
    assert index.search("Hello, thanks!", 10).candidates == ()


REFERENCE_SQL = """
SELECT p.post_id, sum(t.idf * ts_rank(%(weights)s::float4[], p.lexical, quote_literal(t.term)::tsquery, 1))
FROM post_index p CROSS JOIN unnest(%(terms)s::text[], %(idf)s::float8[]) AS t(term, idf)
WHERE p.lexical @@ quote_literal(t.term)::tsquery
GROUP BY p.post_id
"""


@pytest.mark.integration
def test_scores_are_the_sum_over_terms_and_the_budget_only_narrows_what_is_read(
    conn: psycopg.Connection,
) -> None:
    fill(conn)
    stats = LexemeStats(total=5, counts={"shadow": 3, "acn": 2, "depth": 1, "bias": 2, "light": 2})
    whole = PostgresLexicalIndex(single_connection(conn), stats=lambda: stats)
    result = whole.search("shadow acne depth bias", 10)
    terms = dict(result.terms)
    reference = {
        int(r[0]): float(r[1])
        for r in conn.execute(
            REFERENCE_SQL, {"weights": WEIGHTS, "terms": list(terms), "idf": list(terms.values())}
        )
    }
    assert {c.post_id: c.lexical for c in result.candidates} == pytest.approx(reference)
    assert set(reference) == {1, 2, 3, 5}
    # a budget of one posting reads the rarest term's posts ("depth": post 2) and scores them whole
    narrow = PostgresLexicalIndex(single_connection(conn), stats=lambda: stats, budget=1)
    only = narrow.search("shadow acne depth bias", 10).candidates
    assert [c.post_id for c in only] == [2]
    assert only[0].lexical == pytest.approx(reference[2])
