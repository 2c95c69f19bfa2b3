"""The lexical index of state text on both engines (SQLite FTS5, PostgreSQL
tsvector + GIN): numbers and short words are tokens, the rarer shared token ranks
higher, namespaces and kinds stay apart, replacing and deleting keep the engine's
index in step (a reflection's delete cascades)."""

from __future__ import annotations

from sqlalchemy import delete

from store import lexical
from store.models import LexicalText, Reflection
from tests.fixtures import add_reflection, make_db

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
        with db.write() as s:  # deleting the reflection takes its lexical text (and the engine's entry) with it
            s.execute(delete(Reflection).where(Reflection.pk == pks["b"]))
        with db.read() as s:
            assert s.get(LexicalText, pks["b"]) is None
            assert pks["b"] not in {pk for pk, _ in lexical.list_lexical_matches(s, "mem", ["exemplar"], "20", 5)}
    finally:
        db.dispose()
