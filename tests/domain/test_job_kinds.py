"""The table of job kinds (domain/jobs.py): a kind declared again identically is
the same entry, declared differently is refused; dedup keys are `kind:part:part`;
enqueueing through a kind applies its priority and dedup rule in a real store."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy import select

from domain.jobs import JOB_KINDS, REFLECTION_EMBED, TRAJECTORY_CLOSED, Dedup, JobKind, Lane, Priority, declare
from store import jobs as jobs_repo
from store.models import Job
from tests.factories import make_db

TEST_KIND = "test.kind"


@pytest.fixture
def clean_table() -> Iterator[None]:
    before = dict(JOB_KINDS)
    yield
    JOB_KINDS.clear()
    JOB_KINDS.update(before)


def test_declaring_again_identically_is_the_same_kind(clean_table: None) -> None:
    first = declare(TEST_KIND, lane=Lane.FAST, priority=Priority.OFFLINE, dedup=Dedup.COALESCE, description="d")
    again = declare(TEST_KIND, lane=Lane.FAST, priority=Priority.OFFLINE, dedup=Dedup.COALESCE, description="d")
    assert again is first and JOB_KINDS[TEST_KIND] is first
    assert first == JobKind(TEST_KIND, Lane.FAST, Priority.OFFLINE, Dedup.COALESCE, "d")


@pytest.mark.parametrize(
    "change",
    [{"lane": Lane.SLOW}, {"priority": Priority.LLM}, {"dedup": Dedup.ONCE}, {"description": "other"}],
)
def test_declaring_differently_is_refused(clean_table: None, change: dict[str, object]) -> None:
    same = {"lane": Lane.FAST, "priority": Priority.OFFLINE, "dedup": Dedup.COALESCE, "description": "d"}
    first = declare(TEST_KIND, **same)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="declared twice, differently"):
        declare(TEST_KIND, **{**same, **change})  # type: ignore[arg-type]
    assert JOB_KINDS[TEST_KIND] is first  # the first declaration stands


def test_the_api_kinds_are_in_the_table() -> None:
    assert JOB_KINDS["trajectory.closed"] is TRAJECTORY_CLOSED
    assert (TRAJECTORY_CLOSED.lane, TRAJECTORY_CLOSED.priority, TRAJECTORY_CLOSED.dedup) == (
        Lane.FAST,
        Priority.INDEX,
        Dedup.ONCE,
    )
    assert JOB_KINDS["reflection.embed"] is REFLECTION_EMBED
    assert Priority.INDEX < Priority.REEMBED < Priority.OFFLINE < Priority.LLM < Priority.LLM_TASK


def test_dedup_key_format() -> None:
    assert TRAJECTORY_CLOSED.dedup_key("mem", 42) == "trajectory.closed:mem:42"
    assert REFLECTION_EMBED.dedup_key("mem", "ex_1", 3) == "reflection.embed:mem:ex_1:3"
    assert TRAJECTORY_CLOSED.dedup_key() == "trajectory.closed"


def test_enqueue_applies_priority_and_dedup_rule(database_url: str, clean_table: None) -> None:
    coalescing = declare(TEST_KIND, lane=Lane.FAST, priority=Priority.OFFLINE, dedup=Dedup.COALESCE)
    db = make_db(database_url, "mem")
    try:
        with db.write() as s:
            once = TRAJECTORY_CLOSED.enqueue(s, "mem", {"trajectory_pk": 1}, "mem", 1)
            assert TRAJECTORY_CLOSED.enqueue(s, "mem", {"trajectory_pk": 1}, "mem", 1) == once
            card = coalescing.enqueue(s, "mem", {"task": "t"}, "mem", "t")
            assert coalescing.enqueue(s, "mem", {"task": "t"}, "mem", "t") == card  # still waiting
        with db.write() as s:
            claimed = jobs_repo.claim_jobs(s, worker_id="w", limit=5, lease_seconds=60)
            assert {j.id for j in claimed} == {once, card}
        with db.write() as s:
            assert TRAJECTORY_CLOSED.enqueue(s, "mem", {"trajectory_pk": 1}, "mem", 1) == once  # once: never again
            assert coalescing.enqueue(s, "mem", {"task": "t"}, "mem", "t") != card  # started: queued anew
        with db.read() as s:
            rows = {j.id: (j.kind, j.dedup_key, j.priority, j.payload) for j in s.scalars(select(Job))}
        assert rows[once] == ("trajectory.closed", "trajectory.closed:mem:1", 10, {"trajectory_pk": 1})
        assert rows[card] == (TEST_KIND, "test.kind:mem:t", 50, {"task": "t"})
        assert len(rows) == 3
    finally:
        db.dispose()
