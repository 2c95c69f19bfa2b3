"""The lexical weight a namespace's own near-duplicate states choose.

A sentence embedder hardly tells apart two states that differ in one word or number
(cosines of 0.98-0.99); the lexical match does, and how much it should count
depends on the namespace's texts. So the namespace labels a recall set from its own
stored states, the way bench/retrieval/quality.py labels its sets, and keeps the
weight that ranks it best:

1. States: its exemplars' distinct state texts (at most MAX_STATES exemplars,
   newest first) with their state vectors.
2. Near-duplicates: two stored states of the same length that differ at 1 to
   MAX_DIFF token positions. The words at those positions give the namespace's
   own paradigm (another room, item, colour, number, open / closed).
3. Queries: a state's text with one word changed to a word the paradigm pairs with
   it (the rest of the text, punctuation and case kept), giving a text that is not
   stored; states that have a near-duplicate come first (the hard case: a look-alike
   is stored). Labelling rule: the right answer is the stored state it came from,
   which must be the only stored state one position away; a change that puts another
   stored state one position away too is ambiguous, dropped, and the state's next
   change is tried.
4. Ranking: each query's candidates are its TOP_DENSE stored states by dense cosine
   and its source (the lexical index finds a text sharing all but one word); each
   is scored `(1 - w) * cosine + w * lexical_similarity` (service/retrieval/ranking.py,
   document frequencies over the candidates) for w in WEIGHTS.
5. Choice: the weight with the most queries whose source ranks strictly first
   (recall@1); ties go to the weight nearest UNCALIBRATED_LEXICAL_WEIGHT, then the
   lower. With fewer than MIN_QUERIES queries nothing is chosen.

An exact match is never at stake: it outranks every other item whatever the weight
(docs/retrieval.md, "Why this rule").
"""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from domain.settings import UNCALIBRATED_LEXICAL_WEIGHT
from service.retrieval import ranking
from store.lexical import replace_token, tokens

WEIGHTS = tuple(round(0.1 * i, 1) for i in range(11))
MAX_STATES = 5_000
MAX_QUERIES = 200
MIN_QUERIES = 20
TOP_DENSE = 50
MAX_DIFF = 3  # near-duplicates: the same length, at most this many token positions apart
PAIR_GROUP = 1_000  # states of one length compared pairwise


@dataclass
class Calibration:
    """What one calibration saw and chose (stored as the namespace's report)."""

    weight: float | None  # None: too few queries to choose
    states: int
    near_duplicates: int  # stored pairs of one length, 1 to MAX_DIFF token positions apart
    queries: int
    ambiguous: int  # changes dropped: another stored state one position away too
    recall: dict[str, float] = field(default_factory=dict)  # weight -> recall@1

    def as_report(self) -> dict[str, object]:
        return {
            "weight": self.weight,
            "states": self.states,
            "near_duplicates": self.near_duplicates,
            "queries": self.queries,
            "ambiguous": self.ambiguous,
            "recall_at_1": self.recall,
            "min_queries": MIN_QUERIES,
        }


@dataclass(frozen=True)
class _Query:
    text: str
    source: int  # index of the stored state that is its right answer


def _masked(words: Sequence[str], position: int) -> tuple[int, int, tuple[str, ...]]:
    return (len(words), position, tuple(words[:position]) + tuple(words[position + 1 :]))


def near_pairs(words: Sequence[Sequence[str]]) -> list[tuple[int, int, list[int]]]:
    """(a, b, positions) for the token lists of the same length differing at
    1..MAX_DIFF positions (the first PAIR_GROUP of each length compared)."""
    vocab: dict[str, int] = {}
    by_length: dict[int, list[int]] = defaultdict(list)
    for i, w in enumerate(words):
        if w:
            by_length[len(w)].append(i)
    out = []
    for members in by_length.values():
        members = members[:PAIR_GROUP]
        ids = np.array([[vocab.setdefault(t, len(vocab)) for t in words[i]] for i in members], dtype=np.int64)
        for a in range(len(members) - 1):
            diff = ids[a + 1 :] != ids[a]
            counts = diff.sum(axis=1)
            for off in np.nonzero((counts >= 1) & (counts <= MAX_DIFF))[0]:
                out.append((members[a], members[a + 1 + off], np.nonzero(diff[off])[0].tolist()))
    return out


