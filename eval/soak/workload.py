"""The members' questions and the fault schedule of a soak run."""

from __future__ import annotations

import json
import logging
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import httpx
import psycopg
import redis as redis_lib

from eval.soak.stack import NAMESPACE, SAMPLE, SoakError, SoakStack

log = logging.getLogger(__name__)
SETTINGS_PATH = "/admin/site_settings.json"

MEMBERS = 25
TOPICS = 40
TEMPLATES = (
    "how do I get started with {t}",
    "is there an example of {t} that works on the latest version",
    "what is the right way to handle {t}",
    "I am stuck with {t}, what did people do about it",
    "can someone explain {t} for a newcomer",
)
FAULT_NAMES = (
    "storm", "drop", "kill", "redis", "redis-nopersist", "postgres", "llm", "tei", "forum", "settings",
    "backfill",
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class Asked:
    post_id: int
    topic_id: int
    post_number: int
    member: str
    asked_at: float  # wall clock, seconds


@dataclass
class FaultRecord:
    name: str
    at: float  # wall clock
    detail: str
    open_questions: list[int] = field(default_factory=list)
    took_s: float = 0.0


def topics(limit: int = TOPICS) -> list[tuple[int, str]]:
    found = []
    for path in sorted((SAMPLE / "topics").glob("*.json")):
        data = json.loads(path.read_text("utf-8"))
        if (
            data.get("archetype", "regular") == "regular"
            and not data.get("closed")
            and not data.get("archived")
        ):
            found.append((int(data["id"]), str(data["title"])))
    return found[:limit]


class Members:
    """Members asking questions on the local forum, retrying what a busy forum refuses (429 / 5xx)."""

    def __init__(self, stack: SoakStack, seed: int) -> None:
        self.stack = stack
        self.rng = random.Random(seed)
        self.names = [f"member{i:02d}" for i in range(1, MEMBERS + 1)]
        self.topics = topics()
        self.http = httpx.Client(timeout=30.0)
        self.failed_attempts = 0

    def join(self) -> None:
        for name in self.names:
            r = self.http.post(
                f"{self.stack.forum_url}/__forum/users",
                headers=self.stack.admin_headers(),
                json={"username": name},
            )
            r.raise_for_status()

    def ask(self, i: int) -> Asked:
        topic_id, title = self.topics[i % len(self.topics)]
        member = self.names[self.rng.randrange(len(self.names))]
        text = TEMPLATES[i % len(TEMPLATES)].format(t=title.lower())
        raw = f"@citebot {text}? (question {i})"
        for _ in range(120):
            try:
                r = self.http.post(
                    f"{self.stack.forum_url}/posts.json",
                    headers=self.stack.member_headers(member),
                    json={"topic_id": topic_id, "raw": raw},
                )
                if r.status_code == 200:
                    data = r.json()
                    return Asked(int(data["id"]), topic_id, int(data["post_number"]), member, time.time())
            except httpx.HTTPError:
                pass
            self.failed_attempts += 1
            time.sleep(0.25)
        raise RuntimeError(f"the forum refused question {i} 120 times")

    def close(self) -> None:
        self.http.close()


def open_questions(stack: SoakStack, asked: list[Asked]) -> list[int]:
    """The questions asked so far that have no reply from the bot on the forum."""
    if not asked:
        return []
    answered = replied_posts(stack.forum_db_url, asked)
    return [a.post_id for a in asked if a.post_id not in answered]


def replied_posts(forum_db_url: str, asked: list[Asked]) -> dict[int, list[float]]:
    """post id → creation times (epoch s) of the bot's replies to it, read from the forum's database."""
    by_key = {(a.topic_id, a.post_number): a.post_id for a in asked}
    out: dict[int, list[float]] = {}
    with psycopg.connect(forum_db_url) as conn:
        rows = conn.execute(
            "SELECT p.topic_id, p.reply_to_post_number, extract(epoch FROM p.created_at)::float8"
            " FROM forum.posts p JOIN forum.users u ON u.id = p.user_id"
            " WHERE lower(u.username) = 'citebot' AND p.deleted_at IS NULL"
            " AND p.reply_to_post_number IS NOT NULL"
        ).fetchall()
    for topic_id, number, created in rows:
        post_id = by_key.get((int(topic_id), int(number)))
        if post_id is not None:
            out.setdefault(post_id, []).append(float(created))
    return out


def queued_messages(redis_url: str) -> int:
    """Messages dramatiq holds in Redis for the questions queue (waiting, running or delayed)."""
    try:
        with redis_lib.Redis.from_url(redis_url, socket_timeout=2) as client:
            ns = f"{NAMESPACE}-tasks"
            return int(client.hlen(f"{ns}:questions.msgs")) + int(client.hlen(f"{ns}:questions.DQ.msgs"))
    except redis_lib.RedisError:
        return -1


class FaultPlan:
    """Faults fired when the share of questions asked passes their mark, one at a time, in a thread."""

    def __init__(
        self,
        stack: SoakStack,
        names: set[str],
        asked: list[Asked],
        total: int,
        ask: Callable[[], None] | None = None,
    ) -> None:
        self.stack = stack
        self.ask = ask  # asks one more question (counted in ``asked``): a fault that needs one in its window
        self.names = names
        self.asked = asked
        self.total = total
        self.records: list[FaultRecord] = []
        self.errors: list[str] = []
        self.steps: list[tuple[float, str, Callable[[], str]]] = [
            (0.10, "drop", lambda: self._drop(5)),
            (0.15, "kill", lambda: self._kill(1)),
            (0.25, "redis", lambda: self._redis(persistent=True)),
            (0.35, "drop", lambda: self._drop(5)),
            (0.40, "postgres", self._postgres),
            (0.50, "llm", self._llm),
            (0.58, "tei", self._tei),
            (0.66, "redis-nopersist", lambda: self._redis(persistent=False)),
            (0.70, "settings", self._settings),
            (0.76, "forum", self._forum),
            (0.80, "backfill", self._backfill),
            (0.85, "kill", lambda: self._kill(2)),
            (0.90, "drop", lambda: self._drop(5)),
        ]
        self.steps = [s for s in self.steps if s[1] in names]
        self._thread = threading.Thread(target=self._run, name="soak-faults", daemon=True)
        self._stop = threading.Event()
        self._open_override: list[int] | None = None

    def start(self) -> None:
        if "storm" in self.names:
            self.stack.relay.storm = True
            self.records.append(
                FaultRecord("storm", time.time(), "every delivery 1–3 times, shuffled, 10% forged")
            )
        self._thread.start()

    def join(self, timeout_s: float) -> None:
        self._thread.join(timeout_s)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(120)

    def _run(self) -> None:
        for mark, name, action in self.steps:
            while len(self.asked) < mark * self.total:
                if self._stop.wait(0.2):
                    return
            at = time.time()
            open_now = open_questions(self.stack, list(self.asked))
            self._open_override = None
            try:
                detail = action()
            except Exception as exc:  # a fault that could not be injected is a finding, not a crash
                log.exception("fault %s", name)
                self.errors.append(f"{name}: {type(exc).__name__}: {exc}")
                detail = f"FAILED: {exc}"
            if self._open_override is not None:  # the fault itself came later than its mark
                open_now = self._open_override
            self.records.append(FaultRecord(name, at, detail, open_now, time.time() - at))

    # -- the faults ----------------------------------------------------------------------------------

    def _drop(self, n: int) -> str:
        self.stack.forum_faults(drop_webhooks_next=n)
        return f"the forum drops its next {n} webhook deliveries"

    def _kill(self, index: int) -> str:
        busy = self._wait_busy()
        self.stack.kill_worker(index)
        time.sleep(1.0)
        self.stack.start_worker(index)
        return f"SIGKILL worker-{index} with {busy} question(s) in progress, restarted"

    def _wait_busy(self) -> int:
        deadline = time.monotonic() + 10
        while True:
            try:
                with psycopg.connect(self.stack.db_url, connect_timeout=3) as conn:
                    row = conn.execute(
                        "SELECT count(*) FROM answers WHERE state IN ('queued', 'retrieved', 'generated')"
                    ).fetchone()
                busy = int(row[0]) if row else 0
            except psycopg.Error:
                busy = 0
            if busy or time.monotonic() > deadline:
                return busy
            time.sleep(0.05)

    def _redis(self, *, persistent: bool) -> str:
        # A slow LLM first, so that messages wait in Redis when it dies (else the queue is often empty).
        self.stack.model_faults(llm_latency_ms=3000)
        time.sleep(6)
        held = queued_messages(self.stack.redis.url)
        self._open_override = open_questions(self.stack, list(self.asked))
        self.stack.restart_redis(persistent=persistent, down_s=2.0)
        after = queued_messages(self.stack.redis.url)
        self.stack.model_faults(llm_latency_ms=0)
        kind = "appendonly (AOF, fsync every second)" if persistent else "no persistence (empty on restart)"
        return (
            f"LLM 3 s slow for 6 s (a backlog), then SIGKILL redis-server, 2 s down, restarted with {kind}:"
            f" {held} message(s) in Redis before, {after} after"
        )

    def _postgres(self) -> str:
        started = time.monotonic()
        self.stack.restart_postgres(down_s=3.0)
        return (
            f"bot PostgreSQL stopped (fast shutdown), 3 s down, back after {time.monotonic() - started:.1f} s"
        )

    def _llm(self) -> str:
        self.stack.model_faults(llm_status=429)
        time.sleep(5)
        self.stack.model_faults(llm_status=503)
        time.sleep(5)
        self.stack.model_faults(llm_status=200, llm_latency_ms=2500)
        time.sleep(5)
        knobs = self.stack.model_faults(llm_latency_ms=0)
        return (
            f"LLM 429 for 5 s, 503 for 5 s, 2.5 s slow for 5 s ({knobs['llm_failed']} calls refused so far)"
        )

    def _tei(self) -> str:
        self.stack.model_faults(tei_status=503)
        time.sleep(5)
        self.stack.model_faults(tei_status=429)
        time.sleep(3)
        self.stack.model_faults(tei_status=200, tei_latency_ms=1500)
        time.sleep(4)
        knobs = self.stack.model_faults(tei_latency_ms=0)
        return (
            f"TEI 503 for 5 s, 429 for 3 s, 1.5 s slow for 4 s ({knobs['tei_failed']} calls refused so far)"
        )

    def _settings(self) -> str:
        """The site settings unreadable while the workers start: the forum answers 403 (a proxy or
        firewall in front of it), then 500 (the forum restarting), to that route alone. A slow LLM
        first builds a backlog; then every worker is killed and started again inside the window, so the
        questions in flight meet a worker whose first settings read fails. Nothing may be decided on
        flags nobody read: each question waits for the settings and is answered once they are back.
        Three more questions are asked inside each window."""
        parts = []
        workers = range(1, self.stack.o.workers + 1)
        for status in (403, 500):
            self.stack.model_faults(llm_latency_ms=3000)
            time.sleep(4)
            self.stack.forum_faults(errors_path=SETTINGS_PATH, errors_next=1_000_000, error_status=status)
            # The window closes on its own clock (a worker waiting at start for readable settings must
            # not keep it open): once the forum has refused a settings read, or after 30 s at most.
            window = threading.Thread(target=self._settings_window, args=(status,), daemon=True)
            for index in workers:
                self.stack.kill_worker(index)
            self.stack.model_faults(llm_latency_ms=0)
            window.start()
            if self.ask is not None:  # questions asked while nothing can read the settings
                for _ in range(3):
                    self.ask()
            starts = []
            for index in workers:
                try:
                    self.stack.start_worker(index)
                    starts.append(f"worker-{index} started")
                except SoakError as exc:  # a credential error at start stops the process (supervised)
                    lines = [ln for ln in str(exc).splitlines() if ln.strip()]
                    starts.append(f"worker-{index} refused to start ({lines[-1][:120] if lines else '?'})")
            window.join()
            back = [self._wait_worker(index, 120) for index in workers]
            parts.append(
                f"settings {status} ({self._refused(status)} read(s) refused), every worker killed and"
                f" started inside: {', '.join(starts)}; all running {max(back):.1f} s after"
            )
        return "; ".join(parts)

    def _refused(self, status: int) -> int:
        return sum(1 for _, code in self.stack.forum_calls(SETTINGS_PATH) if code == status)

    def _settings_window(self, status: int, longest_s: float = 30.0) -> None:
        """Clear the settings fault 3 s after the forum first refused a read, or after ``longest_s``."""
        started = time.monotonic()
        while time.monotonic() - started < longest_s and not self._refused(status):
            time.sleep(0.25)
        time.sleep(3.0)
        self.stack.forum_faults(errors_next=0, errors_path="", error_status=502)

    def _wait_worker(self, index: int, timeout_s: float) -> float:
        """Seconds until worker ``index`` runs again (the supervisor restarts one that exited)."""
        started = time.monotonic()
        while time.monotonic() - started < timeout_s:
            with self.stack.lock:
                child = self.stack.workers.get(index)
            if child is not None and child.proc.poll() is None:
                return time.monotonic() - started
            time.sleep(0.5)
        raise SoakError(f"worker-{index} did not come back within {timeout_s:.0f} s")

    def _backfill(self, killed_after_s: float = 3.0) -> str:
        """The scheduled API backfill SIGKILLed mid-run, then run again to its end, while members ask.
        The vector index recall reads is sampled every 0.25 s throughout: it must never be missing or
        invalid (an incremental run writes into the live index, it never drops it)."""
        samples: dict[str, int] = {}
        done = threading.Event()

        def sample() -> None:
            while not done.wait(0.25):
                state = self.stack.vector_index_state()
                samples[state] = samples.get(state, 0) + 1

        sampler = threading.Thread(target=sample, name="soak-index-sampler", daemon=True)
        sampler.start()
        try:
            child = self.stack.start_backfill("backfill-killed")
            time.sleep(killed_after_s)
            running = child.proc.poll() is None
            self.stack.kill_child(child)
            after_kill = self.stack.vector_index_state()
            started = time.monotonic()
            self.stack.run_backfill("backfill-again")
            again_s = time.monotonic() - started
        finally:
            done.set()
            sampler.join(5)
        bad = {state: n for state, n in samples.items() if state != "valid"}
        if bad:
            self.errors.append(f"backfill: the vector index was not valid in {bad} of its samples")
        when = "mid-run" if running else "after it had finished"
        return (
            f"citebot backfill --source api SIGKILLed {killed_after_s:.0f} s in ({when}), index then"
            f" {after_kill}; run again to its end in {again_s:.1f} s; index samples {samples}"
        )

    def _forum(self) -> str:
        self.stack.forum_faults(errors_next=25, error_status=502, rate_limit_next=15, retry_after_s=1)
        time.sleep(3)
        self.stack.forum_faults(latency_s=0.5)
        time.sleep(5)
        self.stack.forum_faults(latency_s=0.0)
        return "forum: next 15 API calls 429 (Retry-After 1), next 25 answer 502, then 0.5 s per call for 5 s"
