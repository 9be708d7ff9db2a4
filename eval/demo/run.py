"""``make demo`` (``python -m eval.demo``): the whole stack on loopback, and the bot answering two questions.

Starts embedded PostgreSQL + pgvector (``.cache/demo-pg``), a private Redis that persists like
deploy/compose.yaml's (append-only file), the local model server, the local forum loaded with the
shipped sample, the webhook app, one worker and the catch-up poller (``citebot poll``, as compose runs
it), all as child processes on free loopback ports with secrets made for this run; backfills the sample;
turns the flags on through the forum's site settings; adds a member and gets the member's own User API
key; posts two questions with it (one the forum answers, one it cannot) and prints the bot's replies as
they appear on the forum, with their links (checked against the forum), zones and stage timings.
Everything it started is stopped at the end, on failure and on Ctrl-C, unless ``--keep`` is given; then
it prints how to ask as the member, how to add another (``--add-member NAME``) and how to stop.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import secrets
import shutil
import signal
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

import httpx
import psycopg

from eval.demo.index import start_index
from eval.demo.member import ForumMember, Question, Reply, add_member, cited_topic, links_in
from eval.demo.sample import DEMO_TOPICS
from eval.demo.show import Steps, print_reply
from eval.stack.launcher import Launcher, base_env, citebot_env, webhook_url
from eval.stack.postgres import EmbeddedPostgres, ensure_database
from eval.stack.procs import CITEBOT, DemoError, stop_saved, tail
from eval.stack.redis import RedisServer, free_port
from worker.flags import FLAG_NAMES

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "eval" / "data" / "urho3d-sample"
BOT = "citebot"
MEMBER = "newcomer"
# deploy/compose.yaml runs `citebot poll` with its default interval (60 s); the demo runs it the same way.
POLL_INTERVAL_S = 60.0
QUESTIONS = (
    Question(
        "a question the forum answers",
        "Converting an FBX model for Urho3D",
        "@citebot How do I convert an FBX or OBJ model to Urho3D's .mdl format?",
        expect_topic=DEMO_TOPICS[0],  # "API to import a FBX or OBJ model?": AssetImporter's answer
    ),
    Question(
        "a question it cannot answer",
        "Baking a chocolate cake",
        "@citebot What temperature should I bake a chocolate cake at, and for how long?",
    ),
)


@dataclass(frozen=True, slots=True)
class Paths:
    cache: Path
    pg_data: Path
    logs: Path
    pids: Path

    @staticmethod
    def under(cache: Path) -> Paths:
        demo = cache / "demo"
        return Paths(cache, cache / "demo-pg", demo / "logs", demo / "pids.json")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m eval.demo", description=__doc__.split("\n\n")[0])
    parser.add_argument("--keep", action="store_true", help="leave the stack running and say how to use it")
    parser.add_argument("--stop", action="store_true", help="stop a stack left running by --keep")
    parser.add_argument(
        "--add-member",
        metavar="NAME",
        help="add a member to a stack left running by --keep (needs the exports --keep printed) and "
        "print the member's User API key",
    )
    parser.add_argument("--sample", type=Path, default=SAMPLE, help="forum export to load and backfill")
    parser.add_argument(
        "--also",
        type=Path,
        action="append",
        default=[],
        metavar="PATH",
        help="another export (a bigger one) to load into the forum and backfill after the sample",
    )
    parser.add_argument(
        "--cache", type=Path, default=ROOT / ".cache", help="where the database, logs and pids live"
    )
    parser.add_argument("--reply-timeout", type=float, default=240.0, help="seconds to wait for the replies")
    args = parser.parse_args(argv)
    paths = Paths.under(args.cache.resolve())
    if args.add_member:
        return _add_member(args.add_member, os.environ)
    if args.stop:
        stopped = _stop_kept(paths)
        print(f"stopped: {', '.join(stopped) or 'nothing was running'}")
        return 0
    # SIGTERM (a CI timeout, `kill`) unwinds like Ctrl-C, through the finally blocks below.
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        demo = Demo(paths, args.sample, keep=args.keep, reply_timeout=args.reply_timeout, also=args.also)
        return demo.run()
    except KeyboardInterrupt:
        print("\ninterrupted: everything the demo started has been stopped", file=sys.stderr)
        return 130


def _add_member(name: str, env: Mapping[str, str]) -> int:
    """``--add-member NAME``: the member added to the kept forum, and how to ask as them."""
    forum = env.get("CITEBOT_DISCOURSE__BASE_URL", "")
    session = env.get("LOCAL_FORUM_SESSION_KEY", "")
    if not forum or not session:
        print(
            "demo: --add-member needs CITEBOT_DISCOURSE__BASE_URL and LOCAL_FORUM_SESSION_KEY: run the "
            "export lines `make demo ARGS=--keep` printed first",
            file=sys.stderr,
        )
        return 2
    try:
        with httpx.Client(timeout=10) as http:
            key = add_member(http, forum, session, name)
    except httpx.HTTPError as exc:
        print(f"demo: could not add {name} on {forum}: {exc}", file=sys.stderr)
        return 1
    print(f"added member @{name} on {forum}; their User API key:\n")
    print(f"  export MEMBER_KEY='{key}'\n")
    print(ask_command(forum))
    return 0


def ask_command(forum_url: str) -> str:
    """The curl that asks as a member: the member's own ``User-Api-Key`` (``$MEMBER_KEY``), never the
    bot's admin key (its 60-a-minute budget is the whole site's, and the bot answers with it)."""
    return (
        "  # ask as the member (the bot replies in the topic within seconds):\n"
        f'  curl -s -X POST {forum_url}/posts.json -H "User-Api-Key: $MEMBER_KEY" '
        "-H 'Content-Type: application/json' \\\n"
        '       -d \'{"title": "How do I play a sound in Urho3D?", '
        '"raw": "@citebot how do I play a sound effect when a node collides?"}\'\n'
        "  # read the topic and the bot's reply as any reader does (no key):\n"
        f"  curl -s {forum_url}/t/TOPIC_ID.json"
    )


def keep_instructions(
    forum_url: str, env: Mapping[str, str], member: str, member_key: str, logs: Path
) -> str:
    """What ``--keep`` prints: the exports, asking as a member, adding one, the admin commands."""
    lines = ["\nThe stack is still running (--keep). In another shell:\n"]
    lines += [f"  export {key}='{value}'" for key, value in env.items()]
    lines.append(f"  export MEMBER_KEY='{member_key}'   # @{member}'s own User API key, not the bot's")
    lines.append("\n" + ask_command(forum_url))
    lines.append(
        "\n  # add a member (the forum answers 403 to a username it does not know), then ask as them:\n"
        "  make demo ARGS='--add-member alice'             # prints alice's MEMBER_KEY\n"
        "\n  # the admin's side (citebot, with the bot's settings exported above):\n"
        "  .venv/bin/citebot ask 'How do I load a scene from an XML file?'   # the pipeline once, no post\n"
        "  .venv/bin/citebot flags show                      # the site-setting flags\n"
        "  .venv/bin/citebot flags set rerank off            # workers follow within 5 s here\n"
        "  .venv/bin/citebot answers                         # every question, its state and reason\n"
        "\n  # a bigger export, served by the forum and indexed (every link resolves):\n"
        "  make demo ARGS='--keep --also ../shared/data/urho3d'\n"
        "  # (one backfilled by hand here is in the index now, and on the forum from the next run on)\n"
        f"\n  logs: {logs}/   stop everything: make demo ARGS=--stop"
    )
    return "\n".join(lines)


def start_redis(launcher: Launcher, work_dir: Path) -> RedisServer:
    """Redis as deploy/compose.yaml runs it: the append-only file on (``appendfsync everysec``, Redis's
    default and compose's), so queued questions survive a Redis restart. Each run starts from an empty
    one: the forum and the answers table restart from the sample too."""
    shutil.rmtree(work_dir, ignore_errors=True)
    return launcher.redis_server(work_dir, appendonly=True)


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def _stop_kept(paths: Paths) -> list[str]:
    stopped = stop_saved(paths.pids)
    if (paths.pg_data / "postmaster.pid").exists():
        # attach to the server left running in the data directory, then stop it
        server = EmbeddedPostgres(paths.pg_data)
        server.start()
        server.stop()
        stopped.append("postgres")
    return stopped


class Demo:
    def __init__(
        self, paths: Paths, sample: Path, *, keep: bool, reply_timeout: float, also: Sequence[Path] = ()
    ) -> None:
        self.paths = paths
        self.sample = sample.resolve()
        self.also = tuple(p.resolve() for p in also)
        self.keep = keep
        self.reply_timeout = reply_timeout
        self.steps = Steps(10 + len(self.also))
        # Hex: a urlsafe token may start with "-". Secrets reach child processes through the
        # environment (see _settings), never argv, where `ps` would show them.
        self.api_key = secrets.token_hex(24)
        # The member's browser session: Discourse does not count it against the admin-API limit.
        self.session_key = secrets.token_hex(24)
        self.webhook_secret = secrets.token_hex(24)
        self.ports = {name: free_port() for name in ("models", "forum", "webhook")}
        self.forum_url = f"http://127.0.0.1:{self.ports['forum']}"
        self.pg: EmbeddedPostgres | None = None

    def run(self) -> int:
        if not (self.sample / "topics").is_dir():
            print(f"demo: no forum sample at {self.sample}", file=sys.stderr)
            return 2
        self.paths.logs.mkdir(parents=True, exist_ok=True)
        with (self.paths.logs.parent / "lock").open("w") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                print(f"demo: another demo is running with {self.paths.cache}", file=sys.stderr)
                return 2
            return self._run()

    def _run(self) -> int:
        previous = _stop_kept(self.paths) if self.paths.pids.exists() else []
        if previous:
            print(f"stopped the stack a previous `--keep` left running ({', '.join(previous)})")
        llm = os.environ.get("CITEBOT_LLM__BASE_URL")
        say = self.steps.say
        say("citebot demo: a forum answers its own questions, with links the server writes")
        if llm:
            say(
                f"LLM: {llm} (CITEBOT_LLM__BASE_URL), model {os.environ.get('CITEBOT_LLM__MODEL', 'default')}"
            )
        else:
            say("LLM: none (CITEBOT_LLM__BASE_URL is unset): the OFFLINE generator writes the replies,")
            say("     quoting sentences from the cited posts. Set CITEBOT_LLM__BASE_URL to use a real model.")
        say(f"logs: {self.paths.logs}/NAME.log")
        # The LLM's settings are the caller's to give (a real model); every other setting is this run's.
        launcher = Launcher(self.paths.logs, base_env(keep=("CITEBOT_LLM__",)))
        ok = kept = False
        try:
            self._bring_up(launcher)
            ok = self._ask(launcher)
            if self.keep:  # kept even when a check failed: the stack is there to be looked at
                launcher.procs.save(self.paths.pids)
                self._save_redis()
                self._print_keep()
                kept = True
        except DemoError as exc:
            print(f"\ndemo failed: {exc}", file=sys.stderr)
            if exc.log is not None:
                print(f"--- last lines of {exc.log} ---\n{tail(exc.log)}\n---", file=sys.stderr)
        finally:
            if not kept:
                if self.pg is not None:
                    self.pg.keep_running = False
                launcher.stop()
        say(f"\ndemo {'finished' if ok else 'FAILED'} in {self.steps.elapsed():.0f} s")
        if not kept:
            say("every process the demo started is stopped (`make demo ARGS=--keep` leaves them running)")
        return 0 if ok else 1

    # -- bring the stack up ----------------------------------------------------------------------------

    def _bring_up(self, launcher: Launcher) -> None:
        step = self.steps.step
        models_url = f"http://127.0.0.1:{self.ports['models']}"
        with step("local model server (MiniLM embeddings + calibrated scorer, TEI's API): loading meanwhile"):
            models = launcher.start(
                "models", [*CITEBOT, "models", "serve", "--port", str(self.ports["models"])]
            )
        with step(f"PostgreSQL + pgvector (embedded, data in {self.paths.pg_data})"):
            self.pg = launcher.embedded_postgres(self.paths.pg_data, keep_running=self.keep)
            server_url = self.pg.url or ""
            self.db_url = ensure_database(server_url, "citebot_demo")
            # The forum starts from the sample on every run: questions of an earlier run are not in it.
            self.forum_db_url = ensure_database(server_url, "citebot_demo_forum", fresh=True)
        with step("Redis (a private redis-server on a free port, append-only file on, as in compose)"):
            self.redis = start_redis(launcher, self.paths.cache / "demo" / "redis")
            self.redis_url = self.redis.url
            self.steps.say(f"      {self.redis_url}")
        launcher.configure(self._settings(self.redis_url))
        launcher.env["LOCAL_FORUM_SESSION_KEY"] = self.session_key
        with step("database schema (citebot db migrate); what the index reuses from earlier runs"):
            out = launcher.run("migrate", [*CITEBOT, "db", "migrate"])
            for line in out.strip().splitlines():
                self.steps.say(f"      {line}")
            with psycopg.connect(self.db_url, autocommit=True) as conn:
                conn.execute("TRUNCATE answers")  # the forum restarts from the exports: so do the answers
            start = start_index(self.db_url, self.sample)
            for line in start.lines(lambda p: _rel(p)):
                self.steps.say(f"      {line}")
        # The forum serves every export the index will hold, so that no link the bot writes 404s.
        served = [*self.also, *(p for p in start.exports if p.resolve() not in self.also)]
        with step("local forum (a Discourse double) loaded with the sample; the model server ready"):
            forum = launcher.forum(
                self.ports["forum"],
                self.sample,
                self.forum_db_url,
                webhook_url=webhook_url(self.ports["webhook"]),
                headers={"Api-Key": self.api_key, "Api-Username": BOT},
                options=[arg for p in served for arg in ("--also-export", str(p))],
                timeout_s=120 + 60 * len(served),
            )
            loaded = [line for line in tail(forum.log, 50).splitlines() if line.startswith("loaded ")]
            self.steps.say(f"      forum on {self.forum_url}: {loaded[-1] if loaded else 'sample loaded'}")
            launcher.procs.wait_http(models, f"{models_url}/health", timeout_s=180)
            self.steps.say(f"      model server on {models_url}")
        for i, export in enumerate((self.sample, *self.also)):
            with step(f"backfill the post index (citebot backfill --source file --path {_rel(export)})"):
                out = launcher.run(
                    "backfill" if i == 0 else f"backfill-{i}",
                    [*CITEBOT, "backfill", "--source", "file", "--path", str(export), "--progress", "bar"],
                    echo=sys.stdout,
                )
        with step("webhook app, one worker and the catch-up poller (citebot poll), as compose runs them"):
            launcher.webhook(self.ports["webhook"])
            worker = launcher.worker(timeout_s=60)
            poller = launcher.poller(POLL_INTERVAL_S)
            self.steps.say(
                f"      webhook app on http://127.0.0.1:{self.ports['webhook']}, "
                f"worker pid {worker.proc.pid}, poller pid {poller.proc.pid} (every {POLL_INTERVAL_S:.0f} s)"
            )
        with step("turn the flags on through the forum's site settings (citebot flags set NAME on)"):
            for name in FLAG_NAMES:
                out = launcher.run(f"flags-{name}", [*CITEBOT, "flags", "set", name, "on"])
                self.steps.say(f"      {out.strip().splitlines()[-1] if out.strip() else name}")

    def _settings(self, redis_url: str) -> dict[str, Any]:
        """The citebot settings of every child: this run's services, ports and secrets."""
        models = f"http://127.0.0.1:{self.ports['models']}"
        return {
            "database": {"url": self.db_url},
            "redis": {"url": redis_url, "namespace": "citebot-demo"},
            "discourse": {
                "base_url": self.forum_url,
                "api_key": self.api_key,
                "api_username": BOT,
                "bot_username": BOT,
                "webhook_secret": self.webhook_secret,
            },
            "embeddings": {"provider": "tei", "base_url": models},
            # The local scorer on a shared 2-core machine can take a few seconds under load.
            "reranker": {"base_url": models, "timeout_s": 20},
            "flags": {"cache_ttl_s": 5},
        }

    # -- ask and show ------------------------------------------------------------------------------------

    def _ask(self, launcher: Launcher) -> bool:
        step = self.steps.step
        results: dict[str, tuple[Question, Reply]] = {}
        with httpx.Client(timeout=10) as http:
            member = ForumMember(http, self.forum_url, self.session_key, MEMBER)
            with step(f"a member (@{MEMBER}, own User API key) asks two questions; waiting for the replies"):
                self.member_key = member.join()
                asked = [member.ask(q) for q in QUESTIONS]
                for q in asked:
                    self.steps.say(
                        f"      posted {self.forum_url}/t/{q.topic_id} (post {q.post_id}): {q.title}"
                    )
                deadline = time.monotonic() + self.reply_timeout
                while len(results) < len(asked):
                    launcher.procs.check_alive()
                    for q in asked:
                        if q.label in results:
                            continue
                        reply = member.reply_to(q, BOT)
                        if reply is not None:
                            results[q.label] = (q, reply)
                            self._show(member, q, reply)
                    if time.monotonic() > deadline:
                        raise DemoError(
                            f"no reply within {self.reply_timeout:.0f} s", launcher.procs.log_path("worker")
                        )
                    time.sleep(0.3)
            with step("checks"):
                return self._check(member, results)

    def _row(self, post_id: int) -> dict[str, Any] | None:
        with psycopg.connect(self.db_url) as conn:
            cur = conn.execute(
                "SELECT state, zone, rule_id, sources, trace FROM answers WHERE post_id = %s", (post_id,)
            )
            got = cur.fetchone()
        if got is None:
            return None
        return dict(zip(("state", "zone", "rule_id", "sources", "trace"), got, strict=True))

    def _show(self, member: ForumMember, q: Question, reply: Reply) -> None:
        checks = [(url, *member.resolves(url)) for url in links_in(reply.raw)]
        print_reply(
            sys.stdout,
            label=q.label,
            question=q.raw,
            reply=reply.raw,
            seen_after_s=reply.seen_after_s,
            row=self._row(q.post_id),
            link_checks=checks,
        )

    def _check(self, member: ForumMember, results: dict[str, tuple[Question, Reply]]) -> bool:
        answered_q, answered = results[QUESTIONS[0].label]
        abstained_q, abstained = results[QUESTIONS[1].label]
        a_row = self._row(answered_q.post_id) or {}
        b_row = self._row(abstained_q.post_id) or {}
        links = links_in(answered.raw)
        problems = []
        if a_row.get("state") != "posted" or a_row.get("zone") not in ("normal", "weak"):
            problems.append(f"answerable question: state {a_row.get('state')}, zone {a_row.get('zone')}")
        if not links:
            problems.append("answerable question: the reply cites no post")
        elif cited_topic(links[0]) != answered_q.expect_topic:
            problems.append(
                f"answerable question: the first source is {links[0]}, not topic {answered_q.expect_topic}"
            )
        bad = [url for url in links if not member.resolves(url)[0]]
        if bad:
            problems.append(f"links that do not resolve on the forum: {bad}")
        if b_row.get("state") != "abstained" or links_in(abstained.raw):
            problems.append(
                f"unanswerable question: state {b_row.get('state')}, zone {b_row.get('zone')}, "
                f"{len(links_in(abstained.raw))} link(s)"
            )
        say = self.steps.say
        say(
            f"      answerable question: {a_row.get('state')} ({a_row.get('zone')} zone), "
            f"{len(links)} link(s), {len(links) - len(bad)} resolve on the forum, "
            f"first source topic {cited_topic(links[0]) if links else '-'} "
            f"(expected {answered_q.expect_topic})"
        )
        say(f"      unanswerable question: {b_row.get('state')} ({b_row.get('zone')} zone), no links")
        for problem in problems:
            say(f"      ✗ {problem}")
        return not problems

    # -- --keep ----------------------------------------------------------------------------------------

    def _save_redis(self) -> None:
        data = json.loads(self.paths.pids.read_text("utf-8"))
        if self.redis.proc is not None:
            data = {"redis": self.redis.proc.pid, **data}
        self.paths.pids.write_text(json.dumps(data), "utf-8")

    def _print_keep(self) -> None:
        text = keep_instructions(
            self.forum_url, self._env_for_shell(), MEMBER, getattr(self, "member_key", ""), self.paths.logs
        )
        self.steps.say(text)

    def _env_for_shell(self) -> dict[str, str]:
        llm = {k: v for k, v in os.environ.items() if k.startswith("CITEBOT_LLM__")}
        # the admin's browser session on the local forum: what --add-member adds members with
        forum = {"LOCAL_FORUM_SESSION_KEY": self.session_key}
        return citebot_env(self._settings(self.redis_url)) | llm | forum


def _rel(path: Path) -> str:
    try:
        return str(path.relative_to(ROOT))
    except ValueError:
        return str(path)
