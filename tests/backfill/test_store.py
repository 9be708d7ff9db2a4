"""The rows the bulk write path stores: the same values whichever way a row is written, stored plainly."""

from __future__ import annotations

import dataclasses

import numpy as np
import psycopg
import pytest

from backfill.prepare import PreparedPost, Preparer, Truncator
from backfill.store import IndexStore, pack_halfvecs
from tests.backfill.conftest import TEST_MODEL, make_post
from worker.db.connect import connect
from worker.settings import DatabaseSettings
from worker.testing.models import FakeEmbedder

pytestmark = pytest.mark.integration

# Every column but the write time: what a reader of the index can see.
_ROW = (
    "SELECT post_id, topic_id, post_number, topic_slug, topic_title, category_id, tags, post_type,"
    " reply_to_post_number, username, text, digest, model, embedding::text, source_updated_at, source,"
    " lexical::text FROM post_index WHERE post_id = ANY(%s) ORDER BY post_id"
)
_LONG = " ".join(f"The shader compiles variant {k} when the light casts shadows." for k in range(20))


def _prepared(ids: range) -> list[PreparedPost]:
    preparer = Preparer(TEST_MODEL, Truncator(256))
    out = []
    for i in ids:
        text = f"{_LONG} Post {i} &amp; more, see <code>Node::Update</code>."
        post = make_post(i, topic_id=1 + i // 3, text=text)
        if i % 2:
            post = dataclasses.replace(
                post, tags=("widgets", "rendering"), reply_to_post_number=1, username=None
            )
        prepared = preparer.prepare(post)
        assert not isinstance(prepared, str)
        out.append(prepared)
    return out


def _rows(db_url: str, ids: list[int]) -> list[tuple[object, ...]]:
    with psycopg.connect(db_url) as conn:
        return conn.execute(_ROW, (ids,)).fetchall()


def test_copy_direct_copy_staged_and_plain_insert_store_the_same_rows(db_url: str) -> None:
    embedder = FakeEmbedder(model=TEST_MODEL, dimension=8)
    posts = _prepared(range(1, 7))
    vectors = embedder.embed_array([p.text for p in posts])
    with connect(DatabaseSettings(url=db_url)) as conn:  # type: ignore[call-arg]
        store = IndexStore(conn, TEST_MODEL)
        # Posts 1-2 through the direct COPY of a fresh page, 3-4 through staging + upsert (the page is
        # not fresh), 5-6 through the plain INSERTs of the incremental path.
        store.write_batch(
            posts[0:2], vectors[0:2], lo=1, hi=2, keep=[1, 2], source_key="db", cursor=None,
            stats={"removed": 0.0}, fresh=True,
        )  # fmt: skip
        store.write_batch(
            posts[2:4], vectors[2:4], lo=3, hi=4, keep=[3, 4], source_key="db", cursor=None,
            stats={"removed": 0.0},
        )  # fmt: skip
        store.upsert_rows(posts[4:6], vectors[4:6])
    bulk = _rows(db_url, [1, 2, 3, 4])
    # The same posts written by the plain INSERTs, under other ids, are the reference.
    moved = [
        dataclasses.replace(p, post=dataclasses.replace(p.post, post_id=p.post.post_id + 100)) for p in posts
    ]
    with connect(DatabaseSettings(url=db_url)) as conn:  # type: ignore[call-arg]
        IndexStore(conn, TEST_MODEL).upsert_rows(moved[0:4], vectors[0:4])
    reference = [(r[0] - 100, *r[1:]) for r in _rows(db_url, [101, 102, 103, 104])]  # type: ignore[operator]
    assert bulk == reference
    assert len(bulk) == 4
    # The vectors are the model's, rounded to half precision, and the lexical column is filled.
    stored = np.array([str(r[13]).strip("[]").split(",") for r in bulk], np.float32).astype(np.float16)
    assert np.array_equal(stored, np.asarray(vectors[0:4]).astype(np.float16))
    assert all("'shader':" in str(r[16]) for r in bulk)


def test_pack_halfvecs_is_pgvectors_binary_form() -> None:
    packed = pack_halfvecs(np.array([[1.0, -2.0, 0.5]], np.float32))
    assert packed == [b"\x00\x03\x00\x00" + np.array([1.0, -2.0, 0.5], ">f2").tobytes()]
