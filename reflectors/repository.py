"""What reflectors read to do their work: an environment's exemplars with their
state vectors, an LLM pool with its vectors, what a reflector already wrote."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from sqlalchemy import ColumnElement, select
from sqlalchemy.orm import Session

from store.models import Embedding, LexicalText, Reflection, ReflectionEvidence

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
