"""Reflection kinds and the typed draft (domain/reflections.py): `values()` gives
every column of a new row, the source key defaulting to `kind:id`, and a real store
accepts it as a row."""

from __future__ import annotations

from domain.reflections import KINDS, STATUSES, TASK_KEYED, ReflectionDraft
from store import reflections as reflections_repo
from tests.factories import make_db

DRAFT = ReflectionDraft(
    namespace="mem",
    id="h_1",
    kind="heuristic",
    content={"trigger": "a locked door", "guideline": "find the key"},
    text="When: a locked door\nGuideline: find the key",
    reflector="llm_heuristics",
    reflector_version="heuristics_single.v1",
)


def test_kinds_and_statuses() -> None:
    assert KINDS == ("exemplar", "heuristic", "skill", "rubric", "evidence_card")
    assert STATUSES == ("candidate", "active", "retired")
    assert {"evidence_card", "rubric"} == TASK_KEYED


def test_values_fill_the_defaults_and_the_source_key() -> None:
    assert DRAFT.values() == {
        "namespace": "mem",
        "id": "h_1",
        "kind": "heuristic",
        "content": {"trigger": "a locked door", "guideline": "find the key"},
        "text": "When: a locked door\nGuideline: find the key",
        "reflector": "llm_heuristics",
        "reflector_version": "heuristics_single.v1",
        "status": "candidate",
        "environment": None,
        "task": None,
        "model": None,
        "source_key": "heuristic:h_1",
    }
    keyed = ReflectionDraft(**{**DRAFT.__dict__, "source_key": "evidence_card:0123abcd", "status": "active"})
    assert keyed.values()["source_key"] == "evidence_card:0123abcd" and keyed.values()["status"] == "active"
    assert DRAFT.source_key is None  # values() fills it in without changing the draft


def test_values_make_a_row_in_the_store(database_url: str) -> None:
    db = make_db(database_url, "mem")
    try:
        with db.write() as s:
            reflections_repo.create_reflection(s, DRAFT.values(), actor="reflector:llm_heuristics")
        with db.read() as s:
            row = reflections_repo.read_reflection(s, "mem", "h_1")
            assert row is not None
            assert {k: getattr(row, k) for k in DRAFT.values()} == DRAFT.values()
            assert (row.version, row.evidence_count, row.uses) == (1, 0, 0)
    finally:
        db.dispose()
