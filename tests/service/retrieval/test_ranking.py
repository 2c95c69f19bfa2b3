"""The ranking's guarantees, as properties over arbitrary (adversarial) inputs, and
its arithmetic against values worked by hand (service/retrieval/ranking.py)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from domain.settings import RankingSettings
from service.retrieval import ranking
from store import lexical as lexical_index

NOW = datetime(2026, 12, 1, tzinfo=UTC)

candidates = st.lists(
    st.tuples(
        st.floats(-1.0, 1.0),  # cosine similarity
        st.booleans(),  # exact match
        st.integers(0, 10_000),  # successes
        st.integers(0, 10_000),  # failures
        st.floats(0.0, 3650.0),  # age in days
    ),
    min_size=2,
    max_size=30,
)
weights = st.builds(
    RankingSettings,
    utility_weight=st.floats(0.0, 2.0),
    recency_weight=st.floats(0.0, 1.0),
    similarity_band=st.floats(0.0, 1.0),
    recency_half_life_days=st.floats(0.01, 365.0),
)


def order(items: list[tuple[float, bool, int, int, float]], cfg: RankingSettings, baseline: float) -> list[int]:
    keys = []
    for pk, (sim, exact, wins, losses, age) in enumerate(items):
        exact = exact and sim > 0.999  # an exact match has cosine 1 (same text, same vector)
        u = ranking.utility(wins, losses, wins + losses, baseline)
        updated = NOW - timedelta(days=age)
        rec = ranking.recency_factor(updated, NOW, cfg)
        keys.append((ranking.rank_key(ranking.score(sim, exact, u, rec, cfg), exact, updated, pk), pk, exact, sim))
    return [k for k in sorted(keys)]


@settings(max_examples=300, deadline=None)
@given(candidates, weights, st.floats(0.01, 0.99))
def test_an_exact_match_always_outranks_every_other_item(items, cfg, baseline) -> None:  # type: ignore[no-untyped-def]
    ranked = order(items, cfg, baseline)
    flags = [exact for _, _, exact, _ in ranked]
    assert flags == sorted(flags, reverse=True)  # every exact one before every other


@settings(max_examples=300, deadline=None)
@given(candidates, weights, st.floats(0.01, 0.99))
def test_utility_and_recency_never_swap_items_further_apart_than_the_band(items, cfg, baseline) -> None:  # type: ignore[no-untyped-def]
    ranked = [r for r in order(items, cfg, baseline) if not r[2]]
    for i, (_, _, _, sim_i) in enumerate(ranked):
        for _, _, _, sim_j in ranked[i + 1 :]:
            assert sim_j <= sim_i + cfg.similarity_band + 1e-9


def test_the_score_by_hand() -> None:
    cfg = RankingSettings()  # utility_weight 0.5, recency_weight 0.1, half-life 30 d, band 0.05
    # Never credited, changed now: no adjustment; the score is the similarity.
    fresh = ranking.utility(0, 0, 0, 0.5)
    assert ranking.score(0.8, False, fresh, 1.0, cfg) == pytest.approx(0.8)
    # 3 failures at baseline 0.5: mean = (1 + 0) / (2 + 3) = 0.2; u = 0.5 * 2 * (0.2 - 0.5) = -0.3;
    # 30 days old: recency = 0.9 + 0.1 * 0.5 = 0.95, r = -0.05; m = (-0.3 - 0.05) / 2 = -0.175;
    # score = 0.8 + 0.05 * -0.175 = 0.79125
    failing = ranking.utility(0, 3, 3, 0.5)
    assert failing.mean == pytest.approx(0.2)
    rec = ranking.recency_factor(NOW - timedelta(days=30), NOW, cfg)
    assert rec == pytest.approx(0.95)
    assert ranking.score(0.8, False, failing, rec, cfg) == pytest.approx(0.79125)
    # An exact match starts at 1 + band = 1.05 and moves within +-band/2.
    assert ranking.score(1.0, True, failing, rec, cfg) == pytest.approx(1.05 - 0.05 * 0.175)
    # The adjustment is clamped: 1000 successes at the largest weight move by band/2 at most.
    loved = ranking.utility(1000, 0, 1000, 0.1)
    big = RankingSettings(utility_weight=2.0)
    assert ranking.score(0.5, False, loved, 1.0, big) == pytest.approx(0.5 + 0.05 * 0.5)


def test_lexical_similarity_by_hand() -> None:
    import math

    from service.retrieval.ranking import lexical_features, lexical_similarities

    # Features: the words and the pairs one or two apart. n = 2 candidates; df: red 1,
    # door 2, "red door" 1, blue 1, "blue door" 1; idf = ln((1 + n) / (1 + df)) + 1.
    assert lexical_features("Red door") == frozenset({"red", "door", "red door"})
    assert lexical_features("a key 3") == frozenset({"a", "key", "3", "a key", "key 3", "a 3"})
    a = math.log(3 / 2) + 1  # the features in one candidate; "door" has idf 1
    sims = lexical_similarities(lexical_features("red door"), ["Red door", "blue door", None])
    assert sims[0] == pytest.approx(1.0)  # the same features
    # shares "door" only: 1 / sqrt((a + 1 + a) * (a + 1 + a)), the weights √idf squared
    assert sims[1] == pytest.approx(1 / (2 * a + 1))
    assert sims[2] is None
    assert lexical_similarities(frozenset(), ["red door"]) == [None]


def test_lexical_similarity_counts_word_order() -> None:
    """Two numbers swapped are the same words but not the same state."""
    from service.retrieval.ranking import lexical_features, lexical_similarities

    query = "The key is 14 steps left. 17 steps left."
    swapped = "The key is 17 steps left. 14 steps left."
    assert set(query.lower().split()) == set(swapped.lower().split())  # a bag of words calls them equal
    sims = lexical_similarities(lexical_features(query), [swapped, query])
    assert sims[1] == pytest.approx(1.0)
    assert sims[0] is not None and sims[0] < 0.9


words = st.lists(st.sampled_from(["the", "key", "is", "2", "20", "red", "blue", "left", "steps", "a"]), max_size=12)


@given(words, st.lists(words, min_size=1, max_size=6))
@settings(max_examples=200, deadline=None)
def test_lexical_similarity_is_a_bounded_cosine(query: list[str], texts: list[list[str]]) -> None:
    """In [0, 1]; 1 for a text with the query's features; 0 with none in common."""
    feats = ranking.lexical_features(" ".join(query))
    sims = ranking.lexical_similarities(feats, [" ".join(t) for t in texts])
    if not feats:
        assert sims == [None] * len(texts)
        return
    for t, sim in zip(texts, sims, strict=True):
        assert sim is not None and -1e-9 <= sim <= 1 + 1e-9
        other = ranking.lexical_features(" ".join(t))
        if other == feats:
            assert sim == pytest.approx(1.0)
        if not other & feats:
            assert sim == 0.0


