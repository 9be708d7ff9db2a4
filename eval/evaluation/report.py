"""Writing a run's results: ``results.json``, ``report.md`` and PNG plots (matplotlib, Agg backend)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from eval.evaluation.evaluate import SHAPE_PREFIX

TABLE_COLUMNS = (
    ("n", "n"),
    ("topic_hit@1", "topic hit@1"),
    ("topic_hit@5", "topic hit@5"),
    ("topic_hit@10", "topic hit@10"),
    ("topic_mrr@10", "topic MRR@10"),
    ("topic_ndcg@10", "topic nDCG@10"),
    ("post_hit@5", "post hit@5"),
    ("post_hit@10", "post hit@10"),
    ("post_mrr@10", "post MRR@10"),
    ("post_ndcg@10", "post nDCG@10"),
    ("recall@25", "recall@25"),
    ("evidence_hit@5", "evidence hit@5"),
    ("latency_ms_p50", "p50 ms"),
)


def _fmt(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.3f}" if abs(value) < 10 else f"{value:.0f}"
    return str(value)


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_fmt(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def configs_table(configs: Mapping[str, Mapping[str, float]]) -> str:
    header = ["configuration", *(label for _, label in TABLE_COLUMNS)]
    rows = [[name, *(summary.get(key, "") for key, _ in TABLE_COLUMNS)] for name, summary in configs.items()]
    return markdown_table(header, rows)


def abstention_table(abstention: Mapping[str, Mapping[str, float]]) -> str:
    header = [
        "configuration",
        "OOD n",
        "abstain",
        "weak",
        "normal",
        "recall",
        "precision",
        "answerable abstained",
    ]
    rows = [
        [
            name,
            int(a["ood_n"]),
            int(a["ood_abstain"]),
            int(a["ood_weak"]),
            int(a["ood_normal"]),
            a["recall"],
            a["precision"],
            f"{int(a['answerable_abstain'])}/{int(a['answerable_n'])}"
            f" ({100 * a['answerable_abstained_rate']:.1f} %)",
        ]
        for name, a in abstention.items()
    ]
    return markdown_table(header, rows)


def shapes_table(slices: Mapping[str, Mapping[str, Mapping[str, float]]], half: str = "all") -> str:
    """Each conversation shape apart, per configuration: n, topic hit@1/@5, post hit@5, abstained
    (empty when no question carries a shape)."""
    rows = []
    for config, table in slices.items():
        for key, row in sorted(table.items()):
            name, _, which = key.rpartition("/")
            if name.startswith(SHAPE_PREFIX) and which == half:
                rows.append(
                    [
                        config,
                        name.removeprefix(SHAPE_PREFIX),
                        int(row.get("n", 0)),
                        row.get("topic_hit@1", ""),
                        row.get("topic_hit@5", ""),
                        row.get("post_hit@5", ""),
                        row.get("abstained", ""),
                    ]
                )
    if not rows:
        return ""
    header = ["configuration", "shape", "n", "topic hit@1", "topic hit@5", "post hit@5", "abstained"]
    return markdown_table(header, rows)


def write_json(path: Path, data: Any) -> None:
    """Indented JSON, except ``per_question`` (and ``probes.probes``) rows: one compact row a line."""
    rows_key = "per_question"
    if isinstance(data, dict) and isinstance(data.get(rows_key), list):
        head = {k: v for k, v in data.items() if k != rows_key}
        text = json.dumps(head, indent=1, ensure_ascii=False)
        rows = ",\n".join(json.dumps(r, ensure_ascii=False, separators=(",", ":")) for r in data[rows_key])
        text = text[: text.rindex("}")].rstrip() + f',\n "{rows_key}": [\n{rows}\n ]\n}}'
    else:
        text = json.dumps(data, indent=1, ensure_ascii=False)
    path.write_text(text + "\n", encoding="utf-8")


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_configs(configs: Mapping[str, Mapping[str, float]], path: Path) -> Path:
    """Grouped bars: topic hit@1/@5, post hit@5, recall@25 per configuration."""
    plt = _pyplot()
    metrics = ("topic_hit@1", "topic_hit@5", "post_hit@5", "post_mrr@10", "recall@25")
    names = list(configs)
    fig, ax = plt.subplots(figsize=(max(7.0, 1.6 * len(names) + 2), 4.5))
    width = 0.8 / len(metrics)
    for i, m in enumerate(metrics):
        xs = [j + (i - (len(metrics) - 1) / 2) * width for j in range(len(names))]
        values = [float(configs[n].get(m, 0.0)) for n in names]
        bars = ax.bar(xs, values, width, label=m)
        for x, v in zip(xs, values, strict=True):
            ax.text(x, v + 0.01, f"{v:.2f}", ha="center", va="bottom", fontsize=6, rotation=90)
        del bars
    ax.set_xticks(range(len(names)))
    ax.set_xticklabels([n.replace("+", "+\n") for n in names], fontsize=8)
    ax.set_ylim(0, 1.12)
    ax.set_ylabel("fraction of answerable questions")
    n = int(next(iter(configs.values())).get("n", 0)) if configs else 0
    ax.set_title(f"Retrieval quality per configuration (n = {n})")
    ax.legend(fontsize=7, ncol=len(metrics), loc="upper center")
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_latency(per_question: Sequence[Mapping[str, Any]], names: Sequence[str], path: Path) -> Path:
    """Box plot of retrieve() latency per configuration."""
    plt = _pyplot()
    data = [
        [float(r["latency_ms"]) for r in per_question if r["config"] == n and not r.get("error")]
        for n in names
    ]
    fig, ax = plt.subplots(figsize=(max(7.0, 1.6 * len(names) + 2), 4.0))
    ax.boxplot(data, showfliers=False)
    ax.set_xticks(range(1, len(names) + 1))
    ax.set_xticklabels([n.replace("+", "+\n") for n in names], fontsize=8)
    ax.set_yscale("log")
    ax.set_ylabel("retrieve() latency, ms (log)")
    ax.set_title("Latency per configuration (whiskers 1.5 IQR, outliers hidden)")
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
