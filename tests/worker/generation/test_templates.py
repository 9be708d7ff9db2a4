"""Prompt templates: shipped set, versioning, validation of a custom set."""

from __future__ import annotations

import re
import shutil
from importlib import resources
from pathlib import Path

import pytest

from worker.errors import ConfigError
from worker.generation.prompt import build_prompt
from worker.generation.prompt_templates import TEMPLATE_FILES, load_templates


def shipped_dir(tmp_path: Path) -> Path:
    target = tmp_path / "templates"
    with resources.as_file(resources.files("worker.generation") / "templates") as src:
        shutil.copytree(src, target)
    return target


def test_shipped_version_is_the_version_line_plus_a_digest() -> None:
    templates = load_templates()
    line = (resources.files("worker.generation") / "templates" / "VERSION").read_text().strip()
    assert templates.version.startswith(line + "+")
    assert load_templates() is templates  # loaded once


def test_a_copy_has_the_same_version_and_an_edit_changes_it(tmp_path: Path) -> None:
    directory = shipped_dir(tmp_path)
    assert load_templates(directory).version == load_templates().version
    path = directory / "evidence_weak.md"
    path.write_text(path.read_text() + "\nBe brief.\n")
    edited = load_templates(directory)
    assert edited.version.split("+")[0] == load_templates().version.split("+")[0]
    assert edited.version != load_templates().version
    prompt = build_prompt("q", [], "weak", templates=edited)
    assert prompt.version == edited.version


def test_a_template_missing_a_placeholder_is_refused(tmp_path: Path) -> None:
    directory = shipped_dir(tmp_path)
    (directory / "evidence_normal.md").write_text("STABLE FORUM EVIDENCE\nno evidence here\n")
    with pytest.raises(ConfigError, match=r"evidence_normal.md: placeholders \[\], expected \['evidence'\]"):
        load_templates(directory)


def test_an_unknown_placeholder_is_refused(tmp_path: Path) -> None:
    directory = shipped_dir(tmp_path)
    (directory / "question.md").write_text("$question $language_rule $secret\n")
    with pytest.raises(ConfigError, match=r"question\.md"):
        load_templates(directory)


@pytest.mark.parametrize("name", [*TEMPLATE_FILES, "VERSION"])
def test_a_missing_file_is_a_config_error(tmp_path: Path, name: str) -> None:
    directory = shipped_dir(tmp_path)
    (directory / name).unlink()
    with pytest.raises(ConfigError, match=re.escape(name)):
        load_templates(directory)
