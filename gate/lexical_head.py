"""The gate's lexical head: a linear model over the words of a clause, after the rules.

The rules name fixed phrasings; this head weighs every word and word pair of a clause, so a
request the rules' authors never wrote can still score as harmful from its vocabulary. It reads
the rules' normalised text (``gate.normalize``), so the same tricks are undone first, and it reads
French and English alike (no embedding model: its words are its features).

What it holds (``gate/lexical.json``, written by ``make gate``, ``gate.train.lexical``):

- ``weights``: a logistic regression's weight per feature and ``bias``; the score of a unit of
  text is ``bias + sum of its features' weights`` (a logit), and the head hits at ``threshold`` or
  above;
- ``categories`` and ``category_weights``: a second linear model, fitted on the harmful lines only,
  that names the category of a hit (the canned reply follows it);
- ``veto`` (optional): a logit far below the threshold. A question whose best unit scores under it
  reads as benign as the look-alikes the head was fitted on, and a hit of a rule that has a benign
  reading (not ``strict``) is then dropped (``gate.matcher``, :meth:`LexicalHead.vetoes`); strict
  rules are never vetoed. The best unit is a maximum over the question's clauses, so a benign
  sentence elsewhere cannot lower it: the veto respects the rules' scoping. The veto needs
  evidence: a question of which the head knows no feature (it scores the bias) is never vetoed,
  whatever the veto, since words the head never saw say nothing of a look-alike;
- ``info``: what it was fitted on and how the threshold was calibrated.

Features of a unit (:func:`features`): each word, each word's first five letters, and the pairs of
those beginnings at distance one and two (``make … bomb``), so inflections, one inserted word and
French elisions (``l'heroine`` is ``l`` + ``heroine``) land on the same features. Units: each
sentence, and each pair of consecutive sentences (a request split in two, "Pipe bombs. How do I
make one?"); the score of a question is its highest unit's. Deterministic, pure Python: a few
hundred dictionary look-ups per question.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

FORMAT_VERSION = 1
STEM = 5
"""Letters of a word's beginning that count as its stem (``poisoning`` and ``poison``: ``poiso``)."""
MAX_UNIT_WORDS = 80
"""A unit is cut to its first words: a pasted log never makes a long unit."""

_WORD = re.compile(r"[a-z0-9]+")
_SENTENCE = re.compile(r"[^.!?\n]+")


class LexicalError(ValueError):
    """The weights file is unusable."""


@dataclass(frozen=True, slots=True)
class LexicalDecision:
    """What the lexical head decided: ``score`` is the highest unit's logit, ``category`` the
    category model's choice for that unit (only for a hit: None below the threshold); ``known``
    whether the head knows any feature of the question (else its score is the bias: no evidence)."""

    hit: bool
    category: str | None
    score: float
    threshold: float
    known: bool = True


def features(unit: str) -> list[str]:
    """The features of one unit of *normalised* text (see the module's docstring)."""
    return _features(_words(unit))


def _words(text: str) -> list[str]:
    return [w for w in _WORD.findall(text) if len(w) > 1 or w.isdigit()]


def _features(words: list[str]) -> list[str]:
    words = words[:MAX_UNIT_WORDS]
    stems = [w[:STEM] for w in words]
    found = [f"w:{w}" for w in words]
    found += [f"s:{s}" for w, s in zip(words, stems, strict=True) if len(w) > STEM]
    found += [f"b:{a} {b}" for a, b in itertools.pairwise(stems)]
    found += [f"g:{a} {b}" for a, b in zip(stems, stems[2:], strict=False)]
    return found


def _feature_sets(words: list[str]) -> list[set[Any]]:
    """:func:`_features` as four sets (words, stems, stem pairs at distance one, at distance two)."""
    words = words[:MAX_UNIT_WORDS]
    stems = [w[:STEM] for w in words]
    long_stems = {s for w, s in zip(words, stems, strict=True) if len(w) > STEM}
    return [set(words), long_stems, set(itertools.pairwise(stems)), set(zip(stems, stems[2:], strict=False))]


def units(normalized: str) -> list[str]:
    """The units a question is scored on: each sentence, and each pair of consecutive sentences
    (their words, joined by spaces; sentences without a word are skipped)."""
    return [" ".join(words) for words in _unit_words(normalized)]


def _unit_words(normalized: str) -> list[list[str]]:
    sentences = [w for w in (_words(m.group()) for m in _SENTENCE.finditer(normalized)) if w]
    return sentences + [a + b for a, b in itertools.pairwise(sentences)]


