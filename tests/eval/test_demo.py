"""``make demo``: its pieces (links, stage timings, process groups, the shipped sample) and, in CI, the
whole demo end to end as a newcomer runs it (``python -m eval.demo``), within its time budget."""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from eval.demo.member import cited_topic, links_in
from eval.demo.run import QUESTIONS, ROOT, SAMPLE
from eval.demo.sample import DEMO_TOPICS, build_sample
from eval.demo.show import stage_line
from eval.stack.procs import DemoError, Processes, stop_saved
from tests.services import run_stack, unavailable


def test_links_in_reads_the_server_written_links_once_each() -> None:
    raw = (
        "- Use the AssetImporter [1](http://127.0.0.1:4200/t/fbx-import/4413/3)\n"
        "- Again [1](http://127.0.0.1:4200/t/fbx-import/4413/3) and a topic [2](/t/other-topic/999)\n"
        "- not a citation: [docs](https://example.org/guide) and /t/bare/1/2"
    )
    assert links_in(raw) == ["http://127.0.0.1:4200/t/fbx-import/4413/3", "/t/other-topic/999"]


def test_cited_topic_reads_the_topic_id_of_a_citation_link() -> None:
    assert cited_topic("http://127.0.0.1:4200/t/fbx-import/4413/3") == 4413
    assert cited_topic("/t/other-topic/999") == 999
    assert cited_topic("https://example.com/docs") is None


def test_the_demo_expects_its_answerable_question_to_cite_the_fbx_topic() -> None:
    assert QUESTIONS[0].expect_topic == DEMO_TOPICS[0] == 4413
    assert QUESTIONS[1].expect_topic == 0  # the cake: nothing to cite


def test_stage_line_lists_the_stages_in_order_with_the_post_stage_last() -> None:
    trace = {
        "stages": [
            {"name": "gate", "duration_ms": 0.12},
            {"name": "rerank", "duration_ms": 1871.4},
            {"name": "generate", "duration_ms": 12.0},
        ],
        "post": {"duration_ms": 36.2},
    }
    assert stage_line(trace) == "gate 0.1 ms · rerank 1871 ms · generate 12 ms · post 36 ms"
    assert stage_line({}) == "(no stage timings recorded)"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie still answers kill(0); it is dead for our purpose
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().split()[2] != "Z"


def test_stop_all_ends_every_process_of_each_group(tmp_path: Path) -> None:
    procs = Processes(tmp_path / "logs", os.environ)
    # a child that starts a grandchild: stopping the child alone would leave the grandchild behind
    child = procs.start("parent", ["sh", "-c", "sleep 60 & echo $! ; wait"])
    deadline = time.monotonic() + 5
    while not child.log.read_text().strip() and time.monotonic() < deadline:
        time.sleep(0.02)
    grandchild = int(child.log.read_text().split()[0])
    assert _alive(grandchild)
    procs.stop_all()
    deadline = time.monotonic() + 5
    while _alive(grandchild) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(grandchild)
    assert child.proc.poll() is not None
    assert procs.children == []


def test_a_kept_stack_is_stopped_from_its_pids_file_and_a_recycled_pid_is_left_alone(tmp_path: Path) -> None:
    procs = Processes(tmp_path / "logs", os.environ)
    # $0 names our CLI, as the demo's children do: only such processes are ever signalled
    child = procs.start("worker", ["sh", "-c", "sleep 60 & wait", "worker.app.cli"])
    try:
        cmdline = Path(f"/proc/{child.proc.pid}/cmdline")
        deadline = time.monotonic() + 5
        while b"worker.app.cli" not in cmdline.read_bytes() and time.monotonic() < deadline:
            time.sleep(0.01)  # until the fork has exec'd sh
        pids = tmp_path / "pids.json"
        procs.save(pids)
        assert stop_saved(pids) == ["worker"]
        assert child.proc.wait(10) is not None
        assert not pids.exists()
        # a pids file whose pid now belongs to another program (here: this test) signals nothing
        pids.write_text(json.dumps({"worker": os.getpid()}))
        assert stop_saved(pids) == []
    finally:
        procs.stop_all()


def test_a_failing_step_names_its_log_with_the_output(tmp_path: Path) -> None:
    procs = Processes(tmp_path / "logs", os.environ)
    with pytest.raises(DemoError, match="exited with code 3") as err:
        procs.run("migrate", ["sh", "-c", "echo 'cannot reach the database'; exit 3"])
    assert err.value.log == tmp_path / "logs" / "migrate.log"
    assert "cannot reach the database" in err.value.log.read_text()
    assert procs.children == []


