"""A small namespace worth looking at, made through the public API: episodes that
succeed and fail, exemplars distilled from them, retrievals during episodes with
outcomes reported, a candidate, an underperformer and a failed job. Used by the
UI tests (TestClient and the browser)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import httpx
from sqlalchemy import select, update

from domain.jobs import Priority
from store import jobs as jobs_repo
from store.database import Database
from store.models import Job, Reflection


@dataclass
class Seeded:
    namespace: str
    trajectories: list[str] = field(default_factory=list)
    retrievals: list[str] = field(default_factory=list)
    failed_job_id: int | None = None


STATES = [
    "You are in a kitchen. A red key lies on the table. The door to the north is locked.",
    "You are in a hallway. A blue ball is 2 steps left of you.",
    "You are in a garden. The gate to the east is open and a shovel leans on the wall.",
    "You are in a cellar. It is dark; a lamp is on the shelf.",
]
ACTIONS = ["take red key", "go left", "go east", "take lamp"]


def _step(i: int, action: str, marker: str = "", **extra: Any) -> dict[str, Any]:
    return {
        "state": {"observation": marker + STATES[i % len(STATES)]},
        "internal_state": f"subgoal {i % 2}",
        "action": action,
        "result": "ok",
        "reward": 1.0 if extra.get("done") else 0.0,
        **extra,
    }


def seed(api: httpx.Client | Any, namespace: str, *, episodes: int = 6, marker: str = "") -> Seeded:
    """`api` is authenticated as admin (a TestClient or an httpx.Client on a live server);
    `marker` starts every task and observation (to tell one namespace's data on a page)."""
    r = api.post("/v1/namespaces", json={"name": namespace})
    assert r.status_code in (200, 201), r.text
    out = Seeded(namespace)
    base = f"/v1/namespaces/{namespace}"
    for e in range(episodes):
        tid = f"{namespace}-ep{e}"
        success = e % 3 != 2
        steps = [_step(i, ACTIONS[i % len(ACTIONS)], marker) for i in range(3)]
        steps[-1]["done"] = True
        body = {
            "id": tid,
            "task": marker + ("find the key" if e % 2 == 0 else "reach the garden"),
            "environment": "grid",
            "agent": f"agent-{e % 2}",
            "policy_version": f"v{e // 3}",
            "group_id": f"g{e // 2}",
            "steps": steps,
            "outcome": {"success": success, "reward": 1.0 if success else 0.0},
        }
        r = api.post(f"{base}/trajectories", json=body)
        assert r.status_code in (200, 201), r.text
        out.trajectories.append(tid)
    return out


def add_retrievals(api: Any, seeded: Seeded, *, count: int = 4) -> None:
    """Retrievals made during the first episode, with outcomes reported."""
    base = f"/v1/namespaces/{seeded.namespace}"
    for i in range(count):
        r = api.post(
            f"{base}/retrieve",
            json={"state": {"observation": STATES[i % len(STATES)]}, "k": 5, "trajectory_id": seeded.trajectories[0]},
        )
        assert r.status_code == 200, r.text
        rid = r.json()["retrieval_id"]
        seeded.retrievals.append(rid)
        r = api.post(f"{base}/retrievals/{rid}/outcome", json={"success": i % 2 == 0, "reward": float(i % 2 == 0)})
        assert r.status_code in (200, 201), r.text


def add_failed_job(db: Database, namespace: str) -> int:
    """A job that failed for good, as a worker leaves one after its last attempt."""
    with db.write() as s:
        job_id = jobs_repo.create_job(
            s,
            namespace=namespace,
            kind="reflect.contrastive",
            payload={"task_hash": "0"},
            dedup_key=f"ui-test-failed:{namespace}",
            priority=Priority.OFFLINE,
        )
        s.execute(
            update(Job)
            .where(Job.id == job_id)
            .values(status="failed", attempts=5, last_error="Traceback (most recent call last):\n  ValueError: boom")
        )
    return int(job_id)


def make_review_cases(
    db: Database, namespace: str, *, candidates: int = 2, below: int = 2, spare: str | None = None
) -> list[str]:
    """Turn some exemplars into candidates and some into active items credited
    below any baseline (many failures), so the review queue has both kinds; rows
    whose text contains `spare` are left as they are."""
    with db.write() as s:
        stmt = select(Reflection).where(Reflection.namespace == namespace).order_by(Reflection.pk)
        rows = [r for r in s.scalars(stmt) if spare is None or spare not in r.text]
        assert len(rows) >= candidates + below, len(rows)
        ids = []
        for row in rows[:candidates]:
            row.status = "candidate"
            ids.append(row.id)
        for row in rows[candidates : candidates + below]:
            row.status = "active"
            row.uses, row.successes, row.failures = 100, 1, 99
            ids.append(row.id)
    return ids