vocabulary = ["the", "key", "is", "2", "20", "red", "Red", "left", "Schlüssel", "鍵", "a_b", "x" * 101]
texts = st.lists(st.sampled_from(vocabulary), max_size=16).map(" ".join)


@given(texts)
@settings(max_examples=300, deadline=None)
def test_text_keys_are_the_keys_of_its_features(text: str) -> None:
    """A candidate's keys are computed from its words' keys without building the
    feature strings: they must be exactly the keys of `lexical_features`, one per feature."""

    features = ranking.lexical_features(text)
    keys = lexical_index.text_keys(text)
    assert np.array_equal(keys, lexical_index.feature_keys(features))
    assert len(keys) == len(features)  # distinct features, distinct keys
    assert np.array_equal(lexical_index.keys_from_blob(lexical_index.keys_blob(keys)), keys)  # as stored and read back


def test_pair_keys_are_ordered_and_unlike_word_keys() -> None:
    keys = lexical_index.feature_keys(frozenset({"key 3", "3 key", "key", "3"}))
    assert len(set(keys.tolist())) == 4


def reference_lexical_similarities(query: frozenset[str], texts: list[str | None]) -> list[float | None]:
    """The docstring's formula, one candidate and one feature at a time."""
    import math

    if not query:
        return [None] * len(texts)
    sets = [None if t is None else ranking.lexical_features(t) for t in texts]
    present = [f for f in sets if f is not None]
    n = len(present)

    def idf(feature: str) -> float:
        return math.log((1 + n) / (1 + sum(feature in f for f in present))) + 1

    q_norm = math.fsum(idf(f) for f in query)
    out: list[float | None] = []
    for f in sets:
        if f is None:
            out.append(None)
            continue
        norm = math.fsum(idf(x) for x in f)
        out.append(math.fsum(idf(x) for x in f & query) / math.sqrt(q_norm * norm) if norm else 0.0)
    return out


