"""The retrieval ranking: similarity first, utility and recency only within a band.

    score = base + band * m
    base  = 1 + band           for an exact match of the query state
            relevance          otherwise
    relevance = (1 - lexical_weight) * similarity + lexical_weight * lexical_similarity
    m     = clamp((u + r) / 2, -1/2, +1/2)
    u     = utility_weight * 2 * (mean - baseline)        (the utility term)
    r     = recency_factor - 1 = -recency_weight * (1 - 0.5 ** (age / half_life))

- similarity: cosine of the state match; when the query and the item both carry an
  internal state, the joint `(1 - w) * state + w * internal` (w = ranking.internal_weight).
- lexical_similarity: a √idf-weighted cosine of the query's and the item's
  state-text features: the words (numbers and short words count) and the ordered
  pairs of words one or two apart, so word order counts ("the key is 14 steps left
  ... 17 steps left" is not "the key is 17 steps left ... 14 steps left"); document
  frequencies over the candidates (`lexical_similarities`); without a lexical
  text, relevance is the similarity.
- exact match: the item's state text is the query's state text (the same text
  hash), and, when the query gives an internal state, its internal state too.
- `mean` is the posterior success rate of the item when served (Beta prior of
  strength 2 centred on the namespace baseline), `baseline` the namespace's success
  rate over all reported retrievals: never credited, u = 0.
- `band` = ranking.similarity_band.

What this guarantees, whatever the utility (docs/retrieval.md argues it):
1. an exact match outranks every non-exact item (its score is at least
   1 + band/2, a non-exact item's at most relevance + band/2 <= 1 + band/2, and ties
   go to the exact one);
2. of two items whose relevances differ by more than `band`, the more relevant one
   ranks higher (|band * m| <= band/2 on each side);
3. within the band, utility and recency reorder: items that keep failing sink,
   items that lift success above the baseline rise; few observations move little.
Ties break exact first, then newest, then by pk, so equal inputs give equal outputs.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from datetime import datetime

import numpy as np

from domain.settings import RankingSettings
from store.lexical import feature_keys, text_keys
from store.lexical import tokens as lexical_tokens

PRIOR_STRENGTH = 2.0


@dataclass(frozen=True)
class Utility:
    mean: float
    std: float
    uses: int
    successes: int
    failures: int
    baseline: float


@functools.lru_cache(maxsize=16_384, typed=True)
def utility(successes: int, failures: int, uses: int, baseline: float) -> Utility:
    """Cached: most candidates have the same few counts (a batch of 1,280 states
    scores the same items over and over), and a Utility is immutable; typed, so an
    int count is never answered with a float one."""
    a = PRIOR_STRENGTH * baseline + successes
    b = PRIOR_STRENGTH * (1.0 - baseline) + failures
    mean = a / (a + b)
    std = math.sqrt(a * b / ((a + b) ** 2 * (a + b + 1)))
    return Utility(mean, std, uses, successes, failures, baseline)


def baseline_rate(successes: int, total: int) -> float:
    """Laplace-smoothed namespace success rate (0.5 with no data)."""
    return (successes + 1.0) / (total + 2.0)


def joint_similarity(state: float, internal: float | None, weight: float) -> float:
    if internal is None:
        return state
    return (1.0 - weight) * state + weight * internal


def lexical_similarities(query_features: frozenset[str], texts: list[str | None]) -> list[float | None]:
    """`lexical_similarities_of_keys` of the texts' feature keys (`store.lexical.text_keys`)."""
    return lexical_similarities_of_keys(query_features, [None if t is None else text_keys(t) for t in texts])


