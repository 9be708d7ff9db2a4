"""Write the figures of the docs from the saved results: ``python -m eval.doc_figures [--check]``.

Each figure a doc quotes from a benchmark or an eval run sits in a marked block::

    <!-- BEGIN generated NAME -->
    ...
    <!-- END generated NAME -->

and the text between the markers is ``RENDERERS[NAME]()``, rendered from the JSON the bench or the eval
saved (``eval/results/bench/*.json``, ``eval/results/<run>/results.json``) or from a shipped data file
(``gate/rules/``, ``worker/retrieval/zone_thresholds.json``). Rerun the bench, then this command;
``tests/eval/test_doc_figures.py`` fails while a doc disagrees with its JSON (as
``worker.settings_doc`` does for ``docs/configuration.md``). Prose around the blocks is hand-written.
"""

from __future__ import annotations

import json
import re
import statistics
import sys
import tomllib
from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
BENCH = ROOT / "eval" / "results" / "bench"
RESULTS = ROOT / "eval" / "results"

BLOCK = re.compile(
    r"(?P<begin><!-- BEGIN generated (?P<name>[\w-]+) -->\n)"
    r"(?P<body>.*?)"
    r"(?P<end><!-- END generated (?P=name) -->)",
    re.DOTALL,
)

# The runs the docs quote (paths under eval/results/); a newer run replaces one here.
HUGE_PAGE_RUNS = ("recall-425k-hugepages-1", "recall-425k-hugepages-2", "recall-425k-hugepages-3")
EVAL_DEFAULTS_RUN = "issue16/full-defaults"
EVAL_CONFIGS_RUN = "2026-11-30"
EVAL_CHANNELS_RUN = "issue19/session4/test"
EVAL_STAGE_TEST_RUN = "issue19/session7/test-mpnet"
EVAL_STAGE_BLIND_RUN = "issue19/session7/blind-mpnet"


