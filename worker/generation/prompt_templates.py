"""The prompt templates: text files next to this module, loaded once and versioned.

A template set is the five files of a directory (``system.md``, ``evidence_normal.md``,
``evidence_weak.md``, ``evidence_abstain.md``, ``question.md``) plus a ``VERSION`` line. The version
recorded in each answer's trace is ``<VERSION>+<sha>``, where ``sha`` is the first 12 hex digits of the
SHA-256 of the template texts, so an edit that forgets to bump ``VERSION`` still shows up in traces.
Another directory can be loaded for an A/B comparison of two prompt variants.
"""

from __future__ import annotations

import hashlib
import string
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path

from worker.domain import Zone
from worker.errors import ConfigError

TEMPLATE_FILES = ("system.md", "evidence_normal.md", "evidence_weak.md", "evidence_abstain.md", "question.md")
_PLACEHOLDERS = {
    "system.md": frozenset({"bot_name", "forum_name"}),
    "evidence_normal.md": frozenset({"evidence"}),
    "evidence_weak.md": frozenset({"evidence", "ask_forum"}),
    "evidence_abstain.md": frozenset({"evidence", "ask_forum"}),
    "question.md": frozenset({"question", "language_rule"}),
}


@dataclass(frozen=True, slots=True)
class PromptTemplates:
    """One loaded template set; ``version`` goes into the trace of every answer built from it."""

    system: string.Template
    evidence_normal: string.Template
    evidence_weak: string.Template
    evidence_abstain: string.Template
    question: string.Template
    version: str

    def evidence(self, zone: Zone) -> string.Template:
        """The evidence template of a zone (``$evidence``; weak and abstain also ``$ask_forum``, how to
        send the member to the forum from where they asked)."""
        if zone == "normal":
            return self.evidence_normal
        if zone == "weak":
            return self.evidence_weak
        return self.evidence_abstain


def _check(name: str, text: str, where: Path | str) -> string.Template:
    template = string.Template(text)
    if not template.is_valid():
        raise ConfigError(f"prompt template {where}/{name}: invalid $placeholder")
    found = frozenset(template.get_identifiers())
    expected = _PLACEHOLDERS[name]
    if found != expected:
        raise ConfigError(
            f"prompt template {where}/{name}: placeholders {sorted(found)}, expected {sorted(expected)}"
        )
    return template


def load_templates(directory: Path | None = None) -> PromptTemplates:
    """Load a template set; ``None`` means the shipped one. Raises ConfigError on a broken set."""
    if directory is None:
        return _shipped()
    return _load(directory)


def _load(directory: Path) -> PromptTemplates:
    texts: dict[str, str] = {}
    try:
        version = (directory / "VERSION").read_text(encoding="utf-8").strip()
        for name in TEMPLATE_FILES:
            texts[name] = (directory / name).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"prompt templates in {directory}: {exc.strerror}: {exc.filename}") from None
    if not version or len(version.splitlines()) != 1:
        raise ConfigError(f"prompt templates in {directory}: VERSION must be one non-empty line")
    digest = hashlib.sha256()
    for name in TEMPLATE_FILES:
        digest.update(name.encode())
        digest.update(b"\0")
        digest.update(texts[name].encode())
        digest.update(b"\0")
    t = {name: _check(name, texts[name], directory) for name in TEMPLATE_FILES}
    return PromptTemplates(
        system=t["system.md"],
        evidence_normal=t["evidence_normal.md"],
        evidence_weak=t["evidence_weak.md"],
        evidence_abstain=t["evidence_abstain.md"],
        question=t["question.md"],
        version=f"{version}+{digest.hexdigest()[:12]}",
    )


@cache
def _shipped() -> PromptTemplates:
    with resources.as_file(resources.files("worker.generation") / "templates") as path:
        return _load(Path(path))
