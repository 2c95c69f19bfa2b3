"""A snapshot's in-memory indexes: exact search ordered by (score desc, pk asc)
whatever the ties, independent of the other queries in a call; BM25 lexical
matches checked against values computed by hand."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from store.lexical import MAX_QUERY_TOKENS, MAX_TOKEN_CHARS, tokens
from store.vectors.pinned import PinnedCache, PinnedIndex, PinnedLexicon, PinnedMemory


@settings(max_examples=60, deadline=None)
@given(
    st.integers(1, 60),
    st.integers(1, 70),
    st.integers(0, 2**32 - 1),
)
def test_search_is_the_exact_order_with_ties_broken_by_pk(n: int, k: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    # few distinct rows, so ties are everywhere
    base = rng.integers(-2, 3, size=(4, 3)).astype(np.float32)
    matrix = base[rng.integers(0, 4, size=n)]
    pks = sorted(rng.choice(10_000, size=n, replace=False).tolist())
    index = PinnedIndex(pks, matrix)
    queries = rng.integers(-2, 3, size=(3, 3)).astype(np.float32)
    scores, ids = index.search(queries, k)
    for qi, q in enumerate(queries):
        full = matrix @ q
        want = sorted(range(n), key=lambda i: (-full[i], pks[i]))[: min(k, n)]
        assert ids[qi, : len(want)].tolist() == [pks[i] for i in want]
        assert (ids[qi, len(want) :] == -1).all()
        alone = index.search(q[None, :], k)[1][0]
        assert alone.tolist() == ids[qi].tolist()  # the other queries change nothing


def test_bm25_matches_by_hand() -> None:
    docs = [(1, "exemplar", "red door 2 steps left"), (2, "exemplar", "red key"), (3, "skill", "red door")]
    lex = PinnedLexicon(docs)
    got = lex.matches(["exemplar"], "door 2", 10)
    # two exemplar docs (idf among the kinds asked), mean length over all texts
    # (5 + 2 + 2) / 3 = 3; doc 1 holds "door" and "2" once each
    k1, b, n = 1.2, 0.75, 2
    idf = math.log(1 + (n - 1 + 0.5) / (1 + 0.5))
    norm = k1 * (1 - b + b * 5 / 3)
    one = idf * (k1 + 1) / (1 + norm)
    assert [pk for pk, _ in got] == [1]
    assert math.isclose(got[0][1], 2 * one, rel_tol=1e-12)
    # kinds are searched among themselves; ties go to the smaller pk
    both = lex.matches(["exemplar", "skill"], "red", 10)
    assert [pk for pk, _ in both] == [2, 3, 1]  # shorter texts score higher, then pk
    assert lex.matches(["skill"], "nothing here", 10) == []


def _matches_word_by_word(lex: PinnedLexicon, kinds: list[str], query: str, limit: int) -> list[tuple[int, float]]:
    """BM25 added up one query word at a time over arrays of every text (the plain form
    of `PinnedLexicon.matches`, which adds each text's terms in one pass)."""
    words = list(dict.fromkeys(t for t in tokens(query) if len(t) <= MAX_TOKEN_CHARS))[:MAX_QUERY_TOKENS]
    n = sum(lex.docs_per_kind.get(k, 0) for k in kinds)
    scores = np.zeros(len(lex.pks))
    hit = np.zeros(len(lex.pks), dtype=bool)
    for w in words:
        postings = [p for k in kinds if (p := lex.postings.get((k, w))) is not None]
        if postings:
            df = sum(len(at) for at, _ in postings)
            idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
            for at, weights in postings:
                scores[at] += idf * weights
                hit[at] = True
    found = np.flatnonzero(hit)
    order = found[np.lexsort((lex.pks[found], -scores[found]))][:limit]
    return [(int(lex.pks[i]), float(scores[i])) for i in order]


WORDS = st.sampled_from(["red", "door", "key", "2", "3", "north", "the", "a", "you", "box"])
KINDS = ["exemplar", "skill", "heuristic"]


@settings(max_examples=150, deadline=None)
@given(
    texts=st.lists(st.tuples(st.sampled_from(KINDS), st.lists(WORDS, max_size=12)), max_size=40),
    asks=st.lists(
        st.tuples(st.lists(st.sampled_from(KINDS), min_size=1, max_size=3, unique=True), st.lists(WORDS, max_size=8)),
        min_size=1,
        max_size=6,
    ),
    limit=st.integers(1, 50),
)
def test_matches_are_the_word_by_word_sums_to_the_bit(
    texts: list[tuple[str, list[str]]], asks: list[tuple[list[str], list[str]]], limit: int
) -> None:
    lex = PinnedLexicon([(10 * i + 7, kind, " ".join(words)) for i, (kind, words) in enumerate(texts)])
    for _ in range(2):  # the terms made by the first round serve the second
        for kinds, words in asks:
            query = " ".join(words)
            got = lex.matches(kinds, query, limit)
            want = _matches_word_by_word(lex, kinds, query, limit)
            assert got == want  # floats compared exactly
            assert all(type(pk) is int and type(score) is float for pk, score in got)


def test_cache_keeps_the_newest_within_its_vector_budget() -> None:
    def memory(n: int) -> PinnedMemory:
        return PinnedMemory(
            {("exemplar", "state"): PinnedIndex(list(range(n)), np.zeros((n, 2), np.float32))}, PinnedLexicon([])
        )

    cache = PinnedCache(max_vectors=10)
    loads: list[int] = []
    for pk, n in ((1, 6), (2, 6), (1, 6)):
        cache.get(pk, lambda pk=pk, n=n: (loads.append(pk), memory(n))[1])
    assert loads == [1, 2, 1]  # 1 was evicted when 2 came (12 > 10), so it loads again
    cache.get(1, lambda: (loads.append(99), memory(1))[1])
    assert loads == [1, 2, 1]  # a hit
