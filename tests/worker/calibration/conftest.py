"""The sample export indexed with the fake embedder, and ``citebot calibrate`` run on it in-process."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import make_settings
from worker.testing.models import FakeEmbedder

SAMPLE = Path(__file__).resolve().parents[3] / "eval" / "data" / "urho3d-sample"


@pytest.fixture
def indexed_sample(db_url: str) -> str:
    from backfill.run import BackfillOptions, run_backfill
    from backfill.sources.file import FileSource

    settings = make_settings(db_url, "redis://127.0.0.1:1/0")
    run_backfill(
        settings.database,
        FileSource(SAMPLE, assume_public=True),
        FakeEmbedder(model="test-model"),
        BackfillOptions(progress=False),
    )
    return db_url


def calibrate_args(tmp_path: Path, **kw: Any) -> argparse.Namespace:
    base = {
        "source": "file",
        "path": SAMPLE,
        "force": False,
        "min_topics": 20,
        "out": tmp_path / "out.json",
        "json": False,
        "report": False,
        "if_new": None,
        "restart": False,
        "progress": "log",
        "progress_every": 30.0,
    }
    return argparse.Namespace(**{**base, **kw})


def run_calibrate(db_url: str, tmp_path: Path, **kw: Any) -> dict[str, Any]:
    from backfill.calibrate import run

    settings = make_settings(db_url, "redis://127.0.0.1:1/0")
    assert run(settings, calibrate_args(tmp_path, **kw), embedder=FakeEmbedder(model="test-model")) == 0
    out: dict[str, Any] = json.loads((tmp_path / "out.json").read_text("utf-8"))
    return out
