"""A repeated query reuses its lexical matches while the lexical index's generation
stands still, and searches again once any write could change them (both engines,
through the API): the reused answer is the one a search would give."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from service.retrieval.lexical_matches import LexicalMatches
from store import lexical
from tests.factories import add_reflection, make_db, step
from tests.fixtures import create_namespace, drain, post_trajectory

QUERY = "You are at the door. 20 steps left."
SEEN = ["You are at the door. 2 steps left.", "You are at the window. A cat sleeps."]
NEW = "A note by the door reads 20."


class Searches:
    """`store.lexical.list_word_matches`, recording each search's words and pks."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls: list[tuple[tuple[str, ...], set[int]]] = []
        real = lexical.list_word_matches

        def spy(session: Session, ns: str, kinds: Sequence[str], words: Sequence[str], limit: int) -> Any:
            found = real(session, ns, kinds, words, limit)
            self.calls.append((tuple(words), {pk for pk, _ in found}))
            return found

        monkeypatch.setattr(lexical, "list_word_matches", spy)


def retrieve(api: TestClient, ns: str) -> list[tuple[str, float | None]]:
    r = api.post(f"/v1/namespaces/{ns}/retrieve", json={"state": {"observation": QUERY}, "k": 5})
    assert r.status_code == 200, r.text
    return [(i["id"], i["lexical_similarity"]) for i in r.json()["items"]]


def test_a_repeated_query_reuses_its_matches_until_a_write_could_change_them(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    create_namespace(client, "m")
    create_namespace(client, "elsewhere")
    post_trajectory(client, "m", "t", steps=[step(text, "look") for text in SEEN], success=True)
    drain(client)
    searches = Searches(monkeypatch)
    first = retrieve(client, "m")
    assert len(searches.calls) == 1
    words, matched = searches.calls[0]
    assert "20" in words and len(matched) == 2  # a small index: every word is searched
    assert retrieve(client, "m") == first
    assert len(searches.calls) == 1  # reused

    post_trajectory(client, "m", "u", steps=[step(NEW, "read")], success=True)
    drain(client)
    retrieve(client, "m")
    assert len(searches.calls) == 2
    assert searches.calls[1][1] > matched and len(searches.calls[1][1]) == 3  # the new text too

    post_trajectory(client, "elsewhere", "v", steps=[step("A quiet field.", "walk")], success=True)
    drain(client)
    retrieve(client, "m")
    postgres = client.app.state.services.db.is_postgres  # type: ignore[attr-defined]
    # SQLite's bm25 weighs matches by the whole index, so another namespace's write
    # is a reason to search again; PostgreSQL's ts_rank is not.
    assert len(searches.calls) == (2 if postgres else 3)


def test_kept_matches_are_bounded_and_never_replaced_by_an_older_generation(database_url: str) -> None:
    db = make_db(database_url, "mem")
    try:
        with db.write() as s:
            for i, text in enumerate(["red door", "blue door", "red lamp"]):
                pk = add_reflection(s, "mem", f"r{i}").pk
                lexical.update_lexical_text(s, reflection_pk=pk, namespace="mem", kind="exemplar", text_=text)
        kept = LexicalMatches(max_entries=2)
        with db.read() as s:
            red = kept.matches(s, 5, "mem", ["exemplar"], ["red"], 10)
            assert len(red) == 2
            assert kept.matches(s, 4, "mem", ["exemplar"], ["red"], 10) == red  # searched, not kept over 5
            assert kept._kept[("mem", ("exemplar",), ("red",), 10)][0] == 5
            kept.matches(s, 5, "mem", ["exemplar"], ["blue"], 10)
            kept.matches(s, 5, "mem", ["exemplar"], ["lamp"], 10)
            assert [key[2] for key in kept._kept] == [("blue",), ("lamp",)]  # the least recent went
            assert kept.matches(s, 5, "mem", ["exemplar"], [], 10) == []
    finally:
        db.dispose()
