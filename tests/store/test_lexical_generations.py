"""The lexical index's generation (migration 0021) on both engines: every committed
insert, update and delete of a lexical text moves it, a cascaded delete too, a
rolled-back write does not; SQLite's one counter moves for every namespace,
PostgreSQL's only for the namespace written, once per statement."""

from __future__ import annotations

import pytest
from sqlalchemy import delete, insert, update

from store import lexical
from store.database import Database
from store.models import LexicalText, Reflection
from tests.factories import add_reflection, make_db


def _generation(db: Database, ns: str) -> int:
    with db.read() as s:
        return lexical.read_generation(s, ns)


def test_every_committed_write_of_a_lexical_text_moves_the_generation(database_url: str) -> None:
    db = make_db(database_url, "mem", "other")
    try:
        assert _generation(db, "mem") == 0
        with db.write() as s:
            pk = add_reflection(s, "mem", "a").pk
            lexical.update_lexical_text(s, reflection_pk=pk, namespace="mem", kind="exemplar", text_="a blue door")
        first = _generation(db, "mem")
        assert first > 0
        with db.write() as s:  # the upsert's update path
            lexical.update_lexical_text(s, reflection_pk=pk, namespace="mem", kind="exemplar", text_="a red door")
        second = _generation(db, "mem")
        assert second > first
        with db.write() as s:
            s.execute(update(LexicalText).where(LexicalText.reflection_pk == pk).values(kind="skill"))
        third = _generation(db, "mem")
        assert third > second
        with db.write() as s:  # a reflection's delete cascades to its text
            s.execute(delete(Reflection).where(Reflection.pk == pk))
        with db.read() as s:
            assert s.get(LexicalText, pk) is None
        assert _generation(db, "mem") > third
    finally:
        db.dispose()


def test_a_rolled_back_write_leaves_the_generation(database_url: str) -> None:
    db = make_db(database_url, "mem")
    try:
        before = _generation(db, "mem")
        with pytest.raises(RuntimeError), db.write() as s:
            pk = add_reflection(s, "mem", "a").pk
            lexical.update_lexical_text(s, reflection_pk=pk, namespace="mem", kind="exemplar", text_="a blue door")
            raise RuntimeError("abandoned")
        assert _generation(db, "mem") == before
    finally:
        db.dispose()


def test_which_namespaces_a_write_moves(database_url: str) -> None:
    db = make_db(database_url, "mem", "other")
    try:
        with db.write() as s:
            pk = add_reflection(s, "other", "a").pk
            lexical.update_lexical_text(s, reflection_pk=pk, namespace="other", kind="exemplar", text_="a blue door")
        # SQLite: bm25 weighs every match by the whole index, so "mem"'s searches
        # must see a write to "other" too; PostgreSQL's ts_rank does not.
        assert _generation(db, "other") == 1
        assert _generation(db, "mem") == (0 if db.is_postgres else 1)
    finally:
        db.dispose()


def test_a_bulk_statement_moves_each_namespace_it_writes(database_url: str) -> None:
    db = make_db(database_url, "mem", "other")
    try:
        with db.write() as s:
            pks = [add_reflection(s, ns, f"s{i}").pk for i, ns in enumerate(["mem"] * 3 + ["other"] * 2)]
            rows = [
                {"reflection_pk": pk, "namespace": ns, "kind": "exemplar", "text": f"state {i}"}
                for i, (pk, ns) in enumerate(zip(pks, ["mem"] * 3 + ["other"] * 2, strict=True))
            ]
            s.execute(insert(LexicalText).values(rows))  # one statement, five rows
        if db.is_postgres:  # one statement: each namespace's row moves once
            assert (_generation(db, "mem"), _generation(db, "other")) == (1, 1)
        else:  # row triggers on the one counter
            assert _generation(db, "mem") == _generation(db, "other") == 5
        with db.write() as s:
            s.execute(delete(LexicalText).where(LexicalText.namespace == "mem"))
        if db.is_postgres:
            assert (_generation(db, "mem"), _generation(db, "other")) == (2, 1)
        else:
            assert _generation(db, "mem") == 8
    finally:
        db.dispose()
