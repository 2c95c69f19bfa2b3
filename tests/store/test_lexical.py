"""The lexical index of state text on both engines (SQLite FTS5, PostgreSQL
tsvector + GIN): numbers and short words are tokens, the rarer shared token ranks
higher, namespaces and kinds stay apart, replacing and deleting keep the engine's
index in step (a reflection's delete cascades), each text's feature keys are stored
with it."""

from __future__ import annotations

import numpy as np
from sqlalchemy import delete, text

from migrations import upgrade
from store import lexical
from store.models import LexicalText, Reflection
from tests.factories import add_reflection, make_db

STATES = {
    "a": "You are at the door. 2 steps left.",
    "b": "You are at the door. 20 steps left.",
    "c": "You are at the window. 2 steps left.",
    "d": "A key is on the table.",
}


def test_tokens_keep_numbers_and_short_words() -> None:
    assert lexical.tokens("You have 2 steps left; x=3, go N!") == [
        "you",
        "have",
        "2",
        "steps",
        "left",
        "x",
        "3",
        "go",
        "n",
    ]


def test_search_ranks_shared_rare_tokens_and_keeps_namespaces_apart(database_url: str) -> None:
    db = make_db(database_url, "mem", "other")
    try:
        with db.write() as s:
            pks = {}
            for key, text in STATES.items():
                row = add_reflection(s, "mem", key)
                lexical.update_lexical_text(s, reflection_pk=row.pk, namespace="mem", kind="exemplar", text_=text)
                pks[key] = row.pk
            elsewhere = add_reflection(s, "other", "z")
            lexical.update_lexical_text(
                s, reflection_pk=elsewhere.pk, namespace="other", kind="exemplar", text_=STATES["a"]
            )
            heuristic = add_reflection(s, "mem", "h", kind="heuristic")
            lexical.update_lexical_text(s, reflection_pk=heuristic.pk, namespace="mem", kind="heuristic", text_="20")
        with db.read() as s:
            hits = lexical.list_lexical_matches(s, "mem", ["exemplar"], "at the door, 20 steps left", 10)
            names = {pk: key for key, pk in pks.items()}
            ranked = [names[pk] for pk, _ in hits]
            assert ranked[0] == "b"  # shares the rare "20" and "door"
            assert set(ranked) == {"a", "b", "c"} or set(ranked) == {"a", "b", "c", "d"}
            assert elsewhere.pk not in {pk for pk, _ in hits} and heuristic.pk not in {pk for pk, _ in hits}
            assert [k for k, _ in lexical.list_lexical_matches(s, "mem", ["exemplar"], "key", 5)] == [pks["d"]]
            assert lexical.list_lexical_matches(s, "mem", ["exemplar"], "!!!", 5) == []
            # a 5,000-character "word" is not searched by; the rest of the query still is
            assert [k for k, _ in lexical.list_lexical_matches(s, "mem", ["exemplar"], "key " + "x" * 5000, 5)] == [
                pks["d"]
            ]
        with db.write() as s:  # a replaced text is searched as the new one
            lexical.update_lexical_text(s, reflection_pk=pks["d"], namespace="mem", kind="exemplar", text_="a lamp")
        with db.read() as s:
            assert lexical.list_lexical_matches(s, "mem", ["exemplar"], "key", 5) == []
            assert [k for k, _ in lexical.list_lexical_matches(s, "mem", ["exemplar"], "lamp", 5)] == [pks["d"]]
            # each text's feature keys are stored with it, and replaced with it
            for key, text in (STATES | {"d": "a lamp"}).items():
                keys = lexical.keys_from_blob(s.get(LexicalText, pks[key]).keys)
                assert np.array_equal(keys, lexical.text_keys(text)) and len(keys) > 0
        with db.write() as s:  # deleting the reflection takes its lexical text (and the engine's entry) with it
            s.execute(delete(Reflection).where(Reflection.pk == pks["b"]))
        with db.read() as s:
            assert s.get(LexicalText, pks["b"]) is None
            assert pks["b"] not in {pk for pk, _ in lexical.list_lexical_matches(s, "mem", ["exemplar"], "20", 5)}
    finally:
        db.dispose()


