"""Worker slots: each claims its own jobs, so one long job never idles the others,
and the ageing slot keeps low-priority work from starving."""

from __future__ import annotations

import threading
import time

import pytest
from sqlalchemy import select

from domain.jobs import Priority
from reflectors.worker import JobView, Worker, WorkerConfig
from store import jobs as jobs_repo
from store.database import Database
from store.models import Job
from tests.factories import make_db


def enqueue(db: Database, kind: str, key: str, priority: int = 100) -> int:
    with db.write() as s:
        return jobs_repo.create_job(s, namespace="w", kind=kind, payload={}, dedup_key=key, priority=priority)


def wait_done(db: Database, ids: list[int], timeout: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with db.read() as s:
            if all(st == "done" for st in s.scalars(select(Job.status).where(Job.id.in_(ids)))):
                return True
        time.sleep(0.02)
    return False


def test_a_long_job_does_not_idle_the_other_slot(database_url: str) -> None:
    db = make_db(database_url, "w")
    release = threading.Event()
    ran: list[str] = []

    def slow(job: JobView) -> None:
        assert release.wait(30)

    def fast(job: JobView) -> None:
        ran.append(job.payload.get("k", "fast"))

    worker = Worker(db, {"slow": slow, "fast": fast}, WorkerConfig(concurrency=2, poll_interval=0.01))
    slow_id = enqueue(db, "slow", "s")
    worker.start()
    try:
        time.sleep(0.2)  # a slot has the slow job by now
        fast_ids = [enqueue(db, "fast", f"f{i}") for i in range(5)]
        assert wait_done(db, fast_ids), "fast jobs waited for the slow one"
        release.set()
        assert wait_done(db, [slow_id])
    finally:
        release.set()
        worker.stop()
        db.dispose()
    assert len(ran) == 5


def test_the_ageing_slot_runs_starved_work_under_a_flood(database_url: str) -> None:
    db = make_db(database_url, "w")
    stop_flood = threading.Event()

    def index(job: JobView) -> None:
        time.sleep(0.02)  # two slots: at most ~100 jobs/s

    def reflect(job: JobView) -> None:
        pass

    worker = Worker(db, {"index": index, "reflect": reflect}, WorkerConfig(concurrency=2, poll_interval=0.01))
    worker.config.starved_after = 0.3
    reflect_id = enqueue(db, "reflect", "r", priority=100)

    for i in range(100):
        enqueue(db, "index", f"backlog{i}", priority=10)

    def flood() -> None:  # ~400 jobs/s: always more high-priority work than the slots can do
        i = 0
        while not stop_flood.is_set():
            for _ in range(20):
                enqueue(db, "index", f"i{i}", priority=10)
                i += 1
            time.sleep(0.05)

    feeder = threading.Thread(target=flood)
    feeder.start()
    worker.start()
    try:
        assert wait_done(db, [reflect_id], timeout=30), "low-priority job starved"
    finally:
        stop_flood.set()
        feeder.join()
        worker.stop()
        db.dispose()


@pytest.mark.parametrize("express", [True, False])
def test_the_express_slot_runs_an_awaited_job_while_every_slot_is_busy(database_url: str, express: bool) -> None:
    """A reader's job (Priority.AWAITED) does not wait for the jobs in flight: with the
    one regular slot held by a long job, the express slot runs it; without an express
    slot it stays queued until the long job ends."""
    db = make_db(database_url, "mine", "other")
    release = threading.Event()

    def index(job: JobView) -> None:
        if job.payload.get("long"):
            assert release.wait(30)

    def create(ns: str, payload: dict[str, bool], priority: int) -> int:
        with db.write() as s:
            return jobs_repo.create_job(s, namespace=ns, kind="index", payload=payload, dedup_key=ns, priority=priority)

    worker = Worker(db, {"index": index}, WorkerConfig(concurrency=1, poll_interval=0.01, express_slot=express))
    long_id = create("other", {"long": True}, int(Priority.INDEX))
    worker.start()
    try:
        time.sleep(0.2)  # the regular slot has the long job by now
        awaited = create("mine", {}, int(Priority.AWAITED))
        if express:
            assert wait_done(db, [awaited]), "the awaited job waited for the job in flight"
        else:
            assert not wait_done(db, [awaited], timeout=1.0)  # the counterfactual: it waits
        release.set()
        assert wait_done(db, [long_id, awaited])
    finally:
        release.set()
        worker.stop()
        db.dispose()
