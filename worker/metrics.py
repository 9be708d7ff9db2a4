"""Prometheus metrics of the answer path (the webhook, flags and LLM client keep their own)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

JOBS = Counter("citebot_answer_jobs", "Answer jobs, by final outcome of the attempt.", ["outcome"])
STAGE_SECONDS = Histogram(
    "citebot_stage_seconds",
    "Duration of each stage of the answer path.",
    ["stage"],
    buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
)
ZONES = Counter("citebot_zones", "Evidence zone of answered questions.", ["zone"])
FALLBACKS = Counter("citebot_fallbacks", "Fallbacks taken, by stage and reason.", ["stage", "reason"])
UNANSWERED = Counter(
    "citebot_unanswered",
    "Questions a member asked that got no answer, by state (held, denied, skipped, failed, "
    "held_for_review) and reason (worker/answers.py REASONS).",
    ["state", "reason"],
)
CALIBRATION_MERIT = Gauge(
    "citebot_calibration_merit",
    "Merit of the calibrated weights in use (citebot calibrate; docs/calibrate.md) on the test half of the "
    "run that fitted them (measured=at_fit) and on that of the latest run that measured them again "
    "(measured=latest).",
    ["model_set", "measured"],
)