def build_queries(texts: Sequence[str], seed: int = 0) -> tuple[list[_Query], int, int]:
    """(queries, near-duplicate pairs, ambiguous queries dropped) from distinct stored texts."""
    words = [tokens(t) for t in texts]
    pairs = near_pairs(words)
    paradigm: dict[str, set[str]] = defaultdict(set)
    for a, b, positions in pairs:
        for p in positions:
            paradigm[words[a][p]].add(words[b][p])
            paradigm[words[b][p]].add(words[a][p])
    one_away: dict[tuple[int, int, tuple[str, ...]], list[int]] = defaultdict(list)
    for i, w in enumerate(words):
        for p in range(len(w)):
            one_away[_masked(w, p)].append(i)
    stored = set(map(tuple, words))
    rng = random.Random(seed)
    # the states with a near-duplicate stored first (the hard case), then the others
    twins = sorted({i for a, b, _ in pairs for i in (a, b)})
    rng.shuffle(twins)
    others = sorted(set(range(len(words))) - set(twins))
    rng.shuffle(others)
    out: list[_Query] = []
    ambiguous = 0
    for i in [*twins, *others]:
        if len(out) >= MAX_QUERIES:
            break
        w = words[i]
        options = [(p, b) for p in range(len(w)) for b in sorted(paradigm.get(w[p], ()))]
        rng.shuffle(options)
        for p, b in options:  # the first change that gives an unstored, unambiguous query
            query = [*w[:p], b, *w[p + 1 :]]
            if tuple(query) in stored:
                continue
            if {j for q in range(len(query)) for j in one_away.get(_masked(query, q), ())} != {i}:
                ambiguous += 1
                continue
            out.append(_Query(replace_token(texts[i], p, b), i))
            break
    return out, len(pairs), ambiguous


def calibrate(
    texts: Sequence[str], vectors: np.ndarray, embed: Callable[[list[str]], np.ndarray], seed: int = 0
) -> Calibration:
    """Choose the lexical weight for these stored state texts and their (unit) state
    vectors; `embed` encodes query texts as the retrieval path does."""
    first = {t: i for i, t in reversed(list(enumerate(texts)))}  # one state per text (one exemplar per action)
    keep = sorted(first.values())
    texts, vectors = [texts[i] for i in keep], vectors[keep]
    queries, pairs, ambiguous = build_queries(texts, seed)
    result = Calibration(None, len(texts), pairs, len(queries), ambiguous)
    if len(queries) < MIN_QUERIES:
        return result
    qvecs = embed([q.text for q in queries])
    dense = qvecs @ vectors.T
    hits = dict.fromkeys(WEIGHTS, 0)
    for n, q in enumerate(queries):
        top = np.argsort(-dense[n], kind="stable")[:TOP_DENSE]
        candidates = list(dict.fromkeys([q.source, *(int(j) for j in top)]))
        lexical = ranking.lexical_similarities(ranking.lexical_features(q.text), [texts[j] for j in candidates])
        for w in WEIGHTS:
            scores = [ranking.relevance(float(dense[n, j]), lex, w) for j, lex in zip(candidates, lexical, strict=True)]
            if all(scores[0] > s for s in scores[1:]):
                hits[w] += 1
    result.recall = {f"{w:g}": round(h / len(queries), 4) for w, h in hits.items()}
    result.weight = choose_weight(hits)
    return result


def choose_weight(hits: dict[float, int]) -> float:
    """The weight with the most hits; of equals, the one nearest the uncalibrated
    default, then the lower."""
    best = max(hits.values())
    return min(
        (w for w, h in hits.items() if h == best), key=lambda w: (round(abs(w - UNCALIBRATED_LEXICAL_WEIGHT), 9), w)
    )
