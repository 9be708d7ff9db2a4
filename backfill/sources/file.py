"""Posts from a forum export folder: ``topics/<id>.json`` as Discourse serves ``GET /t/{id}.json``.

Optional beside it: ``raw/<id>.md`` (``GET /raw/{id}``: each post's Markdown, used when a post has no
cooked HTML), ``categories.json`` (``GET /categories.json`` or ``/site.json``: category names and
``read_restricted``) and ``tag_groups.json`` (``GET /tag_groups.json``: the tags an anonymous reader
may not see are left out, ``backfill.tags``). Without categories the text carries no category name
(none is made up), and the export's categories stay as the forum last described them: their posts are
indexed, and cited once a category is known to be public (``backfill.categories``). categories.json is a
partial list: it forgets nothing. An export taken as an anonymous reader holds only public topics: with
``assume_public`` (``citebot backfill --source file --public-export``) every category its topics carry
that categories.json does not describe is recorded as public, on the operator's word.

Posts are walked in ascending id order across topics: a first pass maps post ids to topic files, and
topics are then parsed again on demand through a small cache, so memory holds the id map, not the forum.
"""

from __future__ import annotations

import bisect
import json
import re
from collections import OrderedDict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from backfill.categories import CategoryList
from backfill.sources import SourceBatch, SourcePost
from backfill.sources.discourse_json import source_post, stream_replies
from backfill.tags import hidden_tag_names, parse_tag_groups, public_tags
from worker.domain import ForumCategory
from worker.errors import ConfigError

_RAW_SPLIT = re.compile(r"\n-{10,}\n")
_RAW_HEAD = re.compile(r"^[^\n|]+\|[^\n|]+\|\s*#(\d+)\s*\n")


class FileSource:
    """A folder of ``/t/{id}.json`` files."""

    def __init__(self, path: Path, *, cache_topics: int = 256, assume_public: bool = False) -> None:
        self.path = path.resolve()
        self.topics_dir = self.path / "topics"
        if not self.topics_dir.is_dir():
            raise ConfigError(f"{self.path} has no topics/ folder of /t/{{id}}.json files")
        self._cache: OrderedDict[int, dict[str, Any]] = OrderedDict()
        self._cache_size = cache_topics
        self._ids: list[int] | None = None
        self._topic_of: dict[int, int] = {}
        self._categories = self._load_categories()
        self._hidden_tags = self._load_hidden_tags()
        self.assume_public = assume_public
        self._seen_categories: set[int] = set()

    @property
    def key(self) -> str:
        return f"file:{self.path}"

    def categories(self) -> CategoryList | None:
        """categories.json's entries; with ``assume_public``, also every other category the export's
        topics carry, as public (a first pass reads them all)."""
        listed = dict(self._categories or {})
        if self.assume_public:
            self._post_ids()
            for cid in sorted(self._seen_categories - set(listed)):
                listed[cid] = ForumCategory(cid, None, read_restricted=False)
        if not listed and self._categories is None:
            return None
        return CategoryList(tuple(listed.values()), complete=False)

    def estimate(self, cursor: int | None) -> int | None:
        ids = self._post_ids()
        return len(ids) - (bisect.bisect_right(ids, cursor) if cursor is not None else 0)

    def read(self, cursor: int | None, *, batch_size: int) -> Iterator[SourceBatch]:
        ids = self._post_ids()
        start = bisect.bisect_right(ids, cursor) if cursor is not None else 0
        lo = (cursor + 1) if cursor is not None else 0
        for i in range(start, len(ids), batch_size):
            chunk = ids[i : i + batch_size]
            posts = tuple(self._post(pid) for pid in chunk)
            yield SourceBatch(posts, lo, chunk[-1], chunk[-1])
            lo = chunk[-1] + 1

    # -- internals ---------------------------------------------------------------------------------

    def _post_ids(self) -> list[int]:
        if self._ids is None:
            for file in self.topics_dir.glob("*.json"):
                topic = _read_json(file)
                tid = int(topic["id"])
                if topic.get("category_id") is not None:
                    self._seen_categories.add(int(topic["category_id"]))
                for post in topic.get("post_stream", {}).get("posts", []):
                    self._topic_of[int(post["id"])] = tid
            self._ids = sorted(self._topic_of)
        return self._ids

    def _topic(self, topic_id: int) -> dict[str, Any]:
        topic = self._cache.get(topic_id)
        if topic is not None:
            self._cache.move_to_end(topic_id)
            return topic
        topic = _read_json(self.topics_dir / f"{topic_id}.json")
        topic["_posts"] = {int(p["id"]): p for p in topic.get("post_stream", {}).get("posts", [])}
        topic["_raw"] = self._load_raw(topic_id)
        self._cache[topic_id] = topic
        if len(self._cache) > self._cache_size:
            self._cache.popitem(last=False)
        return topic

    def _post(self, post_id: int) -> SourcePost:
        topic = self._topic(self._topic_of[post_id])
        p = topic["_posts"][post_id]
        category_id = topic.get("category_id")
        category = (self._categories or {}).get(int(category_id)) if category_id is not None else None
        post = source_post(
            p,
            topic,
            category_id=category_id,
            category_name=category.name if category else None,
            restricted=category.read_restricted if category else False,
            raw=topic["_raw"].get(int(p["post_number"])),
            replies=stream_replies(topic, post_id) if int(p["post_number"]) == 1 else None,
        )
        return public_tags(post, self._hidden_tags)

    def _load_raw(self, topic_id: int) -> dict[int, str]:
        file = self.path / "raw" / f"{topic_id}.md"
        if not file.is_file():
            return {}
        return parse_raw(file.read_text("utf-8", errors="replace"))

    def _load_categories(self) -> dict[int, ForumCategory] | None:
        file = self.path / "categories.json"
        if not file.is_file():
            return None
        data = _read_json(file)
        items = data.get("category_list", {}).get("categories") or data.get("categories") or []
        return {int(c["id"]): ForumCategory.from_json(c) for c in items if "id" in c}

    def _load_hidden_tags(self) -> frozenset[str]:
        file = self.path / "tag_groups.json"
        if not file.is_file():
            return frozenset()
        return hidden_tag_names(parse_tag_groups(_read_json(file)))


def parse_raw(text: str) -> dict[int, str]:
    """``/raw/{topic_id}`` text → {post_number: raw Markdown}."""
    out: dict[int, str] = {}
    for section in _RAW_SPLIT.split("\n" + text):
        section = section.lstrip("\n")
        m = _RAW_HEAD.match(section)
        if m:
            out[int(m.group(1))] = section[m.end() :].strip()
    return out


def _read_json(file: Path) -> dict[str, Any]:
    try:
        data = json.loads(file.read_bytes())
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read {file}: {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"{file} is not a JSON object")
    return data
