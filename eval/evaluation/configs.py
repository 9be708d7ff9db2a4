"""The retrieval configurations the eval compares: each one is a set of ``Retriever.retrieve`` switches."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Config:
    name: str
    use_posts: bool = True
    use_keyword: bool = True
    use_rerank: bool = True
    neighbours: int = 0
    description: str = ""
    use_lexical: bool = False
    use_stage: bool = False
    use_vector: bool = True
    use_excerpt: bool = False

    def switches(self) -> dict[str, object]:
        return {
            "use_posts": self.use_posts,
            "use_keyword": self.use_keyword,
            "use_rerank": self.use_rerank,
            "neighbours": self.neighbours,
            "use_lexical": self.use_lexical,
            "use_stage": self.use_stage,
            "use_vector": self.use_vector,
            "use_excerpt": self.use_excerpt,
        }

    @property
    def scores_zones(self) -> bool:
        """Whether this configuration's top score sets a zone (rerank or second stage)."""
        return self.use_posts and (self.use_rerank or self.use_stage)


CONFIGS: dict[str, Config] = {
    c.name: c
    for c in (
        Config(
            "legacy", use_posts=False, use_rerank=False, description="Discourse search alone, topic grain"
        ),
        Config("posts", use_keyword=False, use_rerank=False, description="pgvector cosine alone"),
        Config("posts+keyword", use_rerank=False, description="cosine and keyword fused by RRF"),
        Config("posts+rerank", use_keyword=False, description="cosine, then the reranker"),
        Config("posts+keyword+rerank", description="the full pipeline"),
        Config(
            "posts+keyword+rerank+neighbours",
            neighbours=1,
            description="the full pipeline with ±1 neighbour posts as context",
        ),
        Config(
            "posts+neighbours", use_keyword=False, use_rerank=False, neighbours=1, description="cosine, ±1"
        ),
        Config(
            "lexical",
            use_keyword=False,
            use_rerank=False,
            use_lexical=True,
            use_vector=False,
            description="the lexical channel over post_index alone",
        ),
        Config(
            "posts+lexical",
            use_keyword=False,
            use_rerank=False,
            use_lexical=True,
            description="cosine and the lexical channel fused by weighted RRF",
        ),
        Config(
            "posts+lexical+stage",
            use_keyword=False,
            use_rerank=False,
            use_lexical=True,
            use_stage=True,
            description="cosine + lexical (weighted RRF), ranked by the second stage; its zones",
        ),
        Config(
            "posts+lexical+stage+excerpt",
            use_keyword=False,
            use_rerank=False,
            use_lexical=True,
            use_stage=True,
            use_excerpt=True,
            description="the second stage with the second bi-encoder's excerpt cosine as a feature",
        ),
        Config(
            "posts+lexical+keyword+stage",
            use_rerank=False,
            use_lexical=True,
            use_stage=True,
            description="the second stage with Discourse search as a third channel",
        ),
    )
}
DEFAULT = (
    "legacy",
    "posts",
    "lexical",
    "posts+keyword",
    "posts+lexical",
    "posts+keyword+rerank",
    "posts+lexical+stage",
)
FULL = "posts+keyword+rerank"  # today's shape
STAGE = "posts+lexical+stage"  # the second stage
STAGE_EXCERPT = "posts+lexical+stage+excerpt"  # the second stage with the second bi-encoder
SINGLE_CHANNELS = ("legacy", "posts", "lexical")


class UnknownConfigError(ValueError):
    pass


def parse_configs(names: Sequence[str] | str) -> list[Config]:
    """Configurations by name, in order (comma-separated or a list; ``default``: ``DEFAULT``; ``all``)."""
    items = names.split(",") if isinstance(names, str) else [n for part in names for n in part.split(",")]
    out: list[Config] = []
    for raw in items:
        name = raw.strip()
        if not name:
            continue
        if name == "all":
            chosen: list[Config | None] = list(CONFIGS.values())
        elif name == "default":
            chosen = [CONFIGS[n] for n in DEFAULT]
        else:
            chosen = [CONFIGS.get(name)]
        for c in chosen:
            if c is None:
                raise UnknownConfigError(f"unknown configuration {name!r}; known: {', '.join(CONFIGS)}")
            if c not in out:
                out.append(c)
    if not out:
        raise UnknownConfigError("no configuration given")
    return out
