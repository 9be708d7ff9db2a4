"""``citebot answers``: the questions the bot has seen and where each one stands."""

from __future__ import annotations

import argparse
import json

from worker import answers
from worker.commands.common import settings_from
from worker.db.connect import connect

NAME = "answers"
HELP = "list recent questions and their state (posted, held_for_review, failed, ...)"


def register(group: argparse.ArgumentParser) -> None:
    group.add_argument("--state", choices=answers.STATES, help="only questions in this state")
    group.add_argument("--limit", type=int, default=20, metavar="N", help="rows to show (default 20)")
    group.add_argument("--json", action="store_true", help="one JSON object per line")
    group.set_defaults(handler=_list)


def _list(args: argparse.Namespace) -> int:
    settings = settings_from(args)
    with connect(settings.database) as conn:
        counts = answers.count_by_state(conn)
        rows = answers.recent(conn, args.state, max(1, args.limit))
    if args.json:
        for r in rows:
            item = {"post_id": r.post_id, "topic_id": r.topic_id, "state": r.state, "error": r.error}
            print(json.dumps({**item, "reply_post_id": r.reply_post_id, "updated_at": str(r.updated_at)}))
        return 0
    print("by state: " + (", ".join(f"{s} {n}" for s, n in counts.items()) or "no questions yet"))
    for r in rows:
        reply = f"reply {r.reply_post_id}" if r.reply_post_id else "no reply"
        note = f"  ({r.error})" if r.error else ""
        when = f"{r.updated_at:%Y-%m-%d %H:%M:%S}"
        print(f"{when}  post {r.post_id}  topic {r.topic_id}  {r.state}  {reply}{note}")
    return 0
