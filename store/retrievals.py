"""Retrieval queries: candidate loading with filters and leakage guards, the
retrieval log, and outcome credit into reflection utility."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import numpy as np
from sqlalchemy import Row, and_, exists, insert, select, update
from sqlalchemy.orm import Session

from store.models import (
    Embedding,
    Namespace,
    Reflection,
    ReflectionEvidence,
    Retrieval,
    RetrievalItem,
    RetrievalOutcome,
    Trajectory,
    utcnow,
)


@dataclass(frozen=True)
class CandidateFilters:
    kinds: Sequence[str]
    statuses: Sequence[str]
    environment: str | None = None
    agent: str | None = None
    policy_version: str | None = None
    exclude_task_hashes: Sequence[str] = ()
    exclude_trajectory_ids: Sequence[str] = ()
    as_of: datetime | None = None


def _cited_by(*conditions: Any) -> Any:
    """EXISTS: the reflection has evidence from a trajectory matching the conditions."""
    return exists().where(
        ReflectionEvidence.reflection_pk == Reflection.pk,
        Trajectory.pk == ReflectionEvidence.trajectory_pk,
        *conditions,
    )


@dataclass
class ScoringRow:
    """What ranking needs of a candidate: no content, no text (those are loaded for
    the few items actually served)."""

    pk: int
    kind: str
    successes: int
    failures: int
    uses: int
    updated_at: datetime
    vectors: dict[str, np.ndarray] = field(default_factory=dict)


def load_candidates(
    session: Session, namespace: str, pks: Sequence[int], f: CandidateFilters, model: str
) -> list[ScoringRow]:
    """The reflections among `pks` that pass every filter, with their vectors of
    `model` (one query: a candidate comes back once per stored field)."""
    if not pks:
        return []
    r = Reflection
    stmt = (
        select(r.pk, r.kind, r.successes, r.failures, r.uses, r.updated_at, Embedding.field, Embedding.vector)
        .join(Embedding, and_(Embedding.reflection_pk == r.pk, Embedding.model == model))
        .where(
            r.pk.in_(list(pks)),
            r.namespace == namespace,
            r.kind.in_(list(f.kinds)),
            r.status.in_(list(f.statuses)),
        )
    )
    if f.environment is not None:
        stmt = stmt.where(r.environment == f.environment)
    if f.as_of is not None:
        stmt = stmt.where(r.created_at <= f.as_of)
    if f.agent is not None:
        stmt = stmt.where(_cited_by(Trajectory.agent == f.agent))
    if f.policy_version is not None:
        stmt = stmt.where(_cited_by(Trajectory.policy_version == f.policy_version))
    if f.exclude_task_hashes:
        stmt = stmt.where(~_cited_by(Trajectory.task_hash.in_(list(f.exclude_task_hashes))))
    if f.exclude_trajectory_ids:
        stmt = stmt.where(
            ~_cited_by(Trajectory.namespace == namespace, Trajectory.id.in_(list(f.exclude_trajectory_ids)))
        )
    out: dict[int, ScoringRow] = {}
    for pk, kind, wins, losses, uses, updated_at, fld, blob in session.execute(stmt):
        row = out.get(pk)
        if row is None:
            row = out[pk] = ScoringRow(pk, kind, wins, losses, uses, updated_at)
        row.vectors[fld] = np.frombuffer(blob, dtype="<f4")
    return list(out.values())


# What serving an item shows; loaded as plain rows (not ORM objects) for the few
# items chosen, since building ORM instances was a sixth of a retrieve's CPU.
_SERVED_COLUMNS = (
    Reflection.pk,
    Reflection.id,
    Reflection.kind,
    Reflection.status,
    Reflection.version,
    Reflection.content,
    Reflection.text,
    Reflection.environment,
    Reflection.created_at,
    Reflection.updated_at,
    Reflection.evidence_count,
    Reflection.evidence_successes,
    Reflection.evidence_failures,
    Reflection.evidence_value,
)


def load_served(session: Session, pks: Sequence[int]) -> dict[int, Row[Any]]:
    """pk -> the served fields of each reflection (attribute access by column name)."""
    if not pks:
        return {}
    return {row.pk: row for row in session.execute(select(*_SERVED_COLUMNS).where(Reflection.pk.in_(list(pks))))}


def evidence_summaries(
    session: Session, reflection_pks: Sequence[int], per_item: int
) -> dict[int, list[tuple[str, int | None, int | None]]]:
    """pk -> the newest `per_item` evidence links as (trajectory id, step start, step end)."""
    out: dict[int, list[tuple[str, int | None, int | None]]] = {pk: [] for pk in reflection_pks}
    if not reflection_pks:
        return out
    e = ReflectionEvidence
    stmt = (
        select(e.reflection_pk, Trajectory.id, e.step_start, e.step_end)
        .join(Trajectory, Trajectory.pk == e.trajectory_pk)
        .where(e.reflection_pk.in_(list(reflection_pks)))
        .order_by(e.reflection_pk, e.pk.desc())
    )
    for pk, tid, start, end in session.execute(stmt):
        if len(out[pk]) < per_item:
            out[pk].append((tid, start, end))
    return out


def insert_retrieval(
    session: Session,
    *,
    id: str,
    namespace: str,
    query: dict[str, Any],
    trajectory_id: str | None,
    items: Sequence[tuple[int, int, float, float]],
) -> None:
    """Log a retrieval and what it served: items are (reflection pk, rank, score, similarity).
    Core inserts: the ORM unit of work cost a fifth of a retrieve's CPU here."""
    session.execute(
        insert(Retrieval.__table__).values(
            id=id, namespace=namespace, query=query, trajectory_id=trajectory_id, created_at=utcnow()
        )
    )
    if items:
        session.execute(
            insert(RetrievalItem.__table__),
            [
                {"retrieval_id": id, "reflection_pk": pk, "rank": rank, "score": score, "similarity": sim}
                for pk, rank, score, sim in items
            ],
        )


