"""``python -m eval.bench gate_lexical archive``: the false-block check of the gate's lexical head.

Runs the whole gate (rules, then the lexical head) over every archive post and the 1,000 forum
questions and lists what it blocks. The head itself is fitted by ``make gate`` (``gate.train.lexical``).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from eval.bench.report import emit
from gate import Gate
from gate.train.data import FORUM, forum_questions
from gate.train.lexical import archive_texts


def archive(args: argparse.Namespace) -> int:
    """The whole gate over every archive post and the 1,000 forum questions: any hit is a false block."""
    gate = Gate.load()
    ids, posts = archive_texts()
    forum = forum_questions(FORUM, 1000)
    blocks: dict[str, list[dict[str, Any]]] = {"forum": [], "archive": []}
    for name, idents, texts in (("forum", list(range(len(forum))), forum), ("archive", ids, posts)):
        for ident, text in zip(idents, texts, strict=True):
            decision = gate.check(text)
            if decision.hit:
                blocks[name].append({"id": ident, "rule": decision.rule_id})
        print(f"{name}: {len(blocks[name])} blocked of {len(texts)}: {blocks[name][:20]}")
    if not args.no_save:
        emit("gate_lexical", {"archive_posts": len(ids), "forum_questions": len(forum), "blocks": blocks})
    return 0


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m eval.bench gate_lexical", description=__doc__.split("\n")[0]
    )
    sub = parser.add_subparsers(dest="command", required=True)
    p_archive = sub.add_parser("archive", help="false blocks of the whole gate over the archive")
    p_archive.add_argument("--no-save", action="store_true")
    args = parser.parse_args(list(argv))
    return archive(args)
