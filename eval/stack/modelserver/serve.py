"""``citebot models serve`` (also ``python -m eval.stack.modelserver serve``): the TEI-contract model
server over local models. The command line is parsed by ``worker.commands.models``."""

from __future__ import annotations

import argparse

from eval.stack.modelserver.app import Limits
from eval.stack.modelserver.server import serve as serve_http
from worker.commands.common import settings_from


def serve(args: argparse.Namespace) -> int:
    """The handler of ``citebot models serve`` (arguments parsed by ``worker.commands.models``)."""
    settings_from(args)  # configures logging; the server itself needs no citebot settings
    print(f"model server on http://{args.host}:{args.port} (loading models…)", flush=True)
    serve_http(
        args.host,
        args.port,
        embed_model=args.embed_model,
        cross_encoder=args.cross_encoder,
        limits=Limits(max_client_batch_size=args.max_client_batch_size),
    )
    return 0
