"""The recall bench's index cache and its plot's extrapolation (issue 18)."""

from __future__ import annotations

from typing import Any, cast

import psycopg
import pytest

from eval.bench import _recall_corpus as rc
from eval.bench.recall import extrapolate, merge_runs, plotted
from eval.stack.postgres import EmbeddedPostgres
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


def result(knob: str, huge: str | None, *, default: bool = True, filtered: str = "none") -> dict[str, Any]:
    r: dict[str, Any] = {"knob": knob, "default": default, "filter": filtered, "p50_ms": 1.0}
    if huge is not None:
        r["huge_pages"] = huge
    return r


def test_the_huge_page_modes_of_one_run_add_up() -> None:
    """``--huge-pages off,on``: the second mode's results join the first's instead of replacing them."""
    off = {"sizes": [{"n": 10, "kinds": {"halfvec": {"build_s": 1, "results": [result("ef", "off")]}}}]}
    on = {"sizes": [{"n": 10, "kinds": {"halfvec": {"build_s": 1, "results": [result("ef", "on")]}}}]}
    merged = merge_runs([off, on], append=True)
    assert [r["huge_pages"] for r in merged[0]["kinds"]["halfvec"]["results"]] == ["off", "on"]
    assert [r["huge_pages"] for r in merge_runs([off, on])[0]["kinds"]["halfvec"]["results"]] == ["on"]


def test_the_plot_shows_the_default_unfiltered_result_with_huge_pages_where_measured() -> None:
    results = [
        result("ef=25", "off", default=False),
        result("ef=40", "off"),
        result("ef=40", "on", filtered="10%"),
        result("ef=40", "on"),
    ]
    assert plotted(results) is results[3]
    assert plotted(results[:3]) is results[1]
    older = [result("ef=40", None)]  # a saved run from before huge pages were recorded
    assert plotted(older) is older[0]
    assert plotted([result("ef=25", "on", default=False)]) is None


@pytest.mark.integration
def test_huge_pages_on_is_refused_before_a_restart_when_the_os_reserved_too_few(
    pg_server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The server would not start with huge_pages = on and too few reserved: the bench says what to
    reserve, and leaves the server as it was (no restart, nothing written)."""
    monkeypatch.setattr(rc, "reserved_huge_pages", lambda: 0)
    never = cast(EmbeddedPostgres, None)  # the refusal comes before any restart
    with pytest.raises(SystemExit, match=r"needs \d+ huge pages, the OS has reserved 0; .*vm.nr_hugepages="):
        rc.set_huge_pages(never, pg_server, "on")
    with pytest.raises(SystemExit, match="'sometimes' is not one of off, try, on"):
        rc.set_huge_pages(never, pg_server, "sometimes")
    with psycopg.connect(pg_server, autocommit=True) as conn:
        assert conn.execute("SELECT count(*) FROM pg_file_settings WHERE name = 'huge_pages'").fetchone() == (
            0,
        )
    assert rc.huge_pages_status(pg_server) in ("on", "off")
