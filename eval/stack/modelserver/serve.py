"""``citebot models serve``: the TEI-contract model server over local models. The command line is
parsed, and logging configured, by ``worker.app.commands.models``."""

from __future__ import annotations

import argparse

from eval.stack.modelserver.app import Limits
from eval.stack.modelserver.server import serve as serve_http


def serve(args: argparse.Namespace) -> int:
    """The handler of ``citebot models serve`` (arguments parsed by ``worker.app.commands.models``)."""
    print(f"model server on http://{args.host}:{args.port} (loading models…)", flush=True)
    serve_http(
        args.host,
        args.port,
        embed_model=args.embed_model,
        cross_encoder=args.cross_encoder,
        limits=Limits(max_client_batch_size=args.max_client_batch_size),
    )
    return 0
