"""One eligibility condition (``worker.retrieval.eligibility.ELIGIBLE``), composed into every retrieval
query that returns posts; no module spells its own copy."""

from __future__ import annotations

import importlib
import pkgutil
import re
from pathlib import Path

import pytest

import worker.retrieval
from worker.retrieval.eligibility import CITABLE_CATEGORIES_SQL, ELIGIBLE
from worker.retrieval.lexical import search_sql
from worker.retrieval.recall import recall_sql

# Queries over post_index that need not filter, and why. Anything else that reads post_index must.
UNFILTERED = {
    # the cosine of posts another channel found, each already filtered by its own query
    "worker.retrieval.recall.COSINES_SQL",
    # the lexical score of posts another channel found, likewise
    "worker.retrieval.lexical.SCORES_SQL",
}
READS_POSTS = re.compile(r"\b(FROM|JOIN)\s+post_index\b")


def _modules() -> list[str]:
    return sorted(f"worker.retrieval.{m.name}" for m in pkgutil.iter_modules(worker.retrieval.__path__))


def _queries() -> dict[str, str]:
    found = {}
    for name in _modules():
        module = importlib.import_module(name)
        for key, value in vars(module).items():
            if key.endswith("_SQL") and isinstance(value, str) and READS_POSTS.search(value):
                found[f"{name}.{key}"] = value
    return found


def test_the_retrieval_queries_are_found() -> None:
    """The scan below sees the queries it is meant to check (a renamed constant would escape it)."""
    assert {
        "worker.retrieval.recall.RECALL_SQL",
        "worker.retrieval.recall.BINARY_RECALL_SQL",
        "worker.retrieval.recall.POSTS_SQL",
        "worker.retrieval.recall.CITABLE_TOPICS_SQL",
        "worker.retrieval.recall.NEIGHBOURS_SQL",
        "worker.retrieval.lexical.SEARCH_SQL",
        "worker.retrieval.threads.THREAD_SQL",
    } <= set(_queries())
    assert set(_queries()) >= UNFILTERED


@pytest.mark.parametrize("query", sorted(set(_queries()) - UNFILTERED))
def test_every_retrieval_query_composes_the_one_eligibility_condition(query: str) -> None:
    assert ELIGIBLE in _queries()[query]


def test_the_queries_built_at_run_time_keep_it() -> None:
    assert ELIGIBLE in recall_sql("binary", 384)
    assert ELIGIBLE in recall_sql("halfvec", 384)
    assert ELIGIBLE in search_sql(3)


@pytest.mark.parametrize("module", _modules())
def test_no_retrieval_module_spells_its_own_copy(module: str) -> None:
    """The allow-list view is named in SQL only by ``worker.retrieval.eligibility``."""
    if module == "worker.retrieval.eligibility":
        return
    source = Path(importlib.import_module(module).__file__ or "").read_text(encoding="utf-8")
    assert not re.search(r"FROM\s+citable_categories", source, re.IGNORECASE)
    assert "category_id + 0" not in source


def test_the_condition_reads_the_view_once_as_a_plain_filter() -> None:
    """The planner's spelling (module docstring): an InitPlan over the view, the b-tree kept out."""
    assert ELIGIBLE == "p.category_id + 0 = ANY(ARRAY(SELECT category_id FROM citable_categories))"
    assert CITABLE_CATEGORIES_SQL in ELIGIBLE