def _bench(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((BENCH / f"{name}.json").read_text(encoding="utf-8"))
    return data


def _results(run: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((RESULTS / run / "results.json").read_text(encoding="utf-8"))
    return data


def _n(value: float, digits: int = 0) -> str:
    """A number with thousands separators, as the docs write them."""
    return f"{value:,.{digits}f}"


def _ms(value: float) -> str:
    return f"{value:.2f}" if value < 10 else f"{value:.1f}" if value < 100 else _n(value)


def _met(ok: bool) -> str:
    return "**met**" if ok else "**missed**"


def _table(header: Iterable[str], rows: Iterable[Iterable[object]]) -> str:
    head = list(header)
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def _recall_rows(data: dict[str, Any]) -> Iterable[tuple[int, str, dict[str, Any], dict[str, Any]]]:
    """(posts, kind, the kind's entry, one result) for every result of a recall bench's JSON."""
    for size in data["sizes"]:
        for kind, entry in size["kinds"].items():
            for result in entry["results"]:
                yield size["n"], kind, entry, result


# --- docs/performance.md -------------------------------------------------------------------------


def _hugepage_medians() -> dict[tuple[str, str], dict[str, float]]:
    """Unfiltered 425k results by (huge pages, knob): the median over the runs of each figure."""
    runs: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for name in HUGE_PAGE_RUNS:
        for _, _, _, result in _recall_rows(_bench(name)):
            if result["filter"] == "none":
                runs.setdefault((result["huge_pages"], result["knob"]), []).append(result)
    return {
        key: {
            field: statistics.median(r[field] for r in results)
            for field in ("p50_ms", "p99_ms", "server_p50_ms", "recall_at_k")
        }
        for key, results in runs.items()
    }


def render_bench_summary() -> str:
    gate = _bench("gate")
    rules, forum = gate["forum.rules"], gate["forum"]
    gate_ok = rules["median_ms"] < 0.3 and rules["p99_ms"] < 3.0
    hook = _bench("webhook")
    hook_ok = bool(hook["passed"]) and hook["lost"] == 0
    huge = _hugepage_medians()
    fast = huge[("on", "ef_search=25")]
    default = huge[("on", "ef_search=40")]
    scale = _bench("recall-scale")
    largest = max(scale["sizes"], key=lambda s: s["n"])
    halfvec_bytes = next(
        s["kinds"]["halfvec"]["index_bytes_per_post"] for s in scale["sizes"] if "halfvec" in s["kinds"]
    )
    binary = largest["kinds"]["binary"]
    binary_default = next(r for r in binary["results"] if r["default"] and r["filter"] == "none")
    memory = binary["index_bytes_per_post"] / halfvec_bytes
    pipe = _bench("pipeline")
    gen = _bench("generation")
    fill = _bench("backfill")
    budget = _bench("api_budget")
    rows = [
        (
            "intent gate, 1,000 forum questions",
            "`gate`",
            f"{gate['rules']} rules: median {rules['median_ms']:.3f} ms, p99 {rules['p99_ms']:.2f} ms; "
            "with the lexical "
            f"head {forum['median_ms']:.3f} / {forum['p99_ms']:.2f} ms; false blocks "
            f"{gate['forum_false_blocks']}/{forum['n']:,}",
            f"rules median < 0.3 ms, p99 < 3 ms: {_met(gate_ok)}",
        ),
        (
            "webhook intake",
            "`webhook`",
            f"{_n(hook['deliveries_per_s'])} deliveries/s, ack p99 {hook['ack_p99_ms']:.1f} ms, "
            f"{hook['lost']} lost "
            f"({hook['queued']:,} queued); `/healthz` {_n(hook['healthz_per_s'])}/s",
            f"≥ {_n(hook['target']['deliveries_per_s'])}/s, p99 < {hook['target']['ack_p99_ms']:.0f} ms, 0 "
            f"lost: {_met(hook_ok)}",
        ),
        (
            "recall, 425k × 1024-d halfvec, huge pages (median of 3 runs)",
            "`recall --huge-pages off,on`",
            f"ef_search 25: recall@25 {fast['recall_at_k']:.3f}, p50 {fast['p50_ms']:.2f} ms; ef_search 40 "
            "(default): "
            f"{default['recall_at_k']:.3f}, {default['p50_ms']:.2f} ms",
            f"recall ≥ 0.95 with p50 ≤ 2 ms: {_met(fast['recall_at_k'] >= 0.95 and fast['p50_ms'] <= 2.0)} "
            "at ef_search 25, "
            f"{_met(default['p50_ms'] <= 2.0)} at 40",
        ),
        (
            f"recall at {largest['n']:,} posts, binary index",
            "`recall --sizes …`",
            f"recall@25 {binary_default['recall_at_k']:.3f} at {binary_default['knob'].replace('=', ' ')}, "
            f"p50 {binary_default['p50_ms']:.1f} ms; index {memory:.3f}× halfvec's bytes a post",
            "memory ≤ 1/4 with recall ≥ 0.95: "
            f"{_met(memory <= 0.25 and binary_default['recall_at_k'] >= 0.95)}",
        ),
        (
            "retrieval end to end (loopback, CPU rerank stand-in)",
            "`pipeline`",
            f"p50 {_n(pipe['p50_ms'])} ms, p99 {_n(pipe['p99_ms'])} ms; rerank "
            f"{pipe['stages']['rerank']['share']:.0%} of it; "
            f"legacy p50 {pipe['legacy_p50_ms']:.0f} ms",
            "—",
        ),
        (
            "prompt + offline generator",
            "`generation`",
            f"build p50 {gen['build_p50_ms_6000']:.2f} ms; cites the accepted answer "
            f"{gen['offline_cites_answer']:.3f} "
            f"(positional reference {gen['positional_cites_answer']:.2f})",
            "—",
        ),
        (
            f"backfill write path, {fill['n']:,} posts, no model",
            "`backfill --no-index`",
            f"{_n(fill['posts_per_s_before_index'])} posts/s ({fill['ratio_to_raw_copy']:.3f}× a raw COPY); "
            f"unchanged second pass {_n(fill['second_pass_posts_per_s'])}/s; RSS grew "
            f"{fill['rss_growth_mb_after_first_sample']:.0f} MB",
            f"≥ {_n(fill['target_posts_per_s'])} posts/s, memory flat: {_met(bool(fill['meets_target']))}",
        ),
        (
            "Discourse API budget, backfill beside answering",
            "`api_budget`",
            f"{budget['calls_per_answer_no_budget']:.1f} requests an answer; busiest minute "
            f"{budget['peak_per_min']}, "
            f"{budget['rate_limited_429']} × 429; answer p50 ×{budget['latency_ratio']:.2f} with the budget",
            f"peak < Discourse's {budget['forum_limit_per_min']}/min, 0 × 429: "
            + _met(
                budget["peak_per_min"] < budget["forum_limit_per_min"] and budget["rate_limited_429"] == 0
            ),
        ),
    ]
    return _table(("what", "`python -m eval.bench …`", "latest saved figure", "target (SPEC §7)"), rows)


def render_recall_hugepages() -> str:
    huge = _hugepage_medians()
    rows = [
        (
            pages,
            knob.replace("ef_search=", ""),
            f"{m['recall_at_k']:.3f}",
            f"{m['p50_ms']:.2f}",
            f"{m['p99_ms']:.2f}",
            f"{m['server_p50_ms']:.2f}",
        )
        for (pages, knob), m in sorted(
            huge.items(), key=lambda item: (item[0][0], int(item[0][1].split("=")[1]))
        )
    ]
    runs = ", ".join(f"`{name}.json`" for name in HUGE_PAGE_RUNS)
    table = _table(("huge pages", "ef_search", "recall@25", "p50 ms", "p99 ms", "server p50 ms"), rows)
    return f"Unfiltered queries, median of {len(HUGE_PAGE_RUNS)} runs ({runs}):\n\n{table}"


def render_recall_scale() -> str:
    data = _bench("recall-scale")
    rows = [
        (
            f"{n:,}",
            kind,
            result["knob"].replace("=", " ") + (" (default)" if result["default"] else ""),
            f"{result['recall_at_k']:.3f}",
            _ms(result["p50_ms"]),
            _ms(result["server_p50_ms"]),
            f"{entry['index_bytes_per_post']:,.0f}",
        )
        for n, kind, entry, result in _recall_rows(data)
        if result["filter"] == "none"
    ]
    numpy = " / ".join(f"{s['brute_force_p50_ms']:.0f}" for s in data["sizes"])
    table = _table(
        ("posts", "index", "knob", "recall@25", "p50 ms", "server p50 ms", "index bytes/post"), rows
    )
    return (
        f"`recall-scale.json`, {data['dim']}-d {data['shape']}, {data['queries']} queries, unfiltered, "
        "load average "
        f"{data['load_average']}:\n\n{table}\n\nnumpy float32 brute force in the same run: {numpy} ms a "
        "query."
    )


def render_pipeline_stages() -> str:
    data = _bench("pipeline")
    rows = [
        (stage, _ms(s["p50_ms"]), _ms(s["p99_ms"]), f"{s['share']:.1%}")
        for stage, s in data["stages"].items()
    ]
    return (
        f"`pipeline.json`: {data['questions']} questions over {data['topics']} topics ({data['posts']} "
        "posts), load "
        f"average {data['load_average']}; total p50 {_n(data['p50_ms'])} ms, p99 {_n(data['p99_ms'])} ms; "
        f"{data['fallbacks']} rerank fallbacks.\n\n" + _table(("stage", "p50 ms", "p99 ms", "share"), rows)
    )


def render_webhook_costs() -> str:
    data = _bench("webhook_costs")
    rows = [(part, f"{v['cpu_us']:.1f}", f"{v['wall_us']:,.0f}") for part, v in data["parts"].items()]
    return (
        f"`webhook_costs.json`, {data['n']:,} calls each, load average {data['load_average']} (read the "
        "shares):\n\n" + _table(("part", "CPU µs", "wall µs"), rows)
    )


def render_api_budget() -> str:
    data = _bench("api_budget")
    routes = sorted(data["calls_by_route_no_budget"].items(), key=lambda item: -item[1])
    table = _table(("route (admin API key)", "requests"), routes)
    return (
        f"`api_budget.json`, {data['questions_per_phase']} questions a phase: "
        f"{data['calls_per_answer_no_budget']:.1f} "
        "admin-API requests an answer without the budget (and "
        f"{data['reader_calls_per_answer_no_budget']:.1f} as the "
        f"anonymous reader, which the budget does not count), {data['calls_per_answer_budget']:.1f} with "
        "it; busiest "
        f"minute {data['peak_per_min']} requests with the backfill running ({data['backfill_calls']} of "
        "its own), "
        f"{data['rate_limited_429']} × 429; answer p50 {data['p50_s_no_budget']:.3f} s without the budget, "
        f"{data['p50_s_budget']:.3f} s with it and the backfill (×{data['latency_ratio']:.2f}). By route, "
        "without the "
        f"budget:\n\n{table}"
    )


# --- docs/eval.md ----------------------------------------------------------------------------------

_METRICS = (
    "topic_hit@1",
    "topic_hit@5",
    "topic_hit@10",
    "topic_mrr@10",
    "post_hit@5",
    "post_hit@10",
    "recall@25",
    "evidence_hit@5",
)


def _configs_table(data: dict[str, Any]) -> str:
    rows = [
        (name, m["n"], *(f"{m[k]:.3f}" for k in _METRICS), _n(m["latency_ms_p50"]))
        for name, m in data["configs"].items()
    ]
    return _table(("configuration", "n", *_METRICS, "p50 ms"), rows)


def _abstention_line(a: dict[str, Any]) -> str:
    return (
        f"thresholds {a['abstain_below']} / {a['weak_below']}: out-of-domain abstained "
        f"{a['ood_abstain']}/{a['ood_n']} "
        f"({a['recall']:.3f}); answerable abstained {a['answerable_abstain']}/{a['answerable_n']} "
        f"({a['answerable_abstained_rate']:.1%}); answerable in the weak zone {a['answerable_weak']}, normal "
        f"{a['answerable_normal']}"
    )


def render_eval_defaults() -> str:
    data = _results(EVAL_DEFAULTS_RUN)
    meta = data["meta"]
    ((name, abstention),) = data["abstention"].items()
    return (
        f"`eval/results/{EVAL_DEFAULTS_RUN}/` ({meta['date']}; {meta['posts_indexed']:,} posts indexed; "
        f"{meta['answerable']} answerable and {meta['out_of_domain']} out-of-domain questions; scorer "
        f"`{meta['scorer']}`):\n\n{_configs_table(data)}\n\n`{name}`, {_abstention_line(abstention)}."
    )


def render_eval_configs() -> str:
    data = _results(EVAL_CONFIGS_RUN)
    meta = data["meta"]
    return (
        f"`eval/results/{EVAL_CONFIGS_RUN}/` ({meta['date']}; {meta['posts_indexed']:,} posts; "
        f"{meta['answerable']} answerable questions):\n\n{_configs_table(data)}"
    )


def _stage_row(label: str, slices: dict[str, Any]) -> tuple[object, ...]:
    long, short = slices["long/test"], slices["short/test"]
    ood, near = slices.get("ood/test"), slices.get("near_domain/test")
    zones = "stage" in label

    def share(s: dict[str, Any] | None) -> str:
        return f"{round(s['abstained'] * s['n'])}/{s['n']}" if s and zones else "—"

    return (
        label,
        *(f"{long[k]:.3f}" for k in ("topic_hit@5", "post_hit@5", "cited_accepted")),
        *(f"{short[k]:.3f}" for k in ("topic_hit@5", "post_hit@5", "cited_accepted")),
        share(ood),
        share(near),
        f"{share(long)} / {share(short)}" if zones else "—",
    )


def render_eval_stage() -> str:
    channels, mpnet, blind = (
        _results(EVAL_CHANNELS_RUN),
        _results(EVAL_STAGE_TEST_RUN),
        _results(EVAL_STAGE_BLIND_RUN),
    )
    rows = [_stage_row(f"`{name}`", slices) for name, slices in channels["slices"].items()]
    ((name, best),) = mpnet["slices"].items()
    rows.append(_stage_row(f"**`{name}`** (mpnet set)", best))
    header = (
        "configuration",
        "long topic@5",
        "long post@5",
        "long cited accepted",
        "short topic@5",
        "short post@5",
        "short cited accepted",
        "off-topic abstained",
        "near-domain abstained",
        "answerable abstained long / short",
    )
    long, short, ood = best["long/test"], best["short/test"], best["ood/test"]
    singles = [s["long/test"] for n, s in channels["slices"].items() if "stage" not in n]
    above = all(
        long["topic_hit@5"] > s["topic_hit@5"] and long["post_hit@5"] > s["post_hit@5"] for s in singles
    )
    b = blind["slices"][name]
    near = b["near_domain/all"]
    checks = [
        f"long topic hit@5 {long['topic_hit@5']:.3f} ≥ 0.87: {_met(long['topic_hit@5'] >= 0.87)}",
        f"long post hit@5 {long['post_hit@5']:.3f} ≥ 0.60: {_met(long['post_hit@5'] >= 0.60)}",
        f"above every single channel: {_met(above)}",
        f"off-topic abstained {ood['abstained']:.3f} ≥ 0.9: {_met(ood['abstained'] >= 0.9)}",
        f"answerable abstained ≤ 5 %, long {long['abstained']:.1%} and short {short['abstained']:.1%}: "
        + _met(long["abstained"] <= 0.05 and short["abstained"] <= 0.05),
    ]
    return (
        f"The test half, `eval/results/{EVAL_CHANNELS_RUN}/` ({channels['meta']['date']}; the single "
        "channels and the "
        f"MiniLM set) and `eval/results/{EVAL_STAGE_TEST_RUN}/` ({mpnet['meta']['date']}; the mpnet set):\n\n"
        + _table(header, rows)
        + f"\n\nThe blind out-of-domain set (`eval/results/{EVAL_STAGE_BLIND_RUN}/`, never fitted on), the "
        "mpnet set: "
        f"off-topic abstained {round(b['ood/all']['abstained'] * b['ood/all']['n'])}/{b['ood/all']['n']}, "
        "near-domain "
        f"{round(near['abstained'] * near['n'])}/{near['n']}.\n\n"
        "Against the targets, the mpnet set: " + "; ".join(checks) + "."
    )


def render_eval_probes() -> str:
    data = _results(EVAL_CONFIGS_RUN)
    probes = data["probes"]
    rows = [(kind, k["n"], k["passed"]) for kind, k in sorted(probes["by_kind"].items())]
    checks = data["checks"]
    failed = [c["name"] for c in checks if not c["ok"]]
    return (
        f"`eval/results/{EVAL_CONFIGS_RUN}/`, generator `{probes['model']}`: "
        f"{probes['passed']}/{probes['n']} probes "
        f"passed.\n\n{_table(('kind', 'probes', 'passed'), rows)}\n\nThe nightly checks of that run: "
        f"{len(checks) - len(failed)}/{len(checks)} passed"
        + (f" (failed: {', '.join(failed)})." if failed else ".")
    )


def render_zone_thresholds() -> str:
    data = json.loads((ROOT / "worker" / "retrieval" / "zone_thresholds.json").read_text(encoding="utf-8"))
    rows = [
        (
            f"`{scorer}`",
            entry["abstain_below"],
            entry["weak_below"],
            entry.get("fitted") or entry.get("source", ""),
        )
        for scorer, entry in data["scorers"].items()
    ]
    return _table(("scorer", "abstain below", "weak below", "from"), rows)


# --- the gate's rules ------------------------------------------------------------------------------


def render_gate_rules() -> str:
    # The rules folder: one file per category, frames.toml; lexicons.toml holds no rules.
    files = [
        tomllib.loads(p.read_text(encoding="utf-8")) for p in sorted((ROOT / "gate" / "rules").glob("*.toml"))
    ]
    rules = [rule for data in files for rule in data.get("rules", [])]
    counts = Counter(rule["category"] for rule in rules)
    strict = Counter(rule["category"] for rule in rules if rule.get("strict"))
    rows = [(f"`{category}`", counts[category], strict[category]) for category in sorted(counts)]
    table = _table(("category", "rules", "strict (no exceptions)"), rows)
    frames = sum(len(data.get("frames", [])) for data in files)
    return f"`gate/rules/`: {len(rules)} rules in {len(counts)} categories, {frames} frames.\n\n{table}"


RENDERERS: dict[str, Callable[[], str]] = {
    "bench-summary": render_bench_summary,
    "recall-hugepages": render_recall_hugepages,
    "recall-scale": render_recall_scale,
    "pipeline-stages": render_pipeline_stages,
    "webhook-costs": render_webhook_costs,
    "api-budget": render_api_budget,
    "eval-defaults": render_eval_defaults,
    "eval-configs": render_eval_configs,
    "eval-stage": render_eval_stage,
    "eval-probes": render_eval_probes,
    "zone-thresholds": render_zone_thresholds,
    "gate-rules": render_gate_rules,
}


def rewrite(text: str) -> str:
    """``text`` with every generated block rendered afresh; an unknown block name is a ``KeyError``."""

    def block(match: re.Match[str]) -> str:
        render = RENDERERS[match["name"]]
        return f"{match['begin']}{render().rstrip()}\n{match['end']}"

    return BLOCK.sub(block, text)


def main(argv: list[str]) -> int:
    stale = []
    for path in sorted(DOCS.glob("*.md")):
        current = path.read_text(encoding="utf-8")
        fresh = rewrite(current)
        if fresh == current:
            continue
        if "--check" in argv:
            stale.append(path)
        else:
            path.write_text(fresh, encoding="utf-8")
            print(f"wrote {path}")
    for path in stale:
        print(f"{path} is stale: run `python -m eval.doc_figures`", file=sys.stderr)
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