class LexicalHead:
    """A logistic regression over word features, and a category model for its hits."""

    def __init__(
        self,
        *,
        weights: Mapping[str, float],
        bias: float,
        threshold: float,
        categories: Sequence[str],
        category_weights: Mapping[str, Sequence[float]],
        category_bias: Sequence[float],
        info: Mapping[str, Any] | None = None,
        veto: float | None = None,
    ) -> None:
        if not categories:
            raise LexicalError("no categories")
        if len(category_bias) != len(categories):
            raise LexicalError("category_bias does not have one value per category")
        for name, row in category_weights.items():
            if len(row) != len(categories):
                raise LexicalError(f"category_weights[{name!r}] does not have one value per category")
        self.weights = dict(weights)
        self._known = frozenset(self.weights)
        # The same weights keyed by kind for check(): words, stems, and stem pairs as tuples, so that
        # a question's features are sets built by C loops, never strings.
        self._by_kind: dict[str, dict[Any, float]] = {"w": {}, "s": {}, "b": {}, "g": {}}
        for name, value in self.weights.items():
            kind, _, rest = name.partition(":")
            key: Any = tuple(rest.split(" ")) if kind in ("b", "g") else rest
            if kind in self._by_kind:
                self._by_kind[kind][key] = value
        self._kinds = [(self._by_kind[k], frozenset(self._by_kind[k])) for k in ("w", "s", "b", "g")]
        self.bias = float(bias)
        self.threshold = float(threshold)
        self.veto = None if veto is None else float(veto)
        if self.veto is not None and not self.veto < self.threshold:
            raise LexicalError("veto must be below the threshold")
        self.categories = tuple(categories)
        self.category_weights = {name: tuple(float(v) for v in row) for name, row in category_weights.items()}
        self.category_bias = tuple(float(v) for v in category_bias)
        self.info = dict(info or {})

    def score(self, feats: Iterable[str]) -> float:
        """The logit of one unit's features (each distinct feature counts once)."""
        return self.bias + sum(map(self.weights.__getitem__, self._known.intersection(feats)))

    def category(self, feats: Iterable[str]) -> str:
        totals = list(self.category_bias)
        for f in set(feats):
            row = self.category_weights.get(f)
            if row is not None:
                totals = [t + v for t, v in zip(totals, row, strict=True)]
        return self.categories[max(range(len(totals)), key=totals.__getitem__)]

    def check(self, normalized: str) -> LexicalDecision:
        """Judge one question, already normalised (``gate.normalize.normalize``).

        The same scores as :meth:`score` over the :func:`features` of every unit of :func:`units`,
        computed faster: each sentence's known features once, as sets per kind; a pair's score is its
        two sentences' minus the features they share plus the stem pairs across their boundary. The
        category is read only for a hit, from the best unit's features."""
        sentences = [w for w in (_words(m.group()) for m in _SENTENCE.finditer(normalized)) if w]
        if not sentences:
            return LexicalDecision(False, None, self.bias, self.threshold, known=False)
        known: list[list[set[Any]]] = []
        scores: list[float] = []
        any_known = False
        for words in sentences:
            found = [sets & keys for (_, keys), sets in zip(self._kinds, _feature_sets(words), strict=True)]
            known.append(found)
            any_known = any_known or any(found)
            scores.append(self.bias + self._sum(found))
        best = max(range(len(scores)), key=scores.__getitem__)
        best_value, best_words = scores[best], sentences[best]
        (_, _), (_, _), (pairs, _), (skips, _) = self._kinds
        for i in range(len(sentences) - 1):
            a, b = sentences[i], sentences[i + 1]
            if len(a) + len(b) > MAX_UNIT_WORDS:
                value = self.score(_features(a + b))
            else:
                ka, kb = known[i], known[i + 1]
                value = (
                    scores[i]
                    + scores[i + 1]
                    - self.bias
                    - self._sum([x & y for x, y in zip(ka, kb, strict=True)])
                )
                left, right = [w[:STEM] for w in a[-2:]], [w[:STEM] for w in b[:2]]
                across = [(2, (left[-1], right[0]))]
                if len(left) == 2:
                    across.append((3, (left[0], right[0])))
                if len(right) == 2:
                    across.append((3, (left[-1], right[1])))
                for kind, key in set(across):
                    table = pairs if kind == 2 else skips
                    if key in table and key not in ka[kind] and key not in kb[kind]:
                        value += table[key]
            if value > best_value:
                best_value, best_words = value, a + b
        if best_value < self.threshold:
            # a stem pair across two sentences can be known when neither sentence's features are
            return LexicalDecision(
                False, None, best_value, self.threshold, known=any_known or best_value != self.bias
            )
        return LexicalDecision(True, self.category(_features(best_words)), best_value, self.threshold)

    def vetoes(self, decision: LexicalDecision) -> bool:
        """Whether ``decision`` (this head's, on one question) drops a benign-reading rule's hit:
        a veto is set, the head knows some feature of the question, and it scores under the veto."""
        return self.veto is not None and decision.known and decision.score < self.veto

    def _sum(self, found: list[set[Any]]) -> float:
        return sum(
            sum(map(table.__getitem__, part)) for (table, _), part in zip(self._kinds, found, strict=True)
        )

    @classmethod
    def load(cls, path: Path | str | None = None) -> LexicalHead:
        """The head in ``path`` (``None``: the shipped ``gate/lexical.json``); LexicalError if unusable."""
        try:
            if path is None:
                text = resources.files("gate").joinpath("lexical.json").read_text(encoding="utf-8")
            else:
                text = Path(path).read_text(encoding="utf-8")
            data = json.loads(text)
        except (OSError, ValueError) as exc:
            raise LexicalError(f"{path or 'gate/lexical.json'}: {exc}") from exc
        if not isinstance(data, dict) or data.get("version") != FORMAT_VERSION:
            raise LexicalError(f"{path or 'gate/lexical.json'}: not a version {FORMAT_VERSION} lexical head")
        try:
            return cls(
                weights=data["weights"],
                bias=data["bias"],
                threshold=data["threshold"],
                categories=data["categories"],
                category_weights=data["category_weights"],
                category_bias=data["category_bias"],
                info=data.get("info"),
                veto=data.get("veto"),
            )
        except (KeyError, TypeError) as exc:
            raise LexicalError(f"{path or 'gate/lexical.json'}: missing or malformed {exc}") from exc

    def to_json(self) -> dict[str, Any]:
        return {
            "version": FORMAT_VERSION,
            "bias": round(self.bias, 5),
            "threshold": round(self.threshold, 5),
            **({} if self.veto is None else {"veto": round(self.veto, 5)}),
            "categories": list(self.categories),
            "category_bias": [round(v, 4) for v in self.category_bias],
            "info": self.info,
            "weights": {k: round(v, 4) for k, v in sorted(self.weights.items())},
            "category_weights": {
                k: [round(v, 2) for v in row] for k, row in sorted(self.category_weights.items())
            },
        }