def get_retrieval(session: Session, namespace: str, id: str) -> Retrieval | None:
    row = session.get(Retrieval, id)
    return row if row is not None and row.namespace == namespace else None


def get_outcome(session: Session, retrieval_id: str) -> RetrievalOutcome | None:
    return session.get(RetrievalOutcome, retrieval_id)


def record_outcome(
    session: Session,
    namespace: str,
    retrieval_id: str,
    *,
    success: bool | None,
    reward: float | None,
    trajectory_id: str | None,
    details: dict[str, Any] | None,
) -> int:
    """Store the outcome and credit every item the retrieval served (counters are
    updated in SQL, so concurrent credits never lose an increment). Returns the
    number of items credited. The caller checks there is no outcome yet."""
    session.add(
        RetrievalOutcome(
            retrieval_id=retrieval_id,
            success=success,
            reward=reward,
            trajectory_id=trajectory_id,
            details=details,
            created_at=utcnow(),
        )
    )
    served = select(RetrievalItem.reflection_pk).where(RetrievalItem.retrieval_id == retrieval_id)
    values: dict[str, Any] = {"uses": Reflection.uses + 1}
    if success is True:
        values["successes"] = Reflection.successes + 1
    elif success is False:
        values["failures"] = Reflection.failures + 1
    if reward is not None:
        values["reward_sum"] = Reflection.reward_sum + reward
    result = session.execute(update(Reflection).where(Reflection.pk.in_(served)).values(**values))
    if success is not None:
        session.execute(
            update(Namespace)
            .where(Namespace.name == namespace)
            .values(
                outcome_total=Namespace.outcome_total + 1,
                outcome_successes=Namespace.outcome_successes + (1 if success else 0),
            )
        )
    return result.rowcount or 0


def open_retrievals_of(session: Session, namespace: str, trajectory_id: str, extra_ids: Sequence[str]) -> list[str]:
    """Retrievals linked to an episode (by trajectory_id or listed in its
    retrieval_ids) that have no outcome yet."""
    linked = Retrieval.trajectory_id == trajectory_id
    if extra_ids:
        linked = linked | Retrieval.id.in_(list(extra_ids))
    stmt = select(Retrieval.id).where(
        Retrieval.namespace == namespace,
        linked,
        ~exists().where(RetrievalOutcome.retrieval_id == Retrieval.id),
    )
    return list(session.scalars(stmt))
