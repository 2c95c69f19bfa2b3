"""kill -9 a worker process mid-job (PostgreSQL, two workers): its lease expires,
the other worker takes the job over, and every job takes effect exactly once."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from sqlalchemy import func, select

from service.settings import Settings
from store.database import Database
from store.models import Job, Reflection, ReflectionEvidence, Step
from tests.conftest import ADMIN_KEY, make_settings, start_worker
from tests.factories import step
from tests.fixtures import create_namespace

EPISODES = 60
STEPS = 12


def _worker(database_url: str, tmp_path: Path, name: str) -> subprocess.Popen[bytes]:
    return start_worker(
        database_url,
        tmp_path / name,
        log=tmp_path / f"{name}.log",
        args=["--concurrency", "2"],
        env={"REFLEXA_WORKER__LEASE_SECONDS": "3", "REFLEXA_WORKER__POLL_INTERVAL_MS": "20"},
    )


def _ingest(settings: Settings) -> None:
    from fastapi.testclient import TestClient

    from service.app import create_app

    with TestClient(create_app(settings), headers={"Authorization": f"Bearer {ADMIN_KEY}"}) as c:
        # one job per episode: no recount, no lexical calibration
        create_namespace(c, "crash", reflection={"contrastive": {"enabled": False}}, ranking={"lexical_weight": 0.5})
        batch = [
            {
                "id": f"e{i}",
                "task": "t",
                "environment": "maze",
                "outcome": {"success": i % 2 == 0},
                "steps": [step(f"corridor {i % 7} junction {j}", f"turn {j % 3}") for j in range(STEPS)],
            }
            for i in range(EPISODES)
        ]
        assert c.post("/v1/namespaces/crash/trajectories/batch", json={"trajectories": batch}).status_code == 201


@pytest.mark.postgres
def test_kill_9_mid_job_every_job_takes_effect_once(pg_databases, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from migrations import upgrade

    url = pg_databases.create()
    upgrade(url)
    _ingest(make_settings(url, tmp_path))
    db = Database(url)
    victim = _worker(url, tmp_path, "victim")
    survivor = None
    try:
        # Wait until the victim holds a job, then kill it without warning.
        deadline = time.monotonic() + 60
        held = 0
        while time.monotonic() < deadline and not held:
            with db.read() as s:
                held = (
                    s.scalar(
                        select(func.count()).select_from(Job).where(Job.status == "running", Job.locked_by.is_not(None))
                    )
                    or 0
                )
        assert held, "the victim never claimed a job"
        os.kill(victim.pid, signal.SIGKILL)
        victim.wait(timeout=10)
        survivor = _worker(url, tmp_path, "survivor")
        second = _worker(url, tmp_path, "second")
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            with db.read() as s:
                unfinished = s.scalar(select(func.count()).select_from(Job).where(Job.status != "done")) or 0
            if not unfinished:
                break
            time.sleep(0.2)
        for w in (survivor, second):
            w.terminate()
            w.wait(timeout=30)
        with db.read() as s:
            jobs = s.scalars(select(Job)).all()
            assert [j.status for j in jobs].count("done") == len(jobs) == EPISODES
            assert max(j.attempts for j in jobs) >= 2  # the killed job was taken over
            steps = s.scalar(select(func.count()).select_from(Step))
            evidence = s.scalar(select(func.count()).select_from(ReflectionEvidence))
            assert evidence == steps == EPISODES * STEPS  # every step credited exactly once
            exemplars = s.scalar(select(func.count()).select_from(Reflection))
            distinct_pairs = 7 * STEPS  # (corridor, junction) states x their one action each
            assert exemplars == distinct_pairs
            counted = s.scalar(select(func.sum(Reflection.evidence_count)))
            assert counted == EPISODES * STEPS
    finally:
        for w in (victim, survivor):
            if w is not None and w.poll() is None:
                w.kill()
        db.dispose()
