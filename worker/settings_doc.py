"""Generate ``docs/configuration.md`` from ``Settings``: ``python -m worker.settings_doc [--check]``.

The reference is derived, never hand-written, so it cannot drift: a test runs ``--check``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from pydantic import BaseModel, SecretStr
from pydantic.fields import FieldInfo

from worker.settings import ENV_DELIMITER, ENV_PREFIX, Settings

DOC_PATH = Path(__file__).resolve().parent.parent / "docs" / "configuration.md"

HEADER = """# Configuration reference

Generated from `worker/settings.py` by `python -m worker.settings_doc`; do not edit by hand
(`tests/worker/test_settings_doc.py` fails when this file is stale).

Every setting is an environment variable with the `CITEBOT_` prefix; nested groups use `__`
(`CITEBOT_DATABASE__URL`). Secrets are `SecretStr`: never printed, never logged. A bad value stops the
process at start with a one-line error naming the variable (exit code 2).
"""


def _default(field: FieldInfo) -> str:
    if field.default_factory is not None:
        return "(group)"
    value = field.default
    if isinstance(value, SecretStr):
        return "*(empty secret)*" if not value.get_secret_value() else "*(secret)*"
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return "true" if value else "false"
    return f"`{value}`"


def _type(annotation: Any) -> str:
    text = str(annotation) if "|" in str(annotation) else getattr(annotation, "__name__", str(annotation))
    # A "|" would split the Markdown table cell.
    return text.replace("typing.", "").replace("pathlib.", "").replace(" | ", " or ")


def render() -> str:
    lines = [HEADER]
    groups: list[tuple[str, type[BaseModel]]] = []
    top: list[tuple[str, FieldInfo]] = []
    for name, field in Settings.model_fields.items():
        annotation = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            groups.append((name, annotation))
        else:
            top.append((name, field))
    lines.append("## General\n")
    lines.append("| variable | type | default | meaning |\n|---|---|---|---|")
    for name, field in top:
        var = f"{ENV_PREFIX}{name.upper()}"
        lines.append(f"| `{var}` | {_type(field.annotation)} | {_default(field)} | {field.description} |")
    for group, model in groups:
        title = (model.__doc__ or group).strip().splitlines()[0]
        lines.append(f"\n## `{group}` — {title}\n")
        lines.append("| variable | type | default | meaning |\n|---|---|---|---|")
        for name, field in model.model_fields.items():
            var = f"{ENV_PREFIX}{group.upper()}{ENV_DELIMITER}{name.upper()}"
            lines.append(f"| `{var}` | {_type(field.annotation)} | {_default(field)} | {field.description} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    text = render()
    if "--check" in argv:
        current = DOC_PATH.read_text(encoding="utf-8") if DOC_PATH.exists() else ""
        if current != text:
            print(f"{DOC_PATH} is stale: run `python -m worker.settings_doc`", file=sys.stderr)
            return 1
        return 0
    DOC_PATH.write_text(text, encoding="utf-8")
    print(f"wrote {DOC_PATH}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
