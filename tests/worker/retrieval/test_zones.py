from __future__ import annotations

import math

import pytest

from worker.retrieval.aggregate import assign_zone


@pytest.mark.parametrize(
    ("logit", "zone"),
    [
        (-10.0, "abstain"),
        (-4.000001, "abstain"),
        (-4.0, "weak"),  # the abstain threshold itself is weak: [−4, 0)
        (-3.9, "weak"),
        (-0.000001, "weak"),
        (0.0, "normal"),  # the weak threshold itself is normal
        (0.5, "normal"),
        (12.0, "normal"),
    ],
)
def test_default_thresholds(logit: float, zone: str) -> None:
    assert assign_zone(logit, -4.0, 0.0) == zone


def test_no_logit_means_normal() -> None:
    assert assign_zone(None) == "normal"
    assert assign_zone(math.nan) == "normal"
    assert assign_zone(-math.inf) == "normal"


def test_custom_and_equal_thresholds() -> None:
    assert assign_zone(-1.5, abstain_below=-1.0, weak_below=2.0) == "abstain"
    assert assign_zone(1.0, abstain_below=-1.0, weak_below=2.0) == "weak"
    # Equal thresholds: no weak zone at all.
    assert assign_zone(-0.1, abstain_below=0.0, weak_below=0.0) == "abstain"
    assert assign_zone(0.0, abstain_below=0.0, weak_below=0.0) == "normal"
    with pytest.raises(ValueError, match="abstain_below"):
        assign_zone(0.0, abstain_below=1.0, weak_below=0.0)
