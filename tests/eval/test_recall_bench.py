"""The recall bench's index cache and its plot's extrapolation (issue 18)."""

from __future__ import annotations

import psycopg
import pytest

from eval.bench import _recall_corpus as rc
from eval.bench.recall import extrapolate, merge_runs
from worker.db.vector_index import hnsw_options, index_ddl


def test_hnsw_options_read_the_ddl() -> None:
    assert hnsw_options("binary") == {"m": "16", "ef_construction": "128"}
    assert f"WITH (m = {hnsw_options('halfvec')['m']}," in index_ddl("halfvec", 8)


@pytest.mark.integration
def test_an_index_built_with_other_graph_parameters_is_built_again(db_url: str) -> None:
    """Before: the cache took any index of the kind's name, so a changed HNSW_WITH was never measured."""
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("DROP INDEX IF EXISTS post_index_embedding_hnsw")
        conn.execute("CREATE TABLE bench_indexes (kind text PRIMARY KEY, build_s float8)")
        conn.execute("INSERT INTO bench_indexes VALUES ('halfvec', 12.5)")
        conn.execute(
            "CREATE INDEX post_index_embedding_hnsw ON post_index USING hnsw (embedding halfvec_cosine_ops)"
            " WITH (m = 8, ef_construction = 32)"
        )
        assert rc.built_indexes(db_url) == {}
        conn.execute("DROP INDEX post_index_embedding_hnsw")
        conn.execute(index_ddl("halfvec", 8))
        assert rc.built_indexes(db_url) == {"halfvec": 12.5}


def test_extrapolation_follows_the_measured_log_log_slope() -> None:
    # Linear in the size: twice the posts, twice the value; a square root: ×√2.
    assert extrapolate([(100_000, 1.0), (1_000_000, 10.0)], 2_000_000) == pytest.approx(20.0)
    assert extrapolate([(100_000, 1.0), (400_000, 2.0)], 1_600_000) == pytest.approx(4.0)
    # Nothing to extrapolate from one size, or to a size already measured.
    assert extrapolate([(425_000, 2.0)], 2_000_000) is None
    assert extrapolate([(100_000, 1.0), (1_000_000, 10.0)], 1_000_000) is None


def test_later_runs_replace_a_kind_at_a_size() -> None:
    old = {
        "sizes": [{"n": 10, "brute_force_p50_ms": 5.0, "kinds": {"halfvec": {"v": 1}, "binary": {"v": 2}}}]
    }
    new = {
        "sizes": [
            {"n": 10, "brute_force_p50_ms": 4.0, "kinds": {"halfvec": {"v": 3}}},
            {"n": 20, "kinds": {}},
        ]
    }
    merged = merge_runs([old, new])
    assert [m["n"] for m in merged] == [10, 20]
    assert merged[0]["kinds"] == {"halfvec": {"v": 3}, "binary": {"v": 2}}
    assert merged[0]["brute_force_p50_ms"] == 4.0
