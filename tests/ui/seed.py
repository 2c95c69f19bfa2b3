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
from store import evidence as evidence_repo
from store import jobs as jobs_repo
from store import reflections as reflection_repo
from store.database import Database
from store.models import Job, Reflection, Retrieval, RetrievalHoldout, RetrievalOutcome, Trajectory


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
    """Retrievals made during the first episode, with outcomes reported; each but
    the last names the step it served (the last: none, as older agents send)."""
    base = f"/v1/namespaces/{seeded.namespace}"
    for i in range(count):
        body = {"state": {"observation": STATES[i % len(STATES)]}, "k": 5, "trajectory_id": seeded.trajectories[0]}
        if i < count - 1:
            body["step"] = i % 3
        r = api.post(f"{base}/retrieve", json=body)
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


LLM_REFLECTOR = "llm_heuristics"  # reflectors.prompted.common.HEURISTICS_NAME
LONG_GUIDELINE = (
    "Before trying any locked door, look around the room for a key of the door's colour; take it, walk to "
    "the door, face it and only then use toggle. Never toggle a locked door without its key: it wastes a "
    "step and the episode's budget. The end of this guideline is the part a 140-character cut used to hide."
)


def add_llm_candidates(db: Database, namespace: str, trajectory_id: str, *, suffix: str = "") -> list[str]:
    """Candidates as the LLM reflectors write them (two heuristics, one skill), each
    citing steps 1-2 of `trajectory_id`; the first heuristic has a long guideline.
    `suffix` ends their ids (to add another batch)."""
    drafts = [
        (
            "heuristic",
            "h_llm_keys",
            {
                "trigger": "a locked door and a key in the room",
                "guideline": LONG_GUIDELINE,
                "rationale": "keys open doors of their colour",
                "importance": 1,
            },
        ),
        (
            "heuristic",
            "h_llm_dark",
            {
                "trigger": "a dark room",
                "guideline": "take the lamp first",
                "rationale": "nothing is visible without light",
                "importance": 1,
            },
        ),
        (
            "skill",
            "s_llm_garden",
            {
                "name": "reach the garden",
                "when_to_use": "the garden is east",
                "preconditions": [],
                "steps": ["go east", "open the gate"],
                "importance": 1,
            },
        ),
    ]
    with db.write() as s:
        traj_pk = s.scalar(
            select(Trajectory.pk).where(Trajectory.namespace == namespace, Trajectory.id == trajectory_id)
        )
        for kind, name, content in drafts:
            id_ = name + suffix
            text = " ".join(str(v) for v in content.values() if isinstance(v, str))
            row = reflection_repo.create_reflection(
                s,
                {
                    "namespace": namespace,
                    "id": id_,
                    "kind": kind,
                    "content": {**content, "text": text},
                    "text": text,
                    "reflector": LLM_REFLECTOR if kind == "heuristic" else "llm_skills",
                    "reflector_version": "p1",
                    "status": "candidate",
                    "environment": "grid",
                },
                actor=f"reflector:{LLM_REFLECTOR}",
            )
            evidence_repo.create_evidence(s, row.pk, [evidence_repo.EvidenceIn(traj_pk, 1, 2, success=True)])
            evidence_repo.update_evidence_stats(s, [row.pk])
    return [d[1] + suffix for d in drafts]


def add_merges(db: Database, namespace: str, reflection_id: str, count: int) -> None:
    """`count` automatic merges (as the LLM pool records them: the importance counter
    goes up by one each time, nothing else changes)."""
    with db.write() as s:
        row = reflection_repo.read_reflection(s, namespace, reflection_id, for_update=True)
        assert row is not None
        for _ in range(count):
            importance = int(row.content.get("importance", 1)) + 1
            row.content = {**row.content, "importance": importance}
            reflection_repo.update_reflection_status(
                s,
                row,
                row.status,
                action="merge",
                actor="reflector:llm_heuristics",
                note=f"the same heuristic again; importance now {importance}",
            )


def add_holdout(
    db: Database, namespace: str, reflection_id: str, *, served: tuple[int, int], withheld: tuple[int, int]
) -> None:
    """Holdout draws for one item as the retrieval log records them: `served` and
    `withheld` are (episodes, of which succeeded), each episode one retrieval with
    its outcome (service/retrieval/holdout.py reads exactly these rows)."""
    with db.write() as s:
        pk = s.scalar(select(Reflection.pk).where(Reflection.namespace == namespace, Reflection.id == reflection_id))
        for arm, (episodes, wins) in (("s", served), ("w", withheld)):
            for n in range(episodes):
                rid = f"r_holdout_{reflection_id}_{arm}{n}"
                unit = f"holdout-{reflection_id}-{arm}{n}"
                s.add(Retrieval(id=rid, namespace=namespace, query={"state": {"observation": "x"}}, trajectory_id=unit))
                s.flush()
                s.add(RetrievalHoldout(retrieval_id=rid, reflection_pk=pk, withheld=arm == "w", unit=unit))
                s.add(RetrievalOutcome(retrieval_id=rid, success=n < wins, trajectory_id=unit))
