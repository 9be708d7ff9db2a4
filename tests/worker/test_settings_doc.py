from __future__ import annotations

from worker.settings import Settings
from worker.settings_doc import DOC_PATH, render


def test_configuration_reference_is_current() -> None:
    assert DOC_PATH.read_text(encoding="utf-8") == render(), "run `python -m worker.settings_doc`"


def test_every_setting_is_documented() -> None:
    text = render()
    for group, field in Settings.model_fields.items():
        annotation = field.annotation
        sub = getattr(annotation, "model_fields", None)
        if sub is None:
            assert f"`CITEBOT_{group.upper()}`" in text
            continue
        for name, inner in sub.items():
            assert f"`CITEBOT_{group.upper()}__{name.upper()}`" in text
            assert inner.description, f"{group}.{name} has no description"
