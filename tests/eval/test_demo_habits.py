"""Issue 33, finding 6: the demo shows the right habits.

Its printed requests ask as a member with the member's own User API key (the bot's admin key spends the
site's 60-a-minute admin-API budget the bot answers with), it says how to add a member (the forum
answers 403 to a username it does not know), and its Redis persists queued questions like
deploy/compose.yaml's. Each test runs the real pieces: the printed curl against the forum double, the
demo's Redis restarted.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import redis
import yaml

from eval.demo.member import add_member
from eval.demo.run import ROOT, keep_instructions, main, start_redis
from eval.stack.forum.app import ForumApp, ForumConfig, create_forum_app
from eval.stack.forum.loader import load_export
from eval.stack.forum.store import ForumStore
from eval.stack.launcher import Launcher, serve
from eval.stack.redis import RedisServer
from tests.eval.forum.export import write_export

ADMIN_KEY = "demo-admin-api-key"
SESSION = "demo-admin-session"


@pytest.fixture
def forum(empty_db_url: str, tmp_path: Path) -> Iterator[tuple[ForumApp, str]]:
    store = ForumStore(empty_db_url)
    load_export(store, write_export(tmp_path / "export"))
    app = create_forum_app(store, ForumConfig(api_key=ADMIN_KEY, session_key=SESSION))
    try:
        with serve(app.app) as url:
            app.config.base_url = url
            yield app, url
    finally:
        app.close()
        store.close()


def _curl_lines(text: str) -> list[str]:
    """The printed curl commands, continuation lines joined."""
    joined = text.replace("\\\n", " ")
    return [line.strip() for line in joined.splitlines() if line.strip().startswith("curl ")]


def _run(command: str, env: dict[str, str]) -> str:
    done = subprocess.run(
        ["bash", "-c", command], env={**os.environ, **env}, capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_the_printed_ask_posts_as_the_member_and_spends_no_admin_budget(
    forum: tuple[ForumApp, str], tmp_path: Path
) -> None:
    app, url = forum
    with httpx.Client(timeout=10) as http:
        key = add_member(http, url, SESSION, "newcomer")
    text = keep_instructions(url, {"CITEBOT_DISCOURSE__BASE_URL": url}, "newcomer", key, tmp_path)
    curls = _curl_lines(text)
    assert curls
    assert not [c for c in curls if "Api-Key:" in c.replace("User-Api-Key:", "")], curls
    assert f"export MEMBER_KEY='{key}'" in text
    post = next(c for c in curls if "-X POST" in c and "/posts.json" in c)
    before = app.api_limiter.performed
    created = _run(post, {"MEMBER_KEY": key})
    reply = next(c for c in curls if "/t/TOPIC_ID.json" in c)
    topic_id = re.search(r'"topic_id":\s*(\d+)', created)
    assert topic_id is not None, created
    topic = _run(reply.replace("TOPIC_ID", topic_id.group(1)), {})
    assert '"username":"newcomer"' in topic.replace(" ", "")
    assert app.api_limiter.performed == before  # nothing counted against the bot's admin-API budget


def test_a_new_username_is_refused_until_added_with_the_documented_command(
    forum: tuple[ForumApp, str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _, url = forum
    body = {"title": "How do I play a sound in Urho3D?", "raw": "@citebot how do I play a sound on a hit?"}
    with httpx.Client(timeout=10) as http:
        unknown = http.post(f"{url}/posts.json", headers={"User-Api-Key": "not-a-key"}, json=body)
        assert unknown.status_code == 403
        monkeypatch.setenv("CITEBOT_DISCOURSE__BASE_URL", url)
        monkeypatch.setenv("LOCAL_FORUM_SESSION_KEY", SESSION)
        assert main(["--add-member", "alice"]) == 0
        out = capsys.readouterr().out
        key = re.search(r"export MEMBER_KEY='([0-9a-f]+)'", out)
        assert key is not None, out
        assert "User-Api-Key: $MEMBER_KEY" in out
        asked = http.post(f"{url}/posts.json", headers={"User-Api-Key": key.group(1)}, json=body)
    assert asked.status_code == 200, asked.text
    assert asked.json()["username"] == "alice"
    readme = (ROOT / "README.md").read_text("utf-8")
    assert "--add-member" in readme


def _compose_redis_args() -> list[str]:
    compose = yaml.safe_load((ROOT / "deploy" / "compose.yaml").read_text("utf-8"))
    command = compose["services"]["redis"]["command"]
    return command if isinstance(command, list) else shlex.split(command)


def test_the_demo_redis_persists_like_compose_and_keeps_questions_across_a_restart(tmp_path: Path) -> None:
    args = _compose_redis_args()
    wanted = dict(zip(args[1::2], args[2::2], strict=False))  # --appendonly yes --appendfsync everysec
    assert wanted.get("--appendonly") == "yes"
    with Launcher(tmp_path / "logs") as launcher:
        server = start_redis(launcher, tmp_path / "redis")
        client = redis.Redis.from_url(server.url)
        for option, value in wanted.items():
            assert client.config_get(option.lstrip("-"))[option.lstrip("-")] == value
        client.rpush("dramatiq:citebot-demo.answers", "a queued question")
        client.close()
        server.stop()
        again = RedisServer(tmp_path / "redis", port=server.port, appendonly=True)
        again.start()
        try:
            with redis.Redis.from_url(again.url) as back:
                assert back.lrange("dramatiq:citebot-demo.answers", 0, -1) == [b"a queued question"]
        finally:
            again.stop()
