"""Evidence cards (Pats), no LLM: per task, what the sibling rollouts of its latest
rollout groups did that worked and what failed (the content: domain.evidence_cards).

One card per (namespace, task), rebuilt when a rollout of the task closes, from the
latest `groups` groups only: as the policy improves, old groups fall out and the
card follows the policy (the old card is a version in the history). Matched by the
task text, so a trainer or agent asking with a task finds its card.
"""

from __future__ import annotations

import hashlib

from sqlalchemy.orm import Session

from domain.evidence_cards import action_key, build_card, render_card
from domain.jobs import Dedup, Lane, Priority, declare
from domain.reflections import ReflectionDraft
from domain.settings import NamespaceSettings
from domain.state_text import task_query_text
from reflectors import repository
from reflectors.derived import Derived, upsert_derived
from reflectors.embed import encode_texts
from reflectors.registry import Reflector, register
from reflectors.worker import JobView, Write
from service.namespaces.stored import read_settings
from store import evidence as evidence_repo
from store.database import Database
from store.embedding.base import Embedder
from store.models import Trajectory
from store.trajectory_reader import StoredStep, read_step_records

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
# The card's content is built by domain.evidence_cards.build_card (the distill
# contexts rebuild cards with it too); its names stay importable from here.
__all__ = [
    "JOB",
    "KIND",
    "NAME",
    "VERSION",
    "EvidenceCardReflector",
    "action_key",
    "build_card",
    "card_id",
    "render_card",
]


def card_id(namespace: str, task_hash: str) -> str:
    return "card_" + hashlib.sha256(f"{namespace}\x00{task_hash}".encode()).hexdigest()[:32]


class EvidenceCardReflector:
    """Job handler for `reflect.evidence_card` (payload: task, task_hash)."""

    def __init__(self, db: Database, embedder: Embedder) -> None:
        self.db = db
        self.embedder = embedder

    def __call__(self, job: JobView) -> Write | None:
        ns, task, task_hash = job.namespace, job.payload["task"], job.payload["task_hash"]
        with self.db.read() as session:
            groups = read_settings(session, ns).reflection.evidence_cards.groups
            group_ids = repository.list_latest_group_ids(session, ns, task_hash, groups)
            trajectories = repository.list_closed_in_groups(session, ns, task_hash, group_ids)
            steps = read_step_records(session, ns, None, [t.pk for t in trajectories], StoredStep)
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
