from __future__ import annotations

from worker.retrieval.keyword import DocFrequencies, TermSelector, candidate_terms, rank_terms, tokenize


def test_english_question_loses_its_stop_words() -> None:
    q = "Hi, how do I make the shadows of a directional light softer in my scene? Thanks!"
    assert candidate_terms(q) == ["shadows", "directional", "light", "softer", "scene"]


def test_french_question_loses_its_stop_words_and_elisions() -> None:
    q = "Bonjour, comment est-ce qu'on peut charger l'animation d'un modèle avec les ombres ?"
    terms = candidate_terms(q)
    assert terms == ["charger", "animation", "modèle", "ombres"]
    assert "qu" not in terms
    assert "l" not in terms


def test_short_words_numbers_and_repeats_are_dropped_and_dotted_names_kept() -> None:
    q = "Node.js UTF-8 on 2 GPUs: gpu GPU gl 1234 v1.9 gpu"
    assert tokenize(q)[:2] == ["node.js", "utf-8"]
    assert candidate_terms(q) == ["node.js", "utf-8", "gpus", "gpu", "v1.9"]
    assert candidate_terms(q, min_length=5) == ["node.js", "utf-8"]


def test_rank_by_rarity_with_unknown_words_last() -> None:
    stats = DocFrequencies(total=1000, counts={"scene": 400, "light": 250, "shadows": 30, "softer": 3})
    terms = ["shadows", "directional", "light", "softer", "scene"]
    assert rank_terms(terms, stats) == ["softer", "shadows", "light", "scene", "directional"]


def test_without_frequencies_longer_words_count_as_rarer() -> None:
    terms = ["shadows", "directional", "light", "softer", "scene"]
    assert rank_terms(terms, None) == ["directional", "shadows", "softer", "light", "scene"]


def test_queries_go_from_longest_to_shortest_dropping_the_most_common_first() -> None:
    stats = DocFrequencies(total=1000, counts={"scene": 400, "light": 250, "shadows": 30, "softer": 3})
    selector = TermSelector(3, stats=lambda: stats)
    q = "How do I make the shadows of a directional light softer in my scene?"
    assert selector.select(q) == ["softer", "shadows", "light"]
    # Words keep the question's order inside each query.
    assert selector.keyword_queries(q) == ["shadows light softer", "shadows softer", "softer"]


def test_french_queries_with_frequencies() -> None:
    stats = DocFrequencies(total=500, counts={"animation": 120, "modèle": 80, "charger": 60, "ombres": 5})
    selector = TermSelector(2, stats=lambda: stats)
    q = "Comment charger l'animation d'un modèle avec des ombres ?"
    assert selector.keyword_queries(q) == ["charger ombres", "ombres"]


def test_a_question_of_stop_words_gives_no_query() -> None:
    assert TermSelector(4).keyword_queries("how do I do it?") == []
    assert TermSelector(4).keyword_queries("comment faire ça ?") == []
