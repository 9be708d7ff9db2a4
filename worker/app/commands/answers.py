"""``citebot answers``: the questions the bot has seen, where each one stands and, when it got no answer,
why (the ``reason`` of ``worker.answers.REASONS``)."""

from __future__ import annotations

import argparse
import json

from worker import answers
from worker.app.commands.common import settings_from
from worker.db.connect import connect

NAME = "answers"
HELP = "list recent questions, their state (posted, held, denied, failed, ...) and why one got no answer"


def register(group: argparse.ArgumentParser) -> None:
    group.add_argument("--state", choices=answers.STATES, help="only questions in this state")
    group.add_argument(
        "--reason",
        metavar="REASON",
        help="only questions with this reason (a prefix before a dot matches all: summon, limit); "
        + "; ".join(f"{name}: {text}" for name, text in answers.REASONS.items()),
    )
    group.add_argument(
        "--unanswered",
        action="store_true",
        help="only questions that got no answer (" + ", ".join(sorted(answers.UNANSWERED_STATES)) + ")",
    )
    group.add_argument("--limit", type=int, default=20, metavar="N", help="rows to show (default 20)")
    group.add_argument("--json", action="store_true", help="one JSON object per line")
    group.set_defaults(handler=_list)


def _list(args: argparse.Namespace) -> int:
    settings = settings_from(args)
    with connect(settings.database) as conn:
        counts = answers.count_by_state(conn)
        unanswered = answers.count_unanswered(conn)
        rows = answers.recent(
            conn, args.state, max(1, args.limit), reason=args.reason, unanswered=args.unanswered
        )
    if args.json:
        for r in rows:
            item = {"post_id": r.post_id, "topic_id": r.topic_id, "state": r.state, "reason": r.reason}
            item |= {"error": r.error, "username": r.username, "reply_post_id": r.reply_post_id}
            print(json.dumps({**item, "updated_at": str(r.updated_at)}))
        return 0
    print("by state: " + (", ".join(f"{s} {n}" for s, n in counts.items()) or "no questions yet"))
    if unanswered:
        print("not answered: " + ", ".join(f"{s} {r} {n}" for (s, r), n in unanswered.items()))
    for r in rows:
        reply = f"reply {r.reply_post_id}" if r.reply_post_id else "no reply"
        why = f" {r.reason}" if r.reason else ""
        note = f"  ({r.error})" if r.error else ""
        when = f"{r.updated_at:%Y-%m-%d %H:%M:%S}"
        print(f"{when}  post {r.post_id}  topic {r.topic_id}  {r.state}{why}  {reply}{note}")
    return 0
