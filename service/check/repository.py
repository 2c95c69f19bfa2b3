"""The check's own reads: the evidence rows (steps) behind the exemplars of one
action, and the active heuristics that may name an action."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Text, and_, case, cast, func, or_, select
from sqlalchemy.orm import Session

from store.models import Reflection, ReflectionEvidence, Step, Trajectory

STREAM_BATCH = 64  # heuristics read per fetch


@dataclass(frozen=True)
class EvidenceStep:
    trajectory_id: str
    step_index: int | None
    success: bool | None
    result: str | None
    error: str | None


def list_evidence_steps(session: Session, ns: str, exemplar_id: str, limit: int) -> list[EvidenceStep]:
    """One exemplar's source steps, failures first, then successes, then the uncredited;
    then by trajectory id and step index. At most `limit`."""
    e = ReflectionEvidence
    credit_order = case((e.success.is_(False), 0), (e.success.is_(True), 1), else_=2)
    stmt = (
        select(Trajectory.id, e.step_start, e.success, Step.result, Step.error)
        .select_from(e)
        .join(Reflection, Reflection.pk == e.reflection_pk)
        .join(Trajectory, Trajectory.pk == e.trajectory_pk)
        .outerjoin(Step, and_(Step.trajectory_pk == e.trajectory_pk, Step.index == e.step_start))
        .where(Reflection.namespace == ns, Reflection.id == exemplar_id, Reflection.kind == "exemplar")
        .order_by(credit_order, Trajectory.id, e.step_start, e.pk)
        .limit(limit)
    )
    return [EvidenceStep(*row) for row in session.execute(stmt)]


def iter_active_heuristics(
    session: Session, ns: str, *, contains: str | None, environment: str | None
) -> Iterator[tuple[str, dict[str, Any], str]]:
    """(id, content, text) of the namespace's active heuristics, oldest first (the
    order of the index on namespace, kind, status and pk: by id, the engine walked
    every reflection of the namespace), streamed in batches: the caller stops at the
    few it keeps instead of loading every heuristic that holds a common word. `contains`
    (lower-case ASCII letters and digits only) keeps those whose stored content has
    it anywhere, any case: a pre-filter; the caller decides what names an action.
    `environment`: only heuristics of that environment or of none."""
    r = Reflection
    stmt = select(r.id, r.content, r.text).where(r.namespace == ns, r.kind == "heuristic", r.status == "active")
    if contains is not None:
        stmt = stmt.where(func.lower(cast(r.content, Text)).contains(contains, autoescape=True))
    if environment is not None:
        stmt = stmt.where(or_(r.environment == environment, r.environment.is_(None)))
    yield from session.execute(stmt.order_by(r.pk), execution_options={"yield_per": STREAM_BATCH}).tuples()
