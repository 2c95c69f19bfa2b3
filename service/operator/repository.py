"""The operator's reads (service/operator): the namespace overview's aggregates,
the review queue and the retrieval log.

Aggregates for the operator's namespace overview: trajectories and success per
day, reflections by kind and status, the queue by kind, retrieval volume and
latency. Each is one grouped query over an index led by the namespace.

The operator's review queue: candidates awaiting approval and active items whose
posterior utility fell below the namespace baseline, ordered by impact.

Impact (docs/ui.md): a candidate's is the evidence it stands on plus its uses
(what approving it would put in front of agents); an underperformer's is
uses * (baseline - mean), the successes it is estimated to have cost. An operator's
"keep" records `reviewed_uses`; the item returns only after `renew_after` more uses.

Reading the retrieval log: what was served for which state, with scores,
similarities and the outcome reported; per episode and per reflection.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import case, func, or_, select
from sqlalchemy.orm import Session
from sqlalchemy.sql.elements import ColumnElement

from store.models import Job, Reflection, Retrieval, RetrievalItem, RetrievalOutcome, Trajectory, utcnow
from store.reflections import utility_mean

# --- overview ---


def day_of(session: Session, column: ColumnElement[datetime]) -> ColumnElement[str]:
    """'YYYY-MM-DD' (UTC) of a timestamp column, on either engine. SQLite keeps the
    UTC text SQLAlchemy wrote; PostgreSQL converts the timestamptz to UTC first."""
    if session.get_bind().dialect.name == "postgresql":
        return func.to_char(func.timezone("UTC", column), "YYYY-MM-DD")
    return func.substr(column, 1, 10)


def _as_utc(value: datetime | str | None) -> datetime | None:
    """SQLite's MIN()/MAX() bypass the column type and return text."""
    if value is None:
        return None
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value


@dataclass(frozen=True)
class DayCount:
    day: str
    total: int
    successes: int  # trajectories: closed with success; retrievals: 0
    mean_latency_ms: float | None = None


def list_trajectories_by_day(session: Session, namespace: str, since: datetime) -> list[DayCount]:
    day = day_of(session, Trajectory.created_at)
    stmt = (
        select(day, func.count(), func.sum(case((Trajectory.success.is_(True), 1), else_=0)))
        .where(Trajectory.namespace == namespace, Trajectory.created_at >= since)
        .group_by(day)
        .order_by(day)
    )
    return [DayCount(d, n, int(s or 0)) for d, n, s in session.execute(stmt)]


def list_retrievals_by_day(session: Session, namespace: str, since: datetime) -> list[DayCount]:
    day = day_of(session, Retrieval.created_at)
    stmt = (
        select(day, func.count(), func.avg(Retrieval.latency_ms))
        .where(Retrieval.namespace == namespace, Retrieval.created_at >= since)
        .group_by(day)
        .order_by(day)
    )
    return [DayCount(d, n, 0, float(m) if m is not None else None) for d, n, m in session.execute(stmt)]


def list_recent_latencies(session: Session, namespace: str, limit: int) -> list[float]:
    """The server times of the namespace's newest `limit` retrievals (for p50/p95)."""
    stmt = (
        select(Retrieval.latency_ms)
        .where(Retrieval.namespace == namespace, Retrieval.latency_ms.is_not(None))
        .order_by(Retrieval.created_at.desc())
        .limit(limit)
    )
    return [float(v) for v in session.scalars(stmt)]


def count_reflections_by_kind_status(session: Session, namespace: str) -> dict[tuple[str, str], int]:
    stmt = (
        select(Reflection.kind, Reflection.status, func.count())
        .where(Reflection.namespace == namespace)
        .group_by(Reflection.kind, Reflection.status)
    )
    return {(k, s): n for k, s, n in session.execute(stmt)}


@dataclass(frozen=True)
class QueueRow:
    kind: str
    queued: int
    running: int
    failed: int
    oldest_queued_seconds: float | None  # how long the longest-waiting runnable job has waited


def list_queue_by_kind(session: Session, namespace: str) -> list[QueueRow]:
    """Per job kind: queued, running and failed counts and the age of the oldest
    runnable queued job (done jobs are not counted: the index leads with status)."""
    now = utcnow()
    runnable = (Job.status == "queued") & (Job.run_after <= now)
    stmt = (
        select(
            Job.kind,
            func.sum(case((Job.status == "queued", 1), else_=0)),
            func.sum(case((Job.status == "running", 1), else_=0)),
            func.sum(case((Job.status == "failed", 1), else_=0)),
            func.min(case((runnable, Job.run_after), else_=None)),
        )
        .where(Job.namespace == namespace, Job.status.in_(("queued", "running", "failed")))
        .group_by(Job.kind)
        .order_by(Job.kind)
    )
    out = []
    for kind, queued, running, failed, oldest in session.execute(stmt):
        at = _as_utc(oldest)
        out.append(
            QueueRow(
                kind,
                int(queued or 0),
                int(running or 0),
                int(failed or 0),
                max(0.0, (now - at).total_seconds()) if at is not None else None,
            )
        )
    return out


# --- review ---


@dataclass(frozen=True)
class ReviewRule:
    baseline: float
    prior_strength: float
    min_uses: int  # an active item is judged only after this many uses
    renew_after: int  # uses after a "keep" before it is shown again


def _terms(rule: ReviewRule) -> tuple[Any, Any, Any]:
    r = Reflection
    mean = utility_mean(rule.baseline, rule.prior_strength)
    candidate = r.status == "candidate"
    below = (
        (r.status == "active")
        & (r.uses >= rule.min_uses)
        & (mean < rule.baseline)
        & (r.reviewed_uses.is_(None) | (r.uses >= r.reviewed_uses + rule.renew_after))
    )
    impact = case((candidate, 1.0 * (r.evidence_count + r.uses)), else_=r.uses * (rule.baseline - mean))
    return candidate, below, impact


@dataclass(frozen=True)
class ReviewEntry:
    reflection: Reflection
    reason: str  # "candidate" | "below_baseline"
    impact: float


def list_review_queue(
    session: Session, namespace: str, rule: ReviewRule, *, before: tuple[float, int] | None, limit: int
) -> list[ReviewEntry]:
    candidate, below, impact = _terms(rule)
    r = Reflection
    stmt = select(r, impact.label("impact")).where(r.namespace == namespace, or_(candidate, below))
    if before is not None:
        at, pk = before
        stmt = stmt.where(or_(impact < at, (impact == at) & (r.pk < pk)))
    stmt = stmt.order_by(impact.desc(), r.pk.desc()).limit(limit)
    return [
        ReviewEntry(row, "candidate" if row.status == "candidate" else "below_baseline", float(value))
        for row, value in session.execute(stmt)
    ]


def count_review_queue(session: Session, namespace: str, rule: ReviewRule) -> int:
    candidate, below, _ = _terms(rule)
    r = Reflection
    stmt = select(func.count()).select_from(r).where(r.namespace == namespace, or_(candidate, below))
    return int(session.scalar(stmt) or 0)


# --- retrieval log ---


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
    success: bool | None = None
    reward: float | None = None
    has_outcome: bool = False
    named_items: list[str] | None = None  # the outcome's item_ids (None: it named none)
    items: list[ServedItem] = field(default_factory=list)


def _attach(session: Session, rows: Sequence[Retrieval]) -> list[LoggedRetrieval]:
    out = {r.id: LoggedRetrieval(r.id, r.query, r.trajectory_id, r.created_at, r.latency_ms) for r in rows}
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
