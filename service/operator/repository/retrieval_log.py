"""Reading the retrieval log: what was served for which state, with scores,
similarities and the outcome reported; per episode and per reflection."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import case, func, or_, select
from sqlalchemy.orm import Session

from service.operator.repository.timestamps import day_of
from store.models import (
    Reflection,
    Retrieval,
    RetrievalItem,
    RetrievalOutcome,
)


@dataclass
class ServedItem:
    rank: int
    score: float
    similarity: float
    reflection_id: str
    kind: str
    text: str
    credited: bool | None = None  # by the outcome; None: no outcome, or not recorded (before 0013)


@dataclass
class LoggedRetrieval:
    id: str
    query: dict
    trajectory_id: str | None
    created_at: datetime
    latency_ms: float | None
    context: str | None = None  # the rendered block as served (None: no render asked)
    step: int | None = None  # the step it served, when the agent named it
    success: bool | None = None
    reward: float | None = None
    has_outcome: bool = False
    named_items: list[str] | None = None  # the outcome's item_ids (None: it named none)
    items: list[ServedItem] = field(default_factory=list)


def _attach(session: Session, rows: Sequence[Retrieval]) -> list[LoggedRetrieval]:
    out = {
        r.id: LoggedRetrieval(r.id, r.query, r.trajectory_id, r.created_at, r.latency_ms, step=step_of(r.query))
        for r in rows
    }
    if not out:
        return []
    ids = list(out)
    i = RetrievalItem
    served = (
        select(
            i.retrieval_id, i.rank, i.score, i.similarity, Reflection.id, Reflection.kind, Reflection.text, i.credited
        )
        .join(Reflection, Reflection.pk == i.reflection_pk)
        .where(i.retrieval_id.in_(ids))
        .order_by(i.retrieval_id, i.rank)
    )
    for rid, rank, score, sim, ref_id, kind, text, credited in session.execute(served):
        out[rid].items.append(ServedItem(rank, score, sim, ref_id, kind, text, credited))
    o = RetrievalOutcome
    for rid, success, reward, named in session.execute(
        select(o.retrieval_id, o.success, o.reward, o.item_ids).where(o.retrieval_id.in_(ids))
    ):
        entry = out[rid]
        entry.has_outcome, entry.success, entry.reward, entry.named_items = True, success, reward, named
    return [out[r.id] for r in rows]


def list_logged_retrievals(
    session: Session,
    namespace: str,
    *,
    trajectory_id: str | None,
    before: tuple[datetime, str] | None,
    limit: int,
) -> list[LoggedRetrieval]:
    """Newest first, keyset-paged on (created_at, id)."""
    r = Retrieval
    stmt = select(r).where(r.namespace == namespace)
    if trajectory_id is not None:
        stmt = stmt.where(r.trajectory_id == trajectory_id)
    if before is not None:
        at, rid = before
        stmt = stmt.where(or_(r.created_at < at, (r.created_at == at) & (r.id < rid)))
    rows = list(session.scalars(stmt.order_by(r.created_at.desc(), r.id.desc()).limit(limit)))
    return _attach(session, rows)


def read_logged_retrieval(session: Session, namespace: str, id: str) -> LoggedRetrieval | None:
    """One retrieval with its items, outcome and rendered context (the lists leave
    the context out: it can be as long as the request's render budget)."""
    row = session.get(Retrieval, id)
    if row is None or row.namespace != namespace:
        return None
    entry = _attach(session, [row])[0]
    entry.context = row.context
    return entry


def list_episode_retrievals(session: Session, namespace: str, trajectory_id: str, limit: int) -> list[LoggedRetrieval]:
    """The retrievals made during one episode, in the order they were made."""
    r = Retrieval
    stmt = (
        select(r)
        .where(r.namespace == namespace, r.trajectory_id == trajectory_id)
        .order_by(r.created_at, r.id)
        .limit(limit)
    )
    return _attach(session, list(session.scalars(stmt)))


@dataclass(frozen=True)
class ServedDay:
    day: str
    served: int
    successes: int
    failures: int


def list_served_by_day(session: Session, reflection_pk: int) -> list[ServedDay]:
    """How often a reflection was served per day and the outcomes reported for those
    retrievals (an outcome naming other items still counts here: it was in context)."""
    i, r, o = RetrievalItem, Retrieval, RetrievalOutcome
    day = day_of(session, r.created_at)
    stmt = (
        select(
            day,
            func.count(),
            func.sum(case((o.success.is_(True), 1), else_=0)),
            func.sum(case((o.success.is_(False), 1), else_=0)),
        )
        .select_from(i)
        .join(r, r.id == i.retrieval_id)
        .outerjoin(o, o.retrieval_id == i.retrieval_id)
        .where(i.reflection_pk == reflection_pk)
        .group_by(day)
        .order_by(day)
    )
    return [ServedDay(d, n, int(s or 0), int(f or 0)) for d, n, s, f in session.execute(stmt)]


@dataclass(frozen=True)
class Serving:
    """One retrieval that served a reflection, with its outcome."""

    retrieval_id: str
    created_at: datetime
    trajectory_id: str | None
    step: int | None
    rank: int
    score: float
    has_outcome: bool
    success: bool | None
    reward: float | None


def list_servings(session: Session, reflection_pk: int, *, limit: int) -> list[Serving]:
    """The newest retrievals that served a reflection (newest rows of its index on
    retrieval_items: the log is append-only, so row order is time order)."""
    i, r, o = RetrievalItem, Retrieval, RetrievalOutcome
    stmt = (
        select(r.id, r.created_at, r.trajectory_id, r.query, i.rank, i.score, o.retrieval_id, o.success, o.reward)
        .select_from(i)
        .join(r, r.id == i.retrieval_id)
        .outerjoin(o, o.retrieval_id == i.retrieval_id)
        .where(i.reflection_pk == reflection_pk)
        .order_by(i.pk.desc())
        .limit(limit)
    )
    return [
        Serving(rid, at, traj, step_of(query), rank, score, reported is not None, success, reward)
        for rid, at, traj, query, rank, score, reported, success, reward in session.execute(stmt)
    ]


def step_of(query: dict[str, Any] | None) -> int | None:
    """The step a logged retrieval served, as the agent named it (None: not named)."""
    step = (query or {}).get("step")
    return step if isinstance(step, int) and not isinstance(step, bool) and step >= 0 else None