def test_the_shipped_sample_is_small_and_in_the_export_format() -> None:
    files = sorted((SAMPLE / "topics").glob("*.json"))
    assert 250 <= len(files) <= 400
    assert sum(f.stat().st_size for f in files) < 5_000_000
    ids = {int(f.stem) for f in files}
    assert set(DEMO_TOPICS) <= ids
    posts = 0
    for f in files:
        topic = json.loads(f.read_text("utf-8"))
        assert topic["id"] == int(f.stem)
        assert topic["slug"]
        posts += len(topic["post_stream"]["posts"])
    assert posts < 2000  # the demo embeds every post on the CPU
    readme = (SAMPLE / "README.md").read_text("utf-8")
    assert "SirNate0/Urho3D-Discourse-Archive" in readme
    assert "2022-11-22" in readme


def test_build_sample_keeps_the_demo_topics_and_the_size_cap(tmp_path: Path) -> None:
    archive = tmp_path / "archive"
    (archive / "topics").mkdir(parents=True)
    for tid, title, pad in [
        (DEMO_TOPICS[0], "API to import a FBX model?", 10),
        (DEMO_TOPICS[1], "Call a function with delay", 10),
        (5, "Shadows flicker", 10),
        (6, "Huge topic", 50_000),
        (7, "Blender export", 10),
    ]:
        topic = {"id": tid, "title": title, "slug": "s", "post_stream": {"posts": [{"cooked": "x" * pad}]}}
        (archive / "topics" / f"{tid}.json").write_text(json.dumps(topic))
    ids = build_sample(archive, tmp_path / "out", topics=4, max_topic_bytes=1000)
    assert set(DEMO_TOPICS) <= set(ids)
    assert 6 not in ids  # over the size cap
    assert len(ids) == 4
    written = json.loads((tmp_path / "out" / "topics" / f"{DEMO_TOPICS[0]}.json").read_text())
    assert written["title"] == "API to import a FBX model?"


@pytest.mark.integration
@pytest.mark.slow
def test_make_demo_answers_one_question_with_resolving_links_and_abstains_on_the_other() -> None:
    """The demo as a newcomer runs it: exit 0, two replies, links that resolve, everything stopped."""
    if shutil.which("redis-server") is None:
        unavailable("redis-server", "not installed (apt-get install redis-server)")
    cache = ROOT / ".cache" / "test-demo"  # kept between runs: a second run reuses the index
    env = {k: v for k, v in os.environ.items() if not k.startswith("CITEBOT_")}
    cache.mkdir(parents=True, exist_ok=True)
    with (cache / "test.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # two test sessions on one checkout take turns
        started = time.monotonic()
        done = _run_demo(cache, env)
    seconds = time.monotonic() - started
    out = done.stdout
    assert done.returncode == 0, f"demo failed:\n{out[-4000:]}\n{done.stderr[-4000:]}"
    assert seconds < 600
    assert "OFFLINE generator" in out  # no LLM configured here, and the demo says so
    assert f"member asked:  {QUESTIONS[0].raw}" in out
    assert f"member asked:  {QUESTIONS[1].raw}" in out
    assert re.search(r"answerable question: posted \((normal|weak) zone\), [1-9]\d* link", out), out
    assert "unanswerable question: abstained (abstain zone), no links" in out
    resolving = re.findall(r"link ✓ (\S+/t/[a-z0-9-]+/\d+/\d+)", out)
    assert resolving, out
    # the printed example question is answered from the right topic, cited first
    assert f"first source topic {DEMO_TOPICS[0]} (expected {DEMO_TOPICS[0]})" in out, out
    assert "link ✗" not in out
    # the shipped path: the second stage ranks (a cross-encoder, where one is configured, re-reads it)
    assert re.search(r"stages: load .* (stage|rerank) [\d.]+ ms .* post \d", out)
    # everything it started is stopped: the worker process and the embedded PostgreSQL
    worker_pid = int(re.search(r"worker pid (\d+)", out).group(1))  # type: ignore[union-attr]
    assert not _alive(worker_pid)
    assert not (cache / "demo-pg" / "postmaster.pid").exists()
    assert (cache / "demo" / "logs" / "worker.log").exists()
    # the poller runs beside the worker, as in deploy/compose.yaml
    poller_pid = int(re.search(r"poller pid (\d+)", out).group(1))  # type: ignore[union-attr]
    assert not _alive(poller_pid)
    assert (cache / "demo" / "logs" / "poller.log").exists()


def _run_demo(cache: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return run_stack(
        [sys.executable, "-m", "eval.demo", "--cache", str(cache)], cwd=ROOT, env=env, timeout_s=600
    )
