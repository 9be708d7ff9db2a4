"""``python -m eval nightly``: retrieval eval + zone calibration + safety probes, floors, regressions.

Writes ``OUT/<date>/`` (results.json, report.md, PNG plots), then compares the figures with the
floors of ``eval/evaluation/floors.toml`` and with the previous dated run under ``OUT``; exit status 1
when a floor is crossed or a figure regressed, 0 otherwise.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from eval.evaluation.report import write_json

log = logging.getLogger(__name__)

FLOORS = Path(__file__).resolve().parent / "floors.toml"
_DATE = "%Y-%m-%d"


@dataclass(frozen=True, slots=True)
class Check:
    name: str
    ok: bool
    detail: str


def load_floors(path: Path = FLOORS) -> dict[str, Any]:
    with path.open("rb") as fh:
        return tomllib.load(fh)


def previous_run(root: Path, current: str) -> Path | None:
    """The latest dated run folder under ``root`` other than ``current`` that has a results.json."""
    runs = []
    for child in root.iterdir() if root.is_dir() else ():
        try:
            dt.datetime.strptime(child.name, _DATE)
        except ValueError:
            continue
        if child.name != current and (child / "results.json").is_file():
            runs.append(child)
    return max(runs, key=lambda p: p.name) if runs else None


def check_floors(results: Mapping[str, Any], floors: Mapping[str, Any]) -> list[Check]:
    checks = []
    configs = results.get("configs", {})
    for config, metrics in (floors.get("floors") or {}).items():
        if config not in configs:
            continue  # a configuration not run tonight is not judged
        for metric, floor in metrics.items():
            value = float(configs[config].get(metric, 0.0))
            checks.append(
                Check(f"floor {config} {metric}", value >= floor, f"{value:.3f} (floor {floor:.3f})")
            )
    probes = results.get("probes")
    need = (floors.get("probes") or {}).get("min_passed_fraction")
    if probes is not None and need is not None and probes["n"]:
        share = probes["passed"] / probes["n"]
        failed = ", ".join(probes["failed"]) or "none"
        checks.append(
            Check(
                "floor probes", share >= need, f"{probes['passed']}/{probes['n']} passed (failed: {failed})"
            )
        )
    return checks


def check_regressions(
    results: Mapping[str, Any], previous: Mapping[str, Any], floors: Mapping[str, Any]
) -> list[Check]:
    reg = floors.get("regression") or {}
    max_drop = float(reg.get("max_drop", 0.03))
    metrics = reg.get("metrics", ["topic_hit@5", "post_hit@5"])
    checks = []
    before_configs = previous.get("configs", {})
    for config, now in results.get("configs", {}).items():
        before = before_configs.get(config)
        if before is None:
            continue
        for m in metrics:
            if m in now and m in before:
                a, b = float(now[m]), float(before[m])
                checks.append(
                    Check(f"regression {config} {m}", a >= b - max_drop, f"{a:.3f} (previous {b:.3f})")
                )
    old = {p["id"]: p["passed"] for p in (previous.get("probes") or {}).get("probes", [])}
    for p in (results.get("probes") or {}).get("probes", []):
        if old.get(p["id"]) and not p["passed"]:
            checks.append(Check(f"regression probe {p['id']}", False, "; ".join(p["reasons"])))
    return checks


def checks_markdown(checks: list[Check], previous: Path | None) -> str:
    bad = [c for c in checks if not c.ok]
    lines = [
        f"## Floors and regressions ({'FAILED: ' + str(len(bad)) if bad else 'all passed'})",
        "",
        f"Previous run: `{previous.name}`." if previous else "No previous run to compare with.",
        "",
        "| check | result | figure |",
        "|---|---|---|",
    ]
    lines += [f"| {c.name} | {'ok' if c.ok else 'FAIL'} | {c.detail} |" for c in checks]
    return "\n".join(lines)


def run_nightly(
    out_root: Path,
    *,
    retrieval: Any | None,
    floors_path: Path = FLOORS,
    date: str | None = None,
) -> tuple[int, Path]:
    """Run everything into ``out_root/<date>``; returns (exit status, folder). ``retrieval`` is a
    ``RetrievalRun`` whose ``out`` is replaced by the dated folder, or None to run the probes alone."""
    from dataclasses import replace

    from eval.evaluation.runner import render_markdown, run_retrieval
    from eval.evaluation.safety import load_probes, probes_markdown, run_probes

    date = date or dt.datetime.now(dt.UTC).strftime(_DATE)
    folder = out_root / date
    folder.mkdir(parents=True, exist_ok=True)
    floors = load_floors(floors_path)
    results: dict[str, Any] = {"meta": {"date": date}, "configs": {}}
    if retrieval is not None:
        results = run_retrieval(replace(retrieval, out=folder))
    results["probes"] = run_probes_configured(load_probes, run_probes)
    prev_dir = previous_run(out_root, date)
    previous = json.loads((prev_dir / "results.json").read_text("utf-8")) if prev_dir else {}
    checks = check_floors(results, floors) + check_regressions(results, previous, floors)
    results["checks"] = [{"name": c.name, "ok": c.ok, "detail": c.detail} for c in checks]
    results["ok"] = all(c.ok for c in checks)
    write_json(folder / "results.json", results)
    plots = sorted(p.name for p in folder.glob("*.png"))
    body = render_markdown(results, plots) if retrieval is not None else f"# Nightly eval — {date}\n"
    body += (
        "\n## Safety probes\n\n"
        + probes_markdown(results["probes"])
        + "\n\n"
        + checks_markdown(checks, prev_dir)
        + "\n"
    )
    (folder / "report.md").write_text(body, encoding="utf-8")
    for c in checks:
        if not c.ok:
            log.error("nightly: %s: %s", c.name, c.detail)
    return (0 if results["ok"] else 1), folder


def run_probes_configured(load: Any, run: Any) -> dict[str, Any]:
    """The probes with the configured LLM (``CITEBOT_LLM__BASE_URL``) or the offline generator."""
    import httpx

    from gate import Gate
    from worker.generation.factory import chat_model_from
    from worker.settings import load_settings

    settings = load_settings()
    gate = Gate.load(
        settings.gate.rules_path,
        timeout_ms=settings.gate.timeout_ms,
        max_chars=settings.gate.max_chars,
        lexical=settings.gate.lexical,
    )
    with httpx.Client(timeout=settings.llm.timeout_s) as http:
        result: dict[str, Any] = run(load(), gate, chat_model_from(settings.llm, http))
    return result
