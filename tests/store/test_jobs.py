"""The job queue on SQLite and PostgreSQL: dedup (once / coalescing), claims that
never overlap, leases that expire, fencing, retries with backoff, failure."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from datetime import timedelta

import pytest

from store import jobs
from store.database import Database
from store.models import Job, utcnow
from tests.factories import make_db


@pytest.fixture
def db(database_url: str) -> Iterator[Database]:
    d = make_db(database_url, "q")
    yield d
    d.dispose()


def enqueue(db: Database, key: str, *, once: bool = True) -> int:
    with db.write() as s:
        return jobs.create_job(s, namespace="q", kind="k", payload={"key": key}, dedup_key=key, once=once)


def status(db: Database, job_id: int) -> Job:
    with db.read() as s:
        return s.get(Job, job_id)  # type: ignore[return-value]


def test_once_and_coalescing_dedup(db: Database) -> None:
    a = enqueue(db, "once")
    assert enqueue(db, "once") == a
    c1 = enqueue(db, "card", once=False)
    assert enqueue(db, "card", once=False) == c1  # still waiting: coalesced
    with db.write() as s:
        assert {j.id for j in jobs.claim_jobs(s, worker_id="w", limit=5, lease_seconds=60)} == {a, c1}
    c2 = enqueue(db, "card", once=False)
    assert c2 != c1  # c1 runs (it may have read its inputs already): new work queues again
    assert enqueue(db, "card", once=False) == c2
    with db.write() as s:
        for j in (a, c1):
            assert jobs.complete_job(s, j, "w")
    assert enqueue(db, "once") == a  # once: never again


def test_claims_never_overlap(db: Database) -> None:
    ids = {enqueue(db, f"j{i}") for i in range(40)}
    got: list[list[int]] = []
    barrier = threading.Barrier(4)

    def claim(worker: str) -> None:
        barrier.wait()
        mine: list[int] = []
        while True:
            with db.write() as s:
                batch = [j.id for j in jobs.claim_jobs(s, worker_id=worker, limit=3, lease_seconds=60)]
            if not batch:
                break
            mine += batch
        got.append(mine)

    threads = [threading.Thread(target=claim, args=(f"w{i}",)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    flat = [j for mine in got for j in mine]
    assert sorted(flat) == sorted(ids)  # every job claimed exactly once


def test_expired_lease_is_reclaimed_and_the_old_holder_is_fenced(db: Database) -> None:
    j = enqueue(db, "lease")
    with db.write() as s:
        assert [x.id for x in jobs.claim_jobs(s, worker_id="dead", limit=1, lease_seconds=0.05)] == [j]
    time.sleep(0.1)
    with db.write() as s:
        [job] = jobs.claim_jobs(s, worker_id="alive", limit=1, lease_seconds=60)
        assert (job.id, job.attempts) == (j, 2)
    with db.write() as s:
        assert not jobs.complete_job(s, j, "dead")  # lost its lease: may not write
        assert not jobs.fail_job(s, j, "dead", "late", retry_in=1)
    with db.write() as s:
        assert jobs.complete_job(s, j, "alive")
    assert status(db, j).status == "done"


def test_transient_failures_back_off_then_fail_for_good(db: Database) -> None:
    with db.write() as s:
        j = jobs.create_job(s, namespace="q", kind="k", payload={}, dedup_key="flaky", max_attempts=2)
    with db.write() as s:
        jobs.claim_jobs(s, worker_id="w", limit=1, lease_seconds=60)
        assert jobs.fail_job(s, j, "w", "429 rate limited", retry_in=30)
    job = status(db, j)
    assert job.status == "queued" and job.run_after > utcnow() + timedelta(seconds=20)
    with db.write() as s:
        assert jobs.claim_jobs(s, worker_id="w", limit=1, lease_seconds=60) == []  # not due yet
        s.get(Job, j).run_after = utcnow()  # type: ignore[union-attr]
    with db.write() as s:
        jobs.claim_jobs(s, worker_id="w", limit=1, lease_seconds=60)
        jobs.fail_job(s, j, "w", "429 again", retry_in=30)
    job = status(db, j)
    assert (job.status, job.attempts, job.last_error) == ("failed", 2, "429 again")
    with db.write() as s:
        job = jobs.read_job(s, "q", j)
        assert job is not None
        jobs.retry_job(s, job)
        assert job.status == "queued"


def test_starved_jobs_go_first_on_an_ageing_claim(db: Database) -> None:
    """Priority order starves low-priority work under a stream of high-priority jobs;
    a claim with `starved_after` takes what has waited longer than that first."""
    with db.write() as s:
        old = jobs.create_job(s, namespace="q", kind="reflect", payload={}, dedup_key="old", priority=100)
        s.get(Job, old).run_after = utcnow() - timedelta(seconds=30)  # type: ignore[union-attr]
        fresh = [
            jobs.create_job(s, namespace="q", kind="index", payload={}, dedup_key=f"i{i}", priority=10)
            for i in range(3)
        ]
    with db.write() as s:
        by_priority = [j.id for j in jobs.claim_jobs(s, worker_id="a", limit=2, lease_seconds=60)]
    assert by_priority == fresh[:2]
    with db.write() as s:
        ageing = [j.id for j in jobs.claim_jobs(s, worker_id="b", limit=2, lease_seconds=60, starved_after=5)]
    assert ageing == [old, fresh[2]]  # the starved job first, then priority order


@pytest.mark.postgres
@pytest.mark.parametrize("database_url", ["postgres"], indirect=True)  # SQLite has one writer: no interleaving
def test_a_coalescing_enqueue_queues_again_when_the_waiting_job_is_claimed_meanwhile(db: Database) -> None:
    """On PostgreSQL each statement reads its own snapshot: the insert sees a queued job
    with the key (and does nothing), then a worker claims it and commits before the read
    of the queued job. The enqueue must queue the work again (found by the soak: a
    `trajectory.closed` job failed with "neither queued nor found")."""
    from sqlalchemy import event

    waiting = enqueue(db, "card", once=False)
    claimed: list[int] = []

    def claim_before_the_read(conn: object, cursor: object, statement: str, *args: object) -> None:
        if not claimed and statement.lstrip().upper().startswith("SELECT") and "jobs.status" in statement:
            with db.write() as other:  # another connection: a worker's claim, committed
                claimed.extend(j.id for j in jobs.claim_jobs(other, worker_id="w", limit=5, lease_seconds=60))

    with db.write() as s:
        event.listen(s.connection(), "before_cursor_execute", claim_before_the_read)
        again = jobs.create_job(s, namespace="q", kind="k", payload={"key": "card"}, dedup_key="card", once=False)
    assert claimed == [waiting]  # the interleaving happened
    assert again != waiting and status(db, again).status == "queued"
    assert status(db, waiting).status == "running"