def lexical_similarities_of_keys(
    query_features: frozenset[str], docs: list[np.ndarray | None], vocabulary: np.ndarray | None = None
) -> list[float | None]:
    """Per candidate text, given as its sorted feature keys (`store.lexical.text_keys`,
    stored with the text), the cosine of its feature set with the query's under
    √idf weights, the inverse document frequencies taken over the candidates:

        idf(f) = ln((1 + n) / (1 + df(f))) + 1          over the n candidate texts
        sim    = Σ_{f ∈ Q∩I} idf(f) / √(Σ_{f ∈ Q} idf(f) · Σ_{f ∈ I} idf(f))

    Features every neighbour shares ("you are in the") weigh little; the ones that
    tell near neighbours apart weigh more. √idf, not the usual idf: with full idf
    weights a text that shares one rare number with the query beat one that
    differed from it in a single slot, since the rare feature outweighed several
    common ones (bench/retrieval/quality.py, docs/retrieval.md). The idf weights are
    rounded to a grid (`_on_grid`) so that equal features tie exactly. None for a
    candidate without a lexical text, or when the query has no words.

    `vocabulary`: the sorted keys of every text of a batch (`feature_ranks`); each
    doc is then given as its keys' positions in it (uint16), counted by position
    (`_position_weights`) instead of sorted: the same weights, so every similarity is
    the same."""
    out: list[float | None] = [None] * len(docs)
    present = [i for i, d in enumerate(docs) if d is not None]
    if not query_features or not present:
        return out
    # Each text is its sorted array of feature keys, so this runs as a few numpy
    # passes over all candidates' features at once instead of Python loops.
    arrays: list[np.ndarray] = [docs[i] for i in present]  # type: ignore[misc]
    lengths = np.array([len(a) for a in arrays], dtype=np.intp)
    sims = _similarities(query_features, np.concatenate(arrays), lengths, vocabulary)
    if len(present) == len(docs):  # (every candidate has a lexical text, as most do)
        return sims.tolist()  # type: ignore[no-any-return]
    for i, sim in zip(present, sims.tolist(), strict=True):
        out[i] = sim
    return out


def lexical_similarities_of_runs(
    query_features: frozenset[str], flat: np.ndarray, lengths: np.ndarray, vocabulary: np.ndarray
) -> np.ndarray | None:
    """`lexical_similarities_of_keys` of texts that all have a lexical text, given as
    their runs of positions in `vocabulary` end to end (`flat`, each `lengths` long);
    None when the query has no words."""
    if not query_features or not len(lengths):
        return None
    return _similarities(query_features, flat, lengths, vocabulary)


def _similarities(
    query_features: frozenset[str], flat: np.ndarray, lengths: np.ndarray, vocabulary: np.ndarray | None
) -> np.ndarray:
    """The similarities of `lexical_similarities_of_keys` for n >= 1 texts given end to
    end: keys, or positions in `vocabulary`."""
    if not len(flat):  # no candidate text has a word: nothing in common with any
        return np.zeros(len(lengths))
    query = feature_keys(query_features)
    if vocabulary is None:
        weights, q_weights, in_query_flat = _key_weights(flat, query, len(lengths))
    else:
        weights, q_weights, in_query_flat = _position_weights(flat, query, len(lengths), vocabulary)
    q_norm = math.sqrt(float(q_weights.sum()))
    # The weights lie on a grid of 2^-36, so these sums are exact (up to ~8,000
    # features a text) and do not depend on the order they are added in: two texts
    # with equal weights tie exactly, whatever their feature keys; and each text's sum
    # is added in its keys' order anyway, not a set's (per-process string hashing), so
    # replicas and restarts agree to the last bit even past that
    norms = _text_sums(weights, lengths)
    shared = _text_sums(np.where(in_query_flat, weights, 0.0), lengths)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(norms > 0, shared / (q_norm * np.sqrt(norms)), 0.0)  # type: ignore[no-any-return]