def _fill(db, n: int) -> dict[int, int]:  # type: ignore[no-untyped-def]
    """n states sharing "you are at the door", each with its own number; i -> pk."""
    pks = {}
    with db.write() as s:
        for i in range(n):
            row = add_reflection(s, "mem", f"r{i}")
            text_ = f"You are at the door. {1000 + i} steps left."
            lexical.update_lexical_text(s, reflection_pk=row.pk, namespace="mem", kind="exemplar", text_=text_)
            pks[i] = row.pk
    return pks


def test_term_counts_are_the_documents_holding_each_word(database_url: str) -> None:
    """SQLite counts exactly (fts5vocab); PostgreSQL estimates from ANALYZE's element
    statistics, a word outside its most common elements counting 0 (rare)."""
    from sqlalchemy import text

    db = make_db(database_url, "mem")
    try:
        _fill(db, 120)
        if db.is_postgres:
            with db.write() as s:
                s.execute(text("ANALYZE lexical_texts"))
        with db.read() as s:
            counts = lexical.list_term_counts(s, ["door", "1007", "absent"])
        assert counts["absent"] == 0
        if db.is_postgres:
            assert 100 <= counts["door"] <= 140 and counts["1007"] <= 2
        else:
            assert counts == {"door": 120, "1007": 1, "absent": 0}
    finally:
        db.dispose()


def test_a_query_is_searched_by_its_rare_words_within_the_budget(database_url: str) -> None:
    """With a budget of 50 postings, "you are at the door" (120 documents each) is not
    searched by: the number finds its state; with only common words nothing is
    searched (the dense search finds those candidates)."""
    from sqlalchemy import text

    from service.retrieval.lexical_terms import TermCounts

    db = make_db(database_url, "mem")
    try:
        pks = _fill(db, 120)
        if db.is_postgres:
            with db.write() as s:
                s.execute(text("ANALYZE lexical_texts"))
        terms = TermCounts(budget=50)
        with db.read() as s:
            assert terms.searchable(s, lexical.query_words("You are at the door. 1042 steps left.")) == ["1042"]
            keep = lambda words: terms.searchable(s, words)  # noqa: E731
            hits = lexical.list_lexical_matches(s, "mem", ["exemplar"], "at the door, 1042 steps", 5, keep=keep)
            assert [pk for pk, _ in hits] == [pks[42]]
            assert lexical.list_lexical_matches(s, "mem", ["exemplar"], "you are at the door", 5, keep=keep) == []
            # without the budget every word is searched, and every state matches
            assert len(lexical.list_lexical_matches(s, "mem", ["exemplar"], "you are at the door", 5)) == 5
    finally:
        db.dispose()


def test_term_counts_are_cached_for_their_ttl() -> None:
    from service.retrieval.lexical_terms import TermCounts

    class Session:  # list_term_counts' only use of the session: the engine's answer
        pass

    calls: list[list[str]] = []
    now = [0.0]
    terms = TermCounts(budget=10, ttl=60.0, clock=lambda: now[0])
    original = lexical.list_term_counts

    def counting(session: object, words: list[str]) -> dict[str, int]:
        calls.append(list(words))
        return {w: 5 for w in words}

    lexical.list_term_counts = counting  # type: ignore[assignment]
    try:
        assert terms.searchable(Session(), ["a", "b", "c"]) == ["a", "b"]  # 5 + 5 <= 10 < 15
        assert terms.searchable(Session(), ["a", "d"]) == ["a", "d"]
        assert calls == [["a", "b", "c"], ["d"]]  # "a" came from the cache
        now[0] = 61.0
        terms.counts(Session(), ["a"])
        assert calls[-1] == ["a"]  # expired: read again
    finally:
        lexical.list_term_counts = original  # type: ignore[assignment]


def test_on_sqlite_each_match_is_checked_in_the_index_not_its_row(sqlite_url: str) -> None:
    """A match's namespace and kind come from migration 0020's index: reading each
    match's ~1 KB row instead made the query ~1.5x slower (docs/benchmarks.md)."""
    upgrade(sqlite_url)
    db = make_db(sqlite_url, "mem")
    try:
        query = str(lexical._matches_statement(False, 2))
        with db.read() as s:
            bound = {"q": '"door"', "ns": "mem", "k0": "exemplar", "k1": "heuristic", "n": 5}
            plan = " | ".join(row[-1] for row in s.execute(text(f"EXPLAIN QUERY PLAN {query}"), bound))
        assert "USING COVERING INDEX ix_lexical_texts_match" in plan, plan
    finally:
        db.dispose()