@given(words, st.lists(st.one_of(st.none(), words.map(" ".join), st.just("")), max_size=25))
@settings(max_examples=300, deadline=None)
def test_lexical_similarities_equal_the_formula_by_feature(query: list[str], texts: list[str | None]) -> None:
    """The vectorised arithmetic (feature keys, one pass over all candidates) against
    the formula written out plainly: the same values to 1e-10 (the weights are rounded
    to multiples of 2^-36, a relative change below 1e-11), None in the same places."""
    feats = ranking.lexical_features(" ".join(query))
    got = ranking.lexical_similarities(feats, texts)
    want = reference_lexical_similarities(feats, texts)
    assert [g is None for g in got] == [w is None for w in want]
    for g, w in zip(got, want, strict=True):
        if w is not None:
            assert g == pytest.approx(w, rel=1e-10, abs=1e-15)


@given(
    words,
    st.lists(st.one_of(st.none(), words.map(" ".join), st.just("")), max_size=25),
    st.lists(words.map(" ".join), max_size=10),
)
@settings(max_examples=300, deadline=None)
def test_a_batch_s_ranked_keys_give_the_same_similarities_to_the_bit(
    query: list[str], texts: list[str | None], others: list[str]
) -> None:
    """A batch scores its rows by their keys' positions in the batch's vocabulary (which
    also holds other requests' rows): every similarity is the one the keys give."""
    feats = ranking.lexical_features(" ".join(query))
    keys = [None if t is None else lexical_index.text_keys(t) for t in texts]
    made = ranking.feature_ranks([k for k in keys if k is not None] + [lexical_index.text_keys(o) for o in others])
    assert made is not None
    vocabulary, ranks = made
    docs = iter(ranks)
    ranked = [None if k is None else next(docs) for k in keys]
    assert all(
        r.dtype == np.uint16 and (vocabulary[r] == k).all() for r, k in zip(ranked, keys, strict=True) if k is not None
    )
    assert ranking.lexical_similarities_of_keys(feats, ranked, vocabulary) == ranking.lexical_similarities_of_keys(
        feats, keys
    )


def test_a_vocabulary_past_uint16_is_not_ranked() -> None:
    spread = np.arange(ranking.MAX_RANKED_FEATURES + 1, dtype=np.uint64)
    assert ranking.feature_ranks([spread[:10], spread]) is None
    assert ranking.feature_ranks([spread[: ranking.MAX_RANKED_FEATURES]]) is not None


