"""``citebot sanitize``: the LLM's text on stdin → the Markdown to post on stdout (docs/sanitizer.md)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from sanitizer import EvidenceError, EvidenceSource, from_dicts, sanitize
from sanitizer.evidence import normalize_base_url
from worker.errors import PermanentError

NAME = "sanitize"
HELP = "turn an LLM answer (stdin) into the Markdown to post (stdout): [[n]] → links, nothing else links"


def register(group: argparse.ArgumentParser) -> None:
    group.description = (
        "Read the LLM's text on stdin and write the Markdown to post on stdout. [[n]] markers become links "
        "built from the evidence file; every other link, image, HTML tag, BBCode tag, @mention and #hashtag "
        "is neutralised. Running it on its own output changes nothing. Exit 1 when the evidence is invalid "
        "or the text cannot be made safe (then nothing is written to stdout)."
    )
    group.add_argument(
        "--evidence",
        required=True,
        type=Path,
        metavar="FILE",
        help='JSON list of sources: [{"n": 1, "topic_id": 12, "post_number": 3, "slug": "s", "title": "t"}]',
    )
    group.add_argument(
        "--links",
        choices=("post", "topic"),
        default="post",
        help="post links /t/<slug>/<topic_id>/<post_number> (default) or topic links /t/<slug>/<topic_id>",
    )
    group.add_argument(
        "--base-url", default=None, metavar="URL", help="make links absolute, e.g. https://forum.example.com"
    )
    group.add_argument(
        "--no-canned",
        action="store_true",
        help="sanitise even a text that starts with the canned-reply marker (use for LLM output)",
    )
    group.set_defaults(handler=_sanitize)


def _sanitize(args: argparse.Namespace) -> int:
    evidence = read_evidence(args.evidence)
    try:
        normalize_base_url(args.base_url)
    except EvidenceError as exc:
        raise PermanentError(str(exc)) from None
    text = sys.stdin.buffer.read().decode("utf-8", errors="replace")
    result = sanitize(
        text, evidence, links=args.links, base_url=args.base_url, allow_canned=not args.no_canned
    )
    if not result.ok:
        raise PermanentError(
            f"the text cannot be made safe to post ({', '.join(result.reasons)}); nothing written"
        )
    if result.dropped:
        numbers = ", ".join(str(n) for n in result.dropped)
        print(f"citebot: dropped citations not in the evidence: {numbers}", file=sys.stderr)
    out = result.text
    if "canned" not in result.reasons and not out.endswith("\n"):
        out += "\n"  # read back, the trailing newline is stripped again: the output is a fixed point
    sys.stdout.write(out)
    return 0


def read_evidence(path: Path) -> tuple[EvidenceSource, ...]:
    """The evidence file, or PermanentError saying what is wrong with it."""
    try:
        items = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise PermanentError(f"cannot read evidence file {path}: {exc.strerror or exc}") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise PermanentError(f"evidence file {path} is not valid JSON: {exc}") from None
    if not isinstance(items, list):
        raise PermanentError(f"evidence file {path}: expected a JSON list of sources")
    try:
        return from_dicts(items)
    except EvidenceError as exc:
        raise PermanentError(f"evidence file {path}: {exc}") from None
