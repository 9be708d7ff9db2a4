"""Sources shaped like the Urho3D forum's posts, for the generation tests."""

from __future__ import annotations

import pytest

from worker.domain import Source


def make_source(n: int, title: str, excerpt: str, *, context: tuple[str, ...] = ()) -> Source:
    return Source(
        n=n,
        post_id=1000 + n,
        topic_id=200 + n,
        post_number=2,
        slug=f"topic-{n}",
        title=title,
        excerpt=excerpt,
        score=1.0 - n / 10,
        context=context,
    )


@pytest.fixture
def sources() -> list[Source]:
    return [
        make_source(
            1,
            "Shadows look blocky on large terrain",
            "Shadow quality depends on the shadow map size. Call renderer->SetShadowMapSize(2048) to "
            "raise the shadow resolution. Cascaded shadows also help with large terrain.",
        ),
        make_source(
            2,
            "Moving a node smoothly",
            "Use node->Translate() in the update event and multiply by the time step. "
            "SetPosition() jumps straight to the target position.",
        ),
        make_source(
            3,
            "Build fails on Raspberry Pi",
            "Set URHO3D_64BIT to 0 and use the toolchain file for the Pi. The build then works with GCC 8.",
        ),
    ]
