"""Evidence cards (Pats), no LLM: per task, what the sibling rollouts of its latest
rollout groups did that worked and what failed.

One card per (namespace, task), rebuilt when a rollout of the task closes, from the
latest `groups` groups only: as the policy improves, old groups fall out and the
card follows the policy (the old card is a version in the history). Matched by the
task text, so a trainer or agent asking with a task finds its card.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from dataclasses import dataclass
from typing import Any

import orjson
from sqlalchemy.orm import Session

from domain.jobs import Dedup, Lane, Priority, declare
from domain.reflections import ReflectionDraft
from domain.settings import NamespaceSettings
from domain.state_text import task_query_text
from reflectors.derived import Derived, upsert_derived
from reflectors.embed import encode_texts
from reflectors.registry import Reflector, register
from reflectors.worker import JobView, Write
from service.namespaces.stored import read_settings
from store import evidence as evidence_repo
from store import trajectories as trajectories_repo
from store.database import Database
from store.embedding.base import Embedder
from store.models import Step, Trajectory

NAME = "evidence_card"
VERSION = "1"
KIND = "evidence_card"
JOB = declare(
    "reflect.evidence_card",
    lane=Lane.FAST,
    priority=Priority.OFFLINE,
    dedup=Dedup.COALESCE,
    description="rebuild a task's evidence card from its latest rollout groups",
)
TOP = 5  # actions listed as worked / failed


def card_id(namespace: str, task_hash: str) -> str:
    return "card_" + hashlib.sha256(f"{namespace}\x00{task_hash}".encode()).hexdigest()[:32]


def action_key(action: Any) -> str:
    text = action if isinstance(action, str) else orjson.dumps(action, option=orjson.OPT_SORT_KEYS).decode()
    return " ".join(text.split()).lower()


@dataclass(frozen=True)
class _ActionStat:
    action: str
    in_successful: int
    in_failed: int


def _contrast(runs: list[tuple[Trajectory, list[Step]]]) -> tuple[list[_ActionStat], list[_ActionStat]]:
    """Actions that separate successful from failed rollouts: the share of successful
    rollouts using an action minus the share of failed ones (and the reverse)."""
    won = [{action_key(s.action) for s in steps} for t, steps in runs if t.success]
    lost = [{action_key(s.action) for s in steps} for t, steps in runs if t.success is False]
    in_won, in_lost = Counter(a for acts in won for a in acts), Counter(a for acts in lost for a in acts)
    stats = [_ActionStat(a, in_won[a], in_lost[a]) for a in sorted(set(in_won) | set(in_lost))]

    def lift(s: _ActionStat) -> float:
        return s.in_successful / max(1, len(won)) - s.in_failed / max(1, len(lost))

    worked = sorted((s for s in stats if lift(s) >= 0.5 and s.in_successful >= 2), key=lambda s: (-lift(s), s.action))
    failed = sorted((s for s in stats if lift(s) <= -0.5 and s.in_failed >= 2), key=lambda s: (lift(s), s.action))
    return worked[:TOP], failed[:TOP]


def build_card(task: str, runs: list[tuple[Trajectory, list[Step]]]) -> dict[str, Any]:
    wins = [t for t, _ in runs if t.success]
    worked, failed = _contrast(runs)
    causes = Counter(
        (action_key(s.action), " ".join(s.observation.split())[:160])
        for t, steps in runs
        if t.success is False
        for s in steps
        if s.caused_failure
    )
    reasons = Counter(t.failure_reason for t, _ in runs if t.success is False and t.failure_reason)
    best = min(((t, steps) for t, steps in runs if t.success), key=lambda r: (len(r[1]), r[0].pk), default=None)
    content: dict[str, Any] = {
        "task": task,
        "groups": sorted({t.group_id for t, _ in runs if t.group_id}),
        "rollouts": len(runs),
        "successes": len(wins),
        "success_rate": round(len(wins) / len(runs), 4) if runs else 0.0,
        "worked": [s.__dict__ for s in worked],
        "failed": [s.__dict__ for s in failed],
        "failure_causes": [{"action": a, "observation": o, "count": n} for (a, o), n in causes.most_common(TOP)],
        "failure_reasons": [{"reason": r, "count": n} for r, n in reasons.most_common(TOP)],
        "best_rollout": None
        if best is None
        else {
            "trajectory_id": best[0].id,
            "steps": len(best[1]),
            "actions": [action_key(s.action) for s in best[1]][:30],
        },
    }
    content["text"] = render_card(content)
    return content


def render_card(c: dict[str, Any]) -> str:
    n_won = c["successes"]
    n_lost = c["rollouts"] - n_won
    lines = [
        f"Task: {c['task']}",
        f"Evidence from {len(c['groups'])} rollout group(s): {c['rollouts']} rollouts, {n_won} succeeded.",
    ]
    if c["worked"]:
        lines.append(
            "Worked: "
            + "; ".join(
                f"'{s['action']}' (in {s['in_successful']}/{n_won} successes, {s['in_failed']}/{n_lost} failures)"
                for s in c["worked"]
            )
        )
    if c["failed"]:
        lines.append(
            "Failed: "
            + "; ".join(
                f"'{s['action']}' (in {s['in_failed']}/{n_lost} failures, {s['in_successful']}/{n_won} successes)"
                for s in c["failed"]
            )
        )
    if c["failure_causes"]:
        lines.append(
            "Failures were caused by: "
            + "; ".join(f"'{x['action']}' when '{x['observation']}' ({x['count']}x)" for x in c["failure_causes"])
        )
    if c["failure_reasons"]:
        lines.append("Failure reasons: " + "; ".join(f"{x['reason']} ({x['count']}x)" for x in c["failure_reasons"]))
    if c["best_rollout"]:
        b = c["best_rollout"]
        lines.append(f"Shortest success ({b['steps']} steps): " + " -> ".join(b["actions"]))
    return "\n".join(lines)


class EvidenceCardReflector:
    """Job handler for `reflect.evidence_card` (payload: task, task_hash)."""

    def __init__(self, db: Database, embedder: Embedder) -> None:
        self.db = db
        self.embedder = embedder

    def __call__(self, job: JobView) -> Write | None:
        ns, task, task_hash = job.namespace, job.payload["task"], job.payload["task_hash"]
        with self.db.read() as session:
            groups = read_settings(session, ns).reflection.evidence_cards.groups
            group_ids = trajectories_repo.list_latest_group_ids(session, ns, task_hash, groups)
            trajectories = trajectories_repo.list_closed_in_groups(session, ns, task_hash, group_ids)
            steps = trajectories_repo.list_steps_for(session, [t.pk for t in trajectories])
        if not trajectories:
            return None
        runs = [(t, steps[t.pk]) for t in trajectories]
        content = build_card(task, runs)
        texts = {"state": task_query_text(task)}  # matched by its task
        vectors = encode_texts(self.embedder, [texts], self.db)[0]  # no transaction open
        environments = {t.environment for t in trajectories}
        item = Derived(
            draft=ReflectionDraft(
                namespace=ns,
                id=card_id(ns, task_hash),
                kind=KIND,
                status="active",
                content=content,
                text=content["text"],
                environment=environments.pop() if len(environments) == 1 else None,
                task=task,
                reflector=NAME,
                reflector_version=VERSION,
                source_key=f"{KIND}:{task_hash}",
            ),
            vectors=vectors,
            evidence=[
                evidence_repo.EvidenceIn(t.pk, None, None, success=t.success, value=t.reward) for t in trajectories
            ],
            texts=texts,
        )

        def write(session: Session) -> None:
            upsert_derived(
                session,
                item,
                model=self.embedder.name,
                actor=f"reflector:{NAME}",
                note=f"rebuilt from groups {', '.join(content['groups'])}",
            )

        return write


def queue_card(session: Session, traj: Trajectory, settings: NamespaceSettings) -> None:
    """A rollout that belongs to a group rebuilds its task's card (one per task at a time)."""
    if traj.group_id:
        JOB.enqueue(
            session, traj.namespace, {"task": traj.task, "task_hash": traj.task_hash}, traj.namespace, traj.task_hash
        )


register(
    Reflector(
        name=NAME,
        version=VERSION,
        job=JOB,
        build=lambda deps: EvidenceCardReflector(deps.db, deps.embedder),
        settings_section="evidence_cards",
        trigger=queue_card,
    )
)
