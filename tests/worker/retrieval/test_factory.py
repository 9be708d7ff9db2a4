from __future__ import annotations

import httpx
import psycopg
import pytest
from pgvector.psycopg import register_vector

from tests.conftest import make_settings
from tests.worker.retrieval.doubles import CannedSearch, angle_vector, hit, insert_post
from worker.clients.tei import TeiReranker
from worker.errors import IndexMismatchError
from worker.retrieval.factory import build_retriever
from worker.retrieval.recall import single_connection
from worker.retrieval.route import Route
from worker.testing.models import FakeEmbedder

pytestmark = pytest.mark.integration


def test_built_from_settings_and_runs(db_url: str) -> None:
    settings = make_settings(db_url, "redis://127.0.0.1:1/0", retrieval={"sources_k": 2})
    with psycopg.connect(db_url, autocommit=True) as conn:
        register_vector(conn)
        for n, text in enumerate(["shadowmapping bias", "shadowmapping cascades", "shadowmapping"], start=1):
            insert_post(conn, n, angle_vector(10 * n), text=text)
        embedder = FakeEmbedder(model="test-model", table={"shadowmapping bias?": angle_vector(0)})
        retriever = build_retriever(
            settings,
            connections=single_connection(conn),
            keyword=CannedSearch(default=[hit(3, 3)]),
            embedder=embedder,
        )
        with retriever:
            assert retriever.reranker is None  # no reranker URL configured
            # Discourse search fused as a channel (the eval's route; the shipped one leaves it out)
            result = retriever.retrieve("shadowmapping bias?", route=Route(lexical=False, keyword=True))
        # Term statistics come from the index: "bias" (1 post) is rarer than "shadowmapping" (3), although
        # shorter — without the statistics, the longer word would come first.
        assert retriever.terms.select("shadowmapping bias?") == ["bias", "shadowmapping"]
    # Post 3: 1/63 (vector rank 3) + 1/61 (keyword rank 1) beats post 1: 1/61 (vector rank 1 only).
    assert [s.post_id for s in result.sources] == [3, 1]
    assert result.grain == "post"
    # no stage weights for test-model, no reranker: the fused order is the path, not a fallback
    assert result.trace.info["config"]["ranker"] == "fused"
    assert result.trace.fallbacks == []


def test_reranker_from_settings_and_model_check(db_url: str) -> None:
    settings = make_settings(db_url, "redis://127.0.0.1:1/0", reranker={"base_url": "http://127.0.0.1:9/"})
    with psycopg.connect(db_url, autocommit=True) as conn, httpx.Client() as http:
        retriever = build_retriever(
            settings,
            connections=single_connection(conn),
            keyword=None,
            http=http,
            embedder=FakeEmbedder(model="test-model"),
        )
        assert isinstance(retriever.reranker, TeiReranker)
        retriever.close()
        with pytest.raises(IndexMismatchError):
            build_retriever(
                settings,
                connections=single_connection(conn),
                keyword=None,
                embedder=FakeEmbedder(model="another-model"),
            )


def test_the_index_is_checked_as_the_retriever_is_built(db_url: str) -> None:
    """A process configured for another model or vector index kind than the index's fails as it is
    assembled, not at its first question: no question reads index_meta."""
    settings = make_settings(db_url, "redis://127.0.0.1:1/0")
    with psycopg.connect(db_url, autocommit=True) as conn:
        for model, kind, message in [
            ("changed-since", "halfvec", "changed-since"),
            ("test-model", "binary", "binary vector index"),
        ]:
            conn.execute("UPDATE index_meta SET model = %s, vector_index = %s", (model, kind))
            with pytest.raises(IndexMismatchError, match=message):
                build_retriever(
                    settings,
                    connections=single_connection(conn),
                    keyword=None,
                    embedder=FakeEmbedder(model="test-model"),
                )
