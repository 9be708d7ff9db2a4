"""Server-side sanitizer: the LLM's text → the Markdown citebot posts (docs/sanitizer.md).

Pure code (stdlib + ``bleach``), nothing imported from the rest of citebot::

    from sanitizer import sanitize, from_dicts
    result = sanitize(llm_text, from_dicts(evidence), links="post", base_url=None, allow_canned=False)
    if result.ok:
        post(result.text)

See ``docs/sanitizer.md`` for the contract and why each neutralisation is safe on Discourse.
"""

from __future__ import annotations

from sanitizer.evidence import (
    EvidenceError,
    EvidenceSource,
    LinkGrain,
    SupportsEvidence,
    from_dicts,
    normalize_slug,
)
from sanitizer.sanitize import CANNED_MARKER, SanitizeResult, sanitize

__all__ = [
    "CANNED_MARKER",
    "EvidenceError",
    "EvidenceSource",
    "LinkGrain",
    "SanitizeResult",
    "SupportsEvidence",
    "from_dicts",
    "normalize_slug",
    "sanitize",
]