@given(words, st.integers(min_value=0, max_value=12), st.integers(min_value=2, max_value=8))
@settings(max_examples=300, deadline=None)
def test_equal_features_tie_exactly(template: list[str], slot: int, n: int) -> None:
    """Candidates that differ from each other only in a word no other text holds have
    equal weights against the query: their similarities are equal to the last bit,
    whatever order their feature keys put the sums in (a tie is left to the ranking's
    tie rules, not to rounding)."""
    slot = min(slot, len(template))
    texts = [" ".join([*template[:slot], f"unique{i}", *template[slot:]]) for i in range(n)]
    sims = ranking.lexical_similarities(ranking.lexical_features(" ".join(template)), texts)
    assert len(set(sims)) == 1


def test_lexical_similarity_is_the_same_bits_under_any_string_hashing() -> None:
    """Replicas and restarts hash strings with other seeds, so sets iterate in other
    orders: the similarities must not change in the last digit (snapshot reads are
    byte-identical across processes)."""
    import os
    import subprocess
    import sys

    code = (
        "from service.retrieval.ranking import lexical_features as f, lexical_similarities as s\n"
        "texts = [f'You are in room {i}. The key is {i % 7} steps left. A red ball. {i * 3} moves'\n"
        "         for i in range(60)]\n"
        "print([s(f(texts[5] + ' extra words here'), texts)])\n"
    )
    outs = {
        subprocess.run(
            [sys.executable, "-c", code],
            env={**os.environ, "PYTHONHASHSEED": seed},
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for seed in ("1", "2", "3", "4")
    }
    assert len(outs) == 1


scored_rows = st.lists(
    st.tuples(
        st.sampled_from([-0.2, 0.1, 0.5, 0.5, 0.9]) | st.floats(-1.0, 1.0),  # state cosine (repeats: ties)
        st.none() | st.floats(-1.0, 1.0),  # internal cosine
        st.none() | st.floats(0.0, 1.0),  # lexical similarity
        st.booleans(),  # exact match
        st.integers(0, 50),  # successes
        st.integers(0, 50),  # failures
        st.sampled_from([0.0, 1.5, 1.5, 40.0]) | st.floats(0.0, 3650.0),  # age in days (repeats: ties)
    ),
    max_size=40,
)


@settings(max_examples=300, deadline=None)
@given(scored_rows, weights, st.floats(0.01, 0.99), st.floats(0.0, 1.0), st.floats(0.0, 1.0))
def test_the_array_scores_equal_the_per_item_functions_to_the_last_bit(rows, cfg, baseline, w, lex_w) -> None:  # type: ignore[no-untyped-def]

    cfg = cfg.model_copy(update={"internal_weight": w})
    expected_scores, sims, keys = [], [], []
    for pk, (state, internal, lexical, exact, wins, losses, age) in enumerate(rows):
        updated = NOW - timedelta(days=age)
        sim = ranking.joint_similarity(state, internal, w)
        u = ranking.utility(wins, losses, wins + losses, baseline)
        rec = ranking.recency_factor(updated, NOW, cfg)
        score = ranking.score(ranking.relevance(sim, lexical, lex_w), exact, u, rec, cfg)
        sims.append(sim)
        expected_scores.append(score)
        keys.append((ranking.rank_key(score, exact, updated, pk), pk))
    updated_at = [NOW - timedelta(days=r[6]) for r in rows]
    got = ranking.scores(
        np.array([r[0] for r in rows], dtype=float),
        np.array([r[1] for r in rows], dtype=float),
        np.array([r[2] for r in rows], dtype=float),
        np.array([r[3] for r in rows], dtype=bool),
        np.array([r[4] for r in rows], dtype=float),
        np.array([r[5] for r in rows], dtype=float),
        np.array([ranking.recency_factor(t, NOW, cfg) for t in updated_at], dtype=float),
        np.array([t.timestamp() for t in updated_at], dtype=float),
        np.arange(len(rows), dtype=np.int64),
        baseline,
        cfg,
        lex_w,
    )
    assert got.similarity.tolist() == sims
    assert got.score.tolist() == expected_scores  # equal, not approximately
    assert got.order.tolist() == [pk for _, pk in sorted(keys)]
