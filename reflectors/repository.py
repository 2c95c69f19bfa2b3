"""What reflectors read to do their work: an environment's exemplars with their
state vectors, an LLM pool with its vectors, what a reflector already wrote, and
a task's closed attempts to contrast (its latest rollout groups, its recent
attempts with a known outcome)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from sqlalchemy import ColumnElement, func, select
from sqlalchemy.orm import Session

from store.models import Embedding, LexicalText, Reflection, ReflectionEvidence, Trajectory

# A reflection's state vector (of whichever model: the query names it).
_STATE_VECTOR = (Embedding.reflection_pk == Reflection.pk) & (Embedding.field == "state")


def _active_exemplars(namespace: str, model: str) -> tuple[ColumnElement[bool], ...]:
    """The namespace's active exemplars that have a state vector of `model`."""
    return (
        Reflection.namespace == namespace,
        Reflection.kind == "exemplar",
        Reflection.status == "active",
        Embedding.model == model,
    )


def list_exemplars_with_vectors(
    session: Session, namespace: str, environment: str | None, model: str, limit: int
) -> list[tuple[Reflection, np.ndarray]]:
    """The environment's most-seen active exemplars with their state vectors."""
    stmt = (
        select(Reflection, Embedding.vector)
        .join(Embedding, _STATE_VECTOR)
        .where(
            *_active_exemplars(namespace, model),
            Reflection.environment.is_(None) if environment is None else Reflection.environment == environment,
        )
        .order_by(Reflection.evidence_count.desc(), Reflection.pk)
        .limit(limit)
    )
    return [(row, np.frombuffer(blob, dtype="<f4")) for row, blob in session.execute(stmt)]


def list_reflections_by_reflector(
    session: Session, namespace: str, reflector: str, environment: str | None
) -> list[Reflection]:
    stmt = select(Reflection).where(
        Reflection.namespace == namespace,
        Reflection.reflector == reflector,
        Reflection.environment.is_(None) if environment is None else Reflection.environment == environment,
    )
    return list(session.scalars(stmt))


def list_pool_with_vectors(
    session: Session,
    namespace: str,
    *,
    kind: str,
    environment: str | None,
    reflectors: Sequence[str],
    model: str,
    limit: int,
) -> list[tuple[Reflection, np.ndarray]]:
    """The not-retired reflections of one kind, environment and set of reflectors
    with their state vectors of `model` (rows without one are left out), newest
    first: the pool an LLM reflector compares a new item against."""
    stmt = (
        select(Reflection, Embedding.vector)
        .join(Embedding, _STATE_VECTOR)
        .where(
            Reflection.namespace == namespace,
            Reflection.kind == kind,
            Reflection.status != "retired",
            Reflection.reflector.in_(list(reflectors)),
            Embedding.model == model,
            Reflection.environment.is_(None) if environment is None else Reflection.environment == environment,
        )
        .order_by(Reflection.pk.desc())
        .limit(limit)
    )
    return [(row, np.frombuffer(blob, dtype="<f4")) for row, blob in session.execute(stmt)]


def cited_by_reflectors(session: Session, namespace: str, trajectory_pk: int, reflectors: Sequence[str]) -> bool:
    """Whether any reflection of these reflectors already cites the trajectory (an
    LLM reflection job whose results were written)."""
    stmt = (
        select(ReflectionEvidence.pk)
        .join(Reflection, Reflection.pk == ReflectionEvidence.reflection_pk)
        .where(
            ReflectionEvidence.trajectory_pk == trajectory_pk,
            Reflection.namespace == namespace,
            Reflection.reflector.in_(list(reflectors)),
        )
        .limit(1)
    )
    return session.scalar(stmt) is not None


def list_exemplar_state_texts(session: Session, namespace: str, model: str, limit: int) -> list[tuple[str, np.ndarray]]:
    """The namespace's newest active exemplars' state texts (as the lexical index
    holds them) with their state vectors, for the lexical calibration."""
    stmt = (
        select(LexicalText.text, Embedding.vector)
        .join(Reflection, Reflection.pk == LexicalText.reflection_pk)
        .join(Embedding, _STATE_VECTOR)
        .where(*_active_exemplars(namespace, model))
        .order_by(Reflection.pk.desc())
        .limit(limit)
    )
    return [(text, np.frombuffer(blob, dtype="<f4")) for text, blob in session.execute(stmt)]


def list_latest_group_ids(session: Session, namespace: str, task_hash: str, limit: int) -> list[str]:
    """The rollout groups of a task with the most recently closed trajectories."""
    stmt = (
        select(Trajectory.group_id)
        .where(
            Trajectory.namespace == namespace,
            Trajectory.task_hash == task_hash,
            Trajectory.status == "closed",
            Trajectory.group_id.is_not(None),
        )
        .group_by(Trajectory.group_id)
        .order_by(func.max(Trajectory.closed_at).desc(), Trajectory.group_id)
        .limit(limit)
    )
    return [g for g in session.scalars(stmt) if g is not None]


def list_closed_in_groups(session: Session, namespace: str, task_hash: str, group_ids: list[str]) -> list[Trajectory]:
    if not group_ids:
        return []
    stmt = select(Trajectory).where(
        Trajectory.namespace == namespace,
        Trajectory.task_hash == task_hash,
        Trajectory.status == "closed",
        Trajectory.group_id.in_(group_ids),
    )
    return list(session.scalars(stmt.order_by(Trajectory.pk)))


def list_recent_closed_with_outcome(session: Session, namespace: str, task_hash: str, limit: int) -> list[Trajectory]:
    """The task's most recently closed trajectories whose success is known, newest first."""
    stmt = (
        select(Trajectory)
        .where(
            Trajectory.namespace == namespace,
            Trajectory.task_hash == task_hash,
            Trajectory.status == "closed",
            Trajectory.success.is_not(None),
        )
        .order_by(Trajectory.closed_at.desc(), Trajectory.pk.desc())
        .limit(limit)
    )
    return list(session.scalars(stmt))