def _text_sums(values: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Per text, the sum of its run of `values` (the texts' runs end to end, `lengths`
    long; 0 for an empty one): `np.add.reduceat`, ~10x faster here than `bincount` by
    owner. A trailing 0 keeps an empty text's start inside the array."""
    starts = np.zeros(len(lengths), dtype=np.intp)
    np.cumsum(lengths[:-1], out=starts[1:])
    sums = np.add.reduceat(np.append(values, 0.0), starts)
    sums[lengths == 0] = 0.0  # (reduceat gives the value at the start of an empty run)
    return sums


def _idf(df: np.ndarray, n: int) -> np.ndarray:
    """√idf's squared weight, idf(f) = ln((1 + n) / (1 + df(f))) + 1, on the grid."""
    return _on_grid(math.log(1 + n) - np.log1p(df) + 1.0)


def _key_weights(flat: np.ndarray, query: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per feature of `flat` (the n texts' sorted keys end to end) its idf, per query
    feature its idf (that of a feature no text has where none does), and per feature
    of `flat` whether the query has it: the distinct keys found by sorting."""
    keys, where, df = _distinct(flat)
    idf = _idf(df, n)
    at = np.minimum(np.searchsorted(keys, query), len(keys) - 1)
    seen = keys[at] == query
    in_query = np.zeros(len(keys), dtype=bool)
    in_query[at[seen]] = True
    return idf[where], np.where(seen, idf[at], _idf(np.zeros(1, dtype=np.intp), n)[0]), in_query[where]


def _position_weights(
    flat: np.ndarray, query: np.ndarray, n: int, vocabulary: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`_key_weights` for texts given as positions in `vocabulary`: the document
    frequencies counted by position (`bincount`, no sort), the idf of each count made
    once (a text's keys are distinct, so a count is at most n)."""
    df = np.bincount(flat)
    by_count = _idf(np.arange(max(n, int(df.max())) + 1), n)  # (the max: were a text's keys not distinct)
    at = np.minimum(np.searchsorted(vocabulary, query), len(vocabulary) - 1)
    at = at[(vocabulary[at] == query) & (at < len(df))]  # the query's features some text has
    q_df = np.zeros(len(query), dtype=np.intp)
    q_df[: len(at)] = df[at]  # (a sum: the order of the query's weights does not matter)
    in_query = np.zeros(len(df), dtype=bool)
    in_query[at] = True
    return by_count[df[flat]], by_count[q_df], in_query[flat]


_WEIGHT_GRID = 2.0**-36


def _on_grid(weights: np.ndarray) -> np.ndarray:
    """The weights rounded to multiples of 2^-36 (a relative change below 1e-11 for
    weights >= 1): a weight under 16 then takes at most 40 of a double's 53 bits, and a
    sum of up to 2^13 of them is exact in any order."""
    return np.round(weights / _WEIGHT_GRID) * _WEIGHT_GRID


MAX_RANKED_FEATURES = 1 << 16  # a batch vocabulary's positions fit uint16 (what numpy radix-sorts)


def feature_ranks(docs: list[np.ndarray]) -> tuple[np.ndarray, list[np.ndarray]] | None:
    """The sorted distinct keys of the docs' feature keys and each doc's keys as
    positions in them (uint16, in the same order), for `lexical_similarities_of_runs`
    (a batch's table, service/retrieval/batch_rows.py) or `lexical_similarities_of_keys`
    with the vocabulary; None past MAX_RANKED_FEATURES distinct keys."""
    vocabulary = np.unique(np.concatenate(docs)) if docs else np.empty(0, dtype=np.uint64)
    if len(vocabulary) > MAX_RANKED_FEATURES:
        return None
    return vocabulary, [np.searchsorted(vocabulary, d).astype(np.uint16) for d in docs]


def _distinct(flat: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """np.unique(flat, return_inverse=True, return_counts=True), ~2.5x faster here: the
    input is the candidates' sorted arrays end to end, sorted runs that a stable sort
    (timsort) merges almost for free."""
    order = np.argsort(flat, kind="stable")
    ordered = flat[order]
    first = np.empty(len(ordered), dtype=bool)
    first[:1] = True
    np.not_equal(ordered[1:], ordered[:-1], out=first[1:])
    where = np.empty(len(ordered), dtype=np.intp)
    where[order] = np.cumsum(first) - 1
    starts = np.flatnonzero(first)
    return ordered[starts], where, np.diff(starts, append=len(ordered))


@functools.lru_cache(maxsize=65_536)
def lexical_features(text: str) -> frozenset[str]:
    """A text's lexical features: its word tokens, and each pair of tokens one or two
    positions apart, in order, as "a b" (a space no token holds): "the key is 3
    steps" has "key is", "is 3" and "key 3", so "a key 3 paces away" still shares
    "key 3" with it. Cached, since the same items come back for every nearby state (a
    batch of 1,280 states scored ~100k candidates, most of them repeats)."""
    words = lexical_tokens(text)
    pairs = {f"{a} {b}" for gap in (1, 2) for a, b in zip(words, words[gap:], strict=False)}
    return frozenset(words).union(pairs)


def relevance(dense: float, lexical: float | None, weight: float) -> float:
    """(1 - w) * dense + w * lexical; the dense similarity alone without a lexical one."""
    if lexical is None:
        return dense
    return (1.0 - weight) * dense + weight * lexical


def recency_factor(updated_at: datetime, now: datetime, settings: RankingSettings) -> float:
    age_days = max(0.0, (now - updated_at).total_seconds() / 86_400)
    decay = 0.5 ** (age_days / settings.recency_half_life_days)
    return (1.0 - settings.recency_weight) + settings.recency_weight * decay


def modifier(u: Utility, recency: float, settings: RankingSettings) -> float:
    """Utility and recency as one adjustment in [-1/2, 1/2] (of the band)."""
    utility_term = settings.utility_weight * 2.0 * (u.mean - u.baseline)
    return min(0.5, max(-0.5, (utility_term + recency - 1.0) / 2.0))


def score(similarity: float, exact: bool, u: Utility, recency: float, settings: RankingSettings) -> float:
    band = settings.similarity_band
    base = 1.0 + band if exact else similarity
    return base + band * modifier(u, recency, settings)


def rank_key(score_: float, exact: bool, updated_at: datetime, pk: int) -> tuple[float, bool, float, int]:
    """Sort ascending by this: best first, exact first on ties, then newest, then pk."""
    return (-score_, not exact, -updated_at.timestamp(), -pk)


@dataclass(frozen=True)
class Scores:
    """`scores`' answer: per candidate, its similarity, whether it matched exactly and
    its score; and the candidates' positions in rank order."""

    similarity: np.ndarray
    exact: np.ndarray
    score: np.ndarray
    order: np.ndarray


def scores(
    state: np.ndarray,
    internal: np.ndarray,
    lexical: np.ndarray,
    exact: np.ndarray,
    successes: np.ndarray,
    failures: np.ndarray,
    recency: np.ndarray,
    timestamps: np.ndarray,
    pks: np.ndarray,
    baseline: float,
    settings: RankingSettings,
    lexical_weight: float,
) -> Scores:
    """`joint_similarity`, `relevance`, `utility`'s mean, `score` and the `rank_key`
    order over all of a request's candidates at once (NaN for a missing internal or
    lexical similarity). The same operations in the same order as the functions
    above, so each value equals theirs to the last bit (tests/service/retrieval/test_ranking.py);
    a retrieve ranks ~100 candidates and a teacher-context batch ~100k, and the
    per-candidate Python calls were a tenth of the request."""
    w = settings.internal_weight
    similarity = np.where(np.isnan(internal), state, (1.0 - w) * state + w * internal)
    relevance_ = np.where(np.isnan(lexical), similarity, (1.0 - lexical_weight) * similarity + lexical_weight * lexical)
    a = PRIOR_STRENGTH * baseline + successes
    b = PRIOR_STRENGTH * (1.0 - baseline) + failures
    mean = a / (a + b)
    utility_term = settings.utility_weight * 2.0 * (mean - baseline)
    m = np.minimum(0.5, np.maximum(-0.5, (utility_term + recency - 1.0) / 2.0))
    band = settings.similarity_band
    score_ = np.where(exact, 1.0 + band, relevance_) + band * m
    # rank_key ascending: np.lexsort sorts by its last key first
    order = np.lexsort((-pks, -timestamps, ~exact, -score_))
    return Scores(similarity, exact, score_, order)


def mmr_order(scores: list[float], vectors: np.ndarray, k: int, lam: float) -> list[int]:
    """Maximal marginal relevance: greedily pick the item maximising
    lam * score - (1 - lam) * (max cosine to what is already picked)."""
    chosen: list[int] = []
    remaining = list(range(len(scores)))
    sims = vectors @ vectors.T if len(vectors) else np.zeros((0, 0))
    while remaining and len(chosen) < k:

        def value(i: int) -> float:
            redundancy = max((float(sims[i, j]) for j in chosen), default=0.0)
            return lam * scores[i] - (1.0 - lam) * redundancy

        best = max(remaining, key=lambda i: (value(i), -i))
        chosen.append(best)
        remaining.remove(best)
    return chosen
