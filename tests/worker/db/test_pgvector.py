from __future__ import annotations

import numpy as np
import pytest
from pgvector import HalfVector

from tests.conftest import make_settings
from worker.db.connect import connect

pytestmark = pytest.mark.integration


def unit(v: list[float]) -> HalfVector:
    a = np.asarray(v, dtype=np.float32)
    return HalfVector(a / np.linalg.norm(a))


def test_halfvec_hnsw_cosine_orders_by_similarity(db_url: str) -> None:
    settings = make_settings(db_url, "redis://127.0.0.1:1/0")
    rows = {
        1: [1, 0, 0, 0, 0, 0, 0, 0],
        2: [1, 1, 0, 0, 0, 0, 0, 0],
        3: [0, 1, 0, 0, 0, 0, 0, 0],
        4: [-1, 0, 0, 0, 0, 0, 0, 0],
    }
    with connect(settings.database) as conn:
        for post_id, vec in rows.items():
            conn.execute(
                "INSERT INTO post_index (post_id, topic_id, post_number, topic_slug, topic_title, text,"
                " digest, model, embedding) VALUES (%s, %s, 1, 's', 't', 'x', '\\x00', 'test-model', %s)",
                (post_id, post_id, unit(vec)),
            )
        conn.execute("SET enable_seqscan = off")  # make the planner use the HNSW index on 4 rows
        query = unit([1, 0.1, 0, 0, 0, 0, 0, 0])
        plan = conn.execute(
            "EXPLAIN SELECT post_id FROM post_index ORDER BY embedding <=> %s LIMIT 3", (query,)
        ).fetchall()
        got = conn.execute(
            "SELECT post_id, embedding <=> %s FROM post_index ORDER BY embedding <=> %s LIMIT 4",
            (query, query),
        ).fetchall()
    assert any("post_index_embedding_hnsw" in line[0] for line in plan)
    assert [r[0] for r in got] == [1, 2, 3, 4]
    distances = [r[1] for r in got]
    assert distances == sorted(distances)
    assert distances[-1] == pytest.approx(2.0 - distances[0], abs=0.01)
