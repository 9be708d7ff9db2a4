"""``citebot ask QUESTION``: run the answer path once against the configured services; post nothing.

The question is built as the worker builds it from a post (``worker.question``): ``--title`` is the
topic's title, each ``--thread`` an earlier post of the topic (oldest first), and ``--follow-up`` makes
the last of them the member's earlier question to the bot.

With ``--retrieve-only`` it stops after stages 1–3 and prints the sources and zone the bot would
answer from; otherwise it also runs the gate, the prompt, the LLM (or the offline generator) and the
sanitizer, and prints the reply it would post. The feature flags are taken as all on unless
``--legacy`` / ``--no-rerank`` / ``--no-gate`` say otherwise (the forum's site settings are not read).
"""

from __future__ import annotations

import argparse
import json
import sys

NAME = "ask"
HELP = "run the pipeline once for a question and print sources, zone, reply and trace (posts nothing)"


def register(group: argparse.ArgumentParser) -> None:
    group.add_argument("question", help="the question, as a member would write it")
    group.add_argument("--title", default="", help="the topic's title (a new topic's, or the thread's)")
    group.add_argument(
        "--thread", action="append", default=[], help="an earlier post of the topic (repeat, oldest first)"
    )
    group.add_argument(
        "--follow-up", action="store_true", help="the last --thread post is the member's earlier question"
    )
    group.add_argument("--retrieve-only", action="store_true", help="stop after retrieval (stages 1–3)")
    group.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    group.add_argument(
        "--legacy", action="store_true", help="legacy path: keyword search, each hit topic's answer cited"
    )
    group.add_argument(
        "--no-rerank",
        action="store_true",
        help="skip the ranker (second stage, cross-encoder): fused order, zone normal (flag rerank off)",
    )
    group.add_argument("--no-gate", action="store_true", help="skip the intent gate")
    group.add_argument("--exclude", type=int, action="append", default=[], help="hide this post id")
    group.set_defaults(handler=_ask)


def _ask(args: argparse.Namespace) -> int:
    import httpx

    from gate import Gate, canned_text, detect_language
    from sanitizer import LinkGrain
    from worker.app.commands.common import preflight, settings_from
    from worker.budget import shared_budget
    from worker.clients.discourse import DiscourseClient
    from worker.db.connect import open_pool
    from worker.generation.factory import chat_model_from
    from worker.generation.reply import write_reply
    from worker.question import thread_question
    from worker.retrieval.factory import build_retriever
    from worker.retrieval.route import Route

    settings = settings_from(args)
    asked = thread_question(
        args.question,
        settings.discourse.bot_username,
        title=args.title,
        thread=args.thread,
        follow_up=args.follow_up,
    )
    question = asked.text or args.question
    out: dict[str, object] = {"question": args.question, "asked": asked.trace()}
    if not args.no_gate:
        gate = Gate.load(
            settings.gate.rules_path,
            timeout_ms=settings.gate.timeout_ms,
            max_chars=settings.gate.max_chars,
            lexical=settings.gate.lexical,
        )
        decision = gate.check(asked.own or question)  # the member's words, as the worker screens
        out["gate"] = {
            "hit": decision.hit,
            "rule": decision.rule_id,
            "category": decision.category,
            "kind": decision.kind,
        }
        if (decision.hit or decision.kind == "support") and not args.retrieve_only:
            out["reply"] = canned_text(decision)
            return _print(out, args.json)
    preflight(settings, index=not args.legacy)
    with httpx.Client() as http:
        pool = open_pool(settings.database, max_size=2)
        try:
            forum = DiscourseClient(http, settings.discourse, budget=shared_budget(settings)).reader()
            with build_retriever(
                settings, connections=pool.connection, keyword=forum, http=http, topics=forum
            ) as retriever:
                result = retriever.retrieve(
                    question,
                    exclude_post_ids=tuple(args.exclude),
                    route=Route(posts=not args.legacy, ranker="fused" if args.no_rerank else "auto"),
                )
            # legacy sources are answer posts (worker/retrieval/legacy.py): linked like the worker does
            grain: LinkGrain = "post" if result.grain == "post" or result.legacy else "topic"
            base = settings.discourse.base_url
            out["zone"] = result.zone
            out["grain"] = grain
            out["legacy_reason"] = result.legacy_reason
            out["sources"] = [
                {
                    "n": s.n,
                    "title": s.title,
                    "url": f"{base}/t/{s.slug}/{s.topic_id}"
                    + (f"/{s.post_number}" if grain == "post" else ""),
                    "score": s.score,
                    "post_id": s.post_id,
                }
                for s in result.sources
            ]
            out["trace"] = result.trace.to_dict()
            if not args.retrieve_only:
                # what the worker would post (worker.generation.reply), in the question's language
                written = write_reply(
                    question,
                    result.sources,
                    result.zone,
                    chat=chat_model_from(settings.llm, http),
                    bot_name=settings.discourse.bot_username,
                    base_url=base,
                    grain=grain,
                    token_budget=settings.llm.context_tokens,
                    floor=result.floor,
                    place="reply" if asked.shape in ("reply", "follow_up") else "new_topic",
                    language=detect_language(asked.own or question),
                )
                out["reply"] = written.reply if written.ok else None
                out["sanitizer"] = {"ok": written.clean.ok, "reasons": list(written.clean.reasons)}
                out["model"] = written.completion.model
        finally:
            pool.close()
    return _print(out, args.json)


def _print(out: dict[str, object], as_json: bool) -> int:
    if as_json:
        print(json.dumps(out, ensure_ascii=False, default=str))
        return 0
    asked = out.get("asked")
    if isinstance(asked, dict) and asked.get("shape") != "direct":
        parts = asked.get("parts") or {}
        print(
            f"asked as a {asked.get('shape')}: " + "; ".join(f"{k} {len(v)} chars" for k, v in parts.items())
        )
    gate = out.get("gate")
    if isinstance(gate, dict) and gate.get("hit"):
        print(f"gate: refused by rule {gate['rule']} ({gate['category']})")
    if "zone" in out:
        legacy = f" — legacy: {out['legacy_reason']}" if out.get("legacy_reason") else ""
        print(f"zone: {out['zone']}   links: {out['grain']}{legacy}")
        for src in out.get("sources") or []:  # type: ignore[attr-defined]
            score = "" if src["score"] is None else f"{src['score']:+.2f}"
            print(f"  [[{src['n']}]] {score:>6}  {src['title']}\n          {src['url']}")
        trace = out.get("trace")
        if isinstance(trace, dict):
            parts = [f"{s['name']} {s['duration_ms']:.0f} ms" for s in trace.get("stages", [])]
            print("stages: " + ", ".join(parts))
            for fb in trace.get("fallbacks", []):
                print(f"fallback: {fb['stage']}: {fb['reason']}")
    if "reply" in out:
        print("\nreply:" if out["reply"] else "\nreply: (the sanitizer refused it; nothing would be posted)")
        if out["reply"]:
            print(out["reply"])
    sys.stdout.flush()
    return 0
