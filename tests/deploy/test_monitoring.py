"""The Grafana dashboard and the Prometheus alert rules name only metrics the code exports."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
import yaml
from prometheus_client import REGISTRY, CollectorRegistry
from prometheus_client.metrics_core import Metric

# Importing these modules registers their metrics on the default registry.
import worker.clients.llm
import worker.flags
import worker.metrics  # noqa: F401
from tests.conftest import RedisClients
from worker.actors import INDEX_QUEUE, MAINTENANCE_QUEUE, QUESTIONS_QUEUE
from worker.app.webhook import WebhookMetrics
from worker.backlog import BacklogCollector

MONITORING = Path(__file__).resolve().parents[2] / "deploy" / "monitoring"
ALERTS = MONITORING / "alerts.yaml"
DASHBOARD = MONITORING / "grafana-dashboard.json"
NAME = re.compile(r"\bcitebot_[a-z0-9_]+\b")
SUFFIXES = {"counter": ("_total", "_created"), "histogram": ("_bucket", "_sum", "_count", "_created")}
# What the alerts must cover (issue 16): a rule per concern, found by the metric it reads.
REQUIRED = {
    "webhook 401": 'citebot_webhook_deliveries_total{outcome="unauthorized"}',
    "webhook 503": 'citebot_webhook_deliveries_total{outcome="unavailable"}',
    "queue depth": "citebot_queue_messages",
    "queue age": "citebot_queue_oldest_age_seconds",
    "fallbacks": "citebot_fallbacks_total",
    "zone mix": "citebot_zones_total",
    "answers failed": 'citebot_answer_jobs_total{outcome="failed"}',
    "index empty": "citebot_index_posts",
    # issue 33: a question is answered, or an admin can see why not
    "questions held": 'citebot_unanswered_total{state="held"}',
    "questions not answered": 'citebot_unanswered_total{state!="held"}',
}


def series_names(families: Iterator[Metric]) -> set[str]:
    """The series names a scrape can show for these families (labelled counters may have no sample yet)."""
    out: set[str] = set()
    for family in families:
        out.add(family.name)
        out.update(family.name + s for s in SUFFIXES.get(family.type, ()))
        out.update(sample.name for sample in family.samples)
    return out


@pytest.fixture
def exported(db_url: str, redis_url: str, redis_client: RedisClients) -> Iterator[set[str]]:
    names = series_names(REGISTRY.collect())
    names |= series_names(WebhookMetrics(CollectorRegistry()).registry.collect())
    client = redis_client(redis_url)
    with psycopg.connect(db_url) as conn:

        def connections() -> psycopg.Connection:
            return conn

        collector = BacklogCollector(
            client, "citebot-tasks", (QUESTIONS_QUEUE, INDEX_QUEUE, MAINTENANCE_QUEUE), connections
        )
        names |= series_names(collector.collect())
        yield {n for n in names if n.startswith("citebot_")}


def alert_rules() -> list[dict[str, object]]:
    doc = yaml.safe_load(ALERTS.read_text("utf-8"))
    return [rule for group in doc["groups"] for rule in group["rules"]]


def dashboard_exprs() -> list[str]:
    doc = json.loads(DASHBOARD.read_text("utf-8"))
    return [t["expr"] for panel in doc["panels"] for t in panel.get("targets", [])]


@pytest.mark.integration
def test_every_metric_the_dashboard_and_the_alerts_name_is_exported(exported: set[str]) -> None:
    exprs = [str(r["expr"]) for r in alert_rules()] + dashboard_exprs()
    named = {n for e in exprs for n in NAME.findall(e)}
    assert named, "no metric found in the monitoring files"
    assert named <= exported, sorted(named - exported)


def test_the_alerts_cover_every_concern_and_are_well_formed() -> None:
    rules = alert_rules()
    for concern, needle in REQUIRED.items():
        assert any(needle in str(r["expr"]) for r in rules), concern
    names = [r["alert"] for r in rules]
    assert len(names) == len(set(names))
    for rule in rules:
        assert rule["labels"]["severity"] in {"warning", "critical"}  # type: ignore[index]
        assert rule["annotations"]["summary"]  # type: ignore[index]
        expr = str(rule["expr"])
        assert expr.count("(") == expr.count(")"), rule["alert"]


def test_the_dashboard_is_importable_json_with_a_datasource_variable() -> None:
    doc = json.loads(DASHBOARD.read_text("utf-8"))
    assert doc["uid"] == "citebot-overview"
    assert doc["title"] == "citebot"
    assert any(v["type"] == "datasource" for v in doc["templating"]["list"])
    ids = [p["id"] for p in doc["panels"]]
    assert len(ids) == len(set(ids))
    exprs = dashboard_exprs()
    assert len(exprs) == len(doc["panels"])
    assert all(e.count("(") == e.count(")") for e in exprs)
