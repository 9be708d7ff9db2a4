"""The soak's TEI + OpenAI double in its own process: ``worker.testing.server.ModelDouble``.

``python -m eval.soak.models --port P [--llm-latency-ms X]`` serves ``/embed``, ``/rerank``, ``/info``,
``/health`` (TEI) and ``/v1/chat/completions`` (OpenAI). ``POST /__faults`` with a JSON object sets
``llm_status`` / ``tei_status`` (200: healthy; 429 answers with ``Retry-After: 1``) and
``llm_latency_ms`` / ``tei_latency_ms``; ``GET /__faults`` reads them with the call counters.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from worker.testing.models import FakeEmbedder
from worker.testing.server import Knobs, ModelDouble

MODEL = "soak-model"
DIMENSION = 8
EMBEDDER = FakeEmbedder(model=MODEL, dimension=DIMENSION)  # the double's vectors, for indexing the sample


def main(argv: Sequence[str] | None = None) -> int:
    import uvicorn

    parser = argparse.ArgumentParser(prog="python -m eval.soak.models")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--llm-latency-ms", type=float, default=0.0)
    args = parser.parse_args(argv)
    double = ModelDouble(model=MODEL, dimension=DIMENSION, knobs=Knobs(llm_latency_ms=args.llm_latency_ms))
    uvicorn.run(double.app, host="127.0.0.1", port=args.port, access_log=False, log_config=None)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
