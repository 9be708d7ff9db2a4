"""The retrieval configurations the eval compares: each one is a ``Route`` for ``Retriever.retrieve``.

``shipped`` is the default ``Route()``: exactly what the worker runs with its flags on (the ranker
``auto``: the second stage when weights are fitted for the recall model, joined by a cross-encoder when
one is configured; docs/retrieval.md). The others pin a channel or a ranker to measure it apart.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from worker.retrieval.route import SHIPPED, Route


@dataclass(frozen=True, slots=True)
class Config:
    name: str
    route: Route = field(default_factory=Route)
    description: str = ""

    @property
    def use_posts(self) -> bool:
        return self.route.posts

    @property
    def use_vector(self) -> bool:
        return self.route.vector

    @property
    def use_excerpt(self) -> bool:
        return self.route.excerpt and self.use_stage

    @property
    def use_stage(self) -> bool:
        """Whether the second stage may rank (``auto`` runs it when weights are fitted)."""
        return self.route.posts and self.route.ranker in ("auto", "stage", "stage+rerank")

    @property
    def use_rerank(self) -> bool:
        """Whether the reranker ranks without the second stage (``rerank``)."""
        return self.route.posts and self.route.ranker == "rerank"

    @property
    def scores_zones(self) -> bool:
        """Whether this configuration's top score sets a zone (a ranker other than the fused order)."""
        return self.route.posts and self.route.ranker != "fused"


_COSINE = Route(lexical=False, ranker="fused")
CONFIGS: dict[str, Config] = {
    c.name: c
    for c in (
        Config("shipped", SHIPPED, "the worker's defaults: cosine + lexical, the shipped ranker (auto)"),
        Config("legacy", Route(posts=False), "Discourse search alone, topic grain"),
        Config("posts", _COSINE, "pgvector cosine alone"),
        Config(
            "posts+keyword",
            Route(lexical=False, keyword=True, ranker="fused"),
            "cosine and keyword fused by RRF",
        ),
        Config("posts+rerank", Route(lexical=False, ranker="rerank"), "cosine, then the reranker"),
        Config(
            "posts+keyword+rerank",
            Route(lexical=False, keyword=True, ranker="rerank"),
            "the pipeline before issue 35",
        ),
        Config(
            "posts+keyword+rerank+neighbours",
            Route(lexical=False, keyword=True, ranker="rerank", neighbours=1),
            "that pipeline with ±1 neighbour posts as context",
        ),
        Config("posts+neighbours", Route(lexical=False, ranker="fused", neighbours=1), "cosine, ±1"),
        Config("lexical", Route(vector=False, ranker="fused"), "the lexical channel over post_index alone"),
        Config(
            "posts+lexical", Route(ranker="fused"), "cosine and the lexical channel fused by weighted RRF"
        ),
        Config(
            "posts+lexical+stage",
            Route(ranker="stage", excerpt=False),
            "cosine + lexical (weighted RRF), ranked by the second stage; its zones",
        ),
        Config(
            "posts+lexical+stage+excerpt",
            Route(ranker="stage"),
            "the second stage with the second bi-encoder's excerpt cosine as a feature",
        ),
        Config(
            "posts+lexical+keyword+stage",
            Route(keyword=True, ranker="stage", excerpt=False),
            "the second stage with Discourse search as a third channel",
        ),
        Config(
            "posts+lexical+stage+rerank",
            Route(ranker="stage+rerank", excerpt=False),
            "the second stage's shortlist read by the reranker; its logit orders and sets the zone",
        ),
    )
}
DEFAULT = (
    "shipped",
    "legacy",
    "posts",
    "lexical",
    "posts+keyword",
    "posts+lexical",
    "posts+keyword+rerank",
    "posts+lexical+stage",
)
SHIPPED_NAME = "shipped"
FULL = "posts+keyword+rerank"  # the shape before issue 35 (the reranker's calibration)
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
