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

from sqlalchemy import case, false, func, literal, or_, select
from sqlalchemy.orm import Session
from sqlalchemy.sql.elements import ColumnElement

from store.models import (
    Job,
    Reflection,
    ReflectionEvidence,
    ReflectionServed,
    Retrieval,
    RetrievalItem,
    RetrievalOutcome,
    Step,
    Trajectory,
    utcnow,
)
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
    # Active items whose holdout interval lies below zero (service/retrieval/holdout.py),
    # each with the successes it is estimated to have cost: (pk, impact).
    harmful: tuple[tuple[int, float], ...] = ()


# Why an item is in the queue. The one list of reasons: each has its condition and
# its impact in `_reasons`; the service's checks and the UI's tabs follow this tuple.
REASONS: tuple[str, ...] = ("candidate", "below_baseline", "negative_effect")


def _reasons(rule: ReviewRule) -> dict[str, tuple[ColumnElement[bool], ColumnElement[float]]]:
    """reason -> (condition, impact); in the whole queue an item is shown for the
    first reason that holds (they may overlap)."""
    r = Reflection
    mean = utility_mean(rule.baseline, rule.prior_strength)
    candidate = r.status == "candidate"
    unreviewed = r.reviewed_uses.is_(None) | (r.uses >= r.reviewed_uses + rule.renew_after)
    below = (r.status == "active") & (r.uses >= rule.min_uses) & (mean < rule.baseline) & unreviewed
    harmful: tuple[ColumnElement[bool], ColumnElement[float]] = (false(), literal(0.0))
    if rule.harmful:
        costs = dict(rule.harmful)
        harmful = (
            (r.status == "active") & r.pk.in_(list(costs)) & unreviewed,
            case(costs, value=r.pk, else_=0.0),
        )
    return {
        "candidate": (candidate, 1.0 * (r.evidence_count + r.uses)),
        "below_baseline": (below, r.uses * (rule.baseline - mean)),
        "negative_effect": harmful,
    }


@dataclass(frozen=True)
class ReviewFilters:
    reason: str | None = None  # one of REASONS
    kind: str | None = None
    reflector: str | None = None


def _queue(rule: ReviewRule, f: ReviewFilters) -> tuple[Any, Any, list[ColumnElement[bool]]]:
    """(reason, impact, where-clauses) of the queue under the filters."""
    terms = _reasons(rule)
    if f.reason is not None:  # under a reason's tab an item is there for that reason
        terms = {f.reason: terms[f.reason]}
    reason = case(*((cond, literal(name)) for name, (cond, _) in terms.items()), else_=None)
    impact = case(*((cond, value) for cond, value in terms.values()), else_=None)
    where = [or_(*(cond for cond, _ in terms.values()))]
    if f.kind is not None:
        where.append(Reflection.kind == f.kind)
    if f.reflector is not None:
        where.append(Reflection.reflector == f.reflector)
    return reason, impact, where


@dataclass(frozen=True)
class ReviewEntry:
    reflection: Reflection
    reason: str  # one of REASONS
    impact: float


def list_review_queue(
    session: Session,
    namespace: str,
    rule: ReviewRule,
    *,
    filters: ReviewFilters | None = None,
    before: tuple[float, int] | None,
    limit: int,
) -> list[ReviewEntry]:
    reason, impact, where = _queue(rule, filters or ReviewFilters())
    r = Reflection
    stmt = select(r, reason.label("reason"), impact.label("impact")).where(r.namespace == namespace, *where)
    if before is not None:
        at, pk = before
        stmt = stmt.where(or_(impact < at, (impact == at) & (r.pk < pk)))
    stmt = stmt.order_by(impact.desc(), r.pk.desc()).limit(limit)
    return [ReviewEntry(row, why, float(value)) for row, why, value in session.execute(stmt)]


@dataclass(frozen=True)
class QueueCount:
    reason: str
    kind: str
    reflector: str
    count: int


def count_review_queue(session: Session, namespace: str, rule: ReviewRule) -> int:
    _, _, where = _queue(rule, ReviewFilters())
    stmt = select(func.count()).select_from(Reflection).where(Reflection.namespace == namespace, *where)
    return int(session.scalar(stmt) or 0)


def list_review_counts(session: Session, namespace: str, rule: ReviewRule) -> list[QueueCount]:
    """The whole queue counted by reason, kind and reflector (the tabs' and filters'
    counts from one grouped scan)."""
    reason, _, where = _queue(rule, ReviewFilters())
    r = Reflection
    stmt = (
        select(reason, r.kind, r.reflector, func.count())
        .where(r.namespace == namespace, *where)
        .group_by(reason, r.kind, r.reflector)
    )
    return [QueueCount(why, kind, reflector, int(n)) for why, kind, reflector, n in session.execute(stmt)]


@dataclass
class CitedStep:
    index: int
    observation: str  # the first EXCERPT_CHARS characters
    action: Any
    result: str | None  # the first EXCERPT_CHARS characters


@dataclass
class Citation:
    trajectory_id: str
    step_start: int | None
    step_end: int | None
    success: bool | None
    steps: list[CitedStep] = field(default_factory=list)


EXCERPT_CHARS = 400


def list_citations(
    session: Session, reflection_pks: Sequence[int], *, per_item: int, steps_per_citation: int
) -> dict[int, list[Citation]]:
    """Each reflection's newest `per_item` evidence rows with the cited steps (the
    first `steps_per_citation` of each range): what the review queue shows inline."""
    out: dict[int, list[Citation]] = {pk: [] for pk in reflection_pks}
    if not reflection_pks:
        return out
    e = ReflectionEvidence
    nth = func.row_number().over(partition_by=e.reflection_pk, order_by=e.pk.desc()).label("nth")
    ranked = select(e.reflection_pk, e.trajectory_pk, e.step_start, e.step_end, e.success, nth).where(
        e.reflection_pk.in_(list(reflection_pks))
    )
    sub = ranked.subquery()
    rows = session.execute(
        select(sub.c.reflection_pk, sub.c.trajectory_pk, Trajectory.id, sub.c.step_start, sub.c.step_end, sub.c.success)
        .join(Trajectory, Trajectory.pk == sub.c.trajectory_pk)
        .where(sub.c.nth <= per_item)
        .order_by(sub.c.reflection_pk, sub.c.nth)
    ).all()
    wanted: dict[tuple[int, int], list[Citation]] = {}
    ranges = []
    for ref_pk, traj_pk, traj_id, start, end, success in rows:
        citation = Citation(traj_id, start, end, success)
        out[ref_pk].append(citation)
        if start is None:
            continue
        last = min(end if end is not None else start, start + steps_per_citation - 1)
        ranges.append((traj_pk, start, last))
        for index in range(start, last + 1):
            wanted.setdefault((traj_pk, index), []).append(citation)
    if ranges:
        s = Step
        stmt = select(
            s.trajectory_pk,
            s.index,
            func.substr(s.observation, 1, EXCERPT_CHARS),
            s.action,
            func.substr(s.result, 1, EXCERPT_CHARS),
        ).where(or_(*((s.trajectory_pk == t) & s.index.between(a, b) for t, a, b in set(ranges))))
        for traj_pk, index, observation, action, result in session.execute(stmt.order_by(s.trajectory_pk, s.index)):
            for citation in wanted.get((traj_pk, index), []):
                citation.steps.append(CitedStep(index, observation, action, result))
    return out


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


# --- learning over time ---


@dataclass(frozen=True)
class EpisodeGroup:
    """Closed episodes of one block (in completion order) or one policy version."""

    label: str
    episodes: int
    with_outcome: int  # success known (true or false)
    successes: int
    with_reward: int
    mean_reward: float | None
    first_closed: datetime | None
    last_closed: datetime | None

    @property
    def success_rate(self) -> float | None:
        return self.successes / self.with_outcome if self.with_outcome else None


def _completed(t: type[Trajectory] = Trajectory) -> ColumnElement[datetime]:
    # A closed episode carries closed_at; rows closed before that column fall back to creation.
    return func.coalesce(t.closed_at, t.created_at)


def _group_columns(success: Any, reward: Any, completed: Any) -> list[Any]:
    return [
        func.count(),
        func.count(success),
        func.sum(case((success.is_(True), 1), else_=0)),
        func.count(reward),
        func.avg(reward),
        func.min(completed),
        func.max(completed),
    ]


def _group(label: str, n: int, known: int, s: Any, nr: int, mr: Any, first: Any, last: Any) -> EpisodeGroup:
    return EpisodeGroup(
        label,
        int(n),
        int(known),
        int(s or 0),
        int(nr),
        None if mr is None else float(mr),
        _as_utc(first),
        _as_utc(last),
    )


def count_closed_episodes(session: Session, namespace: str) -> int:
    t = Trajectory
    return int(session.scalar(select(func.count()).where(t.namespace == namespace, t.status == "closed")) or 0)


def list_episode_blocks(session: Session, namespace: str, size: int) -> list[EpisodeGroup]:
    """Closed episodes in completion order, cut into consecutive blocks of `size`
    (the last may be shorter); per block its counts and mean reward."""
    t = Trajectory
    position = func.row_number().over(order_by=(_completed(), t.pk)) - 1
    ranked = (
        select(position.label("i"), t.success, t.reward, _completed().label("done"))
        .where(t.namespace == namespace, t.status == "closed")
        .subquery()
    )
    block = (ranked.c.i // size).label("block")  # integer division on both engines
    stmt = (
        select(block, *_group_columns(ranked.c.success, ranked.c.reward, ranked.c.done)).group_by(block).order_by(block)
    )
    out = []
    for b, *rest in session.execute(stmt):
        start, end = int(b) * size + 1, int(b) * size + int(rest[0])
        out.append(_group(f"{start}–{end}" if end > start else str(start), *rest))
    return out


def list_policy_versions(session: Session, namespace: str, limit: int) -> list[EpisodeGroup]:
    """Closed episodes per policy version (none: "—"), the `limit` versions first
    seen last, in the order they were first seen."""
    t = Trajectory
    first = func.min(_completed())
    stmt = (
        select(t.policy_version, *_group_columns(t.success, t.reward, _completed()))
        .where(t.namespace == namespace, t.status == "closed")
        .group_by(t.policy_version)
        .order_by(first.desc())
        .limit(limit)
    )
    return [_group(v if v is not None else "—", *rest) for v, *rest in reversed(list(session.execute(stmt)))]


@dataclass(frozen=True)
class ReflectorRow:
    reflector: str
    total: int
    active: int
    served_items: int  # items served at least once
    served: int  # times its items were served
    credited_items: int  # items with at least one credited use
    mean_utility: float | None  # posterior mean over its credited items

    @property
    def activation_rate(self) -> float | None:
        return self.served_items / self.total if self.total else None


def list_reflector_stats(
    session: Session, namespace: str, baseline: float, prior_strength: float
) -> list[ReflectorRow]:
    """Per reflector name: its items, how many are active, how many were ever served
    and how often, and the mean posterior utility of those credited at least once."""
    r, served = Reflection, ReflectionServed  # the log's count per reflection, kept by its writes
    credited = r.successes + r.failures > 0
    stmt = (
        select(
            r.reflector,
            func.count(),
            func.sum(case((r.status == "active", 1), else_=0)),
            func.count(served.reflection_pk),
            func.coalesce(func.sum(served.served), 0),
            func.sum(case((credited, 1), else_=0)),
            func.avg(case((credited, utility_mean(baseline, prior_strength)), else_=None)),
        )
        .select_from(r)
        .outerjoin(served, served.reflection_pk == r.pk)
        .where(r.namespace == namespace)
        .group_by(r.reflector)
        .order_by(r.reflector)
    )
    return [
        ReflectorRow(name, int(n), int(a or 0), int(si), int(sv), int(c or 0), None if m is None else float(m))
        for name, n, a, si, sv, c, m in session.execute(stmt)
    ]


@dataclass(frozen=True)
class CreditedOutcome:
    at: datetime
    retrieval_id: str
    success: bool | None


def list_credited_outcomes(
    session: Session, reflection_pk: int, reflection_id: str, max_rank: int | None
) -> list[CreditedOutcome]:
    """The outcomes that credited a reflection, oldest first. Since migration 0015 the
    log records whether each served item was credited (`retrieval_items.credited`,
    frozen namespaces included); for older rows the rule store.retrievals.create_outcome
    credits by is applied again: naming it among `item_ids`, or naming none with the
    item served above `max_rank` (today's). Older outcomes recorded while the namespace
    was frozen credited nothing, yet cannot be told apart; they are counted."""
    i, o = RetrievalItem, RetrievalOutcome
    stmt = (
        select(o.created_at, o.retrieval_id, o.success, o.item_ids, i.rank, i.credited)
        .select_from(i)
        .join(o, o.retrieval_id == i.retrieval_id)
        .where(i.reflection_pk == reflection_pk)
        .order_by(o.created_at, o.retrieval_id)
    )
    out = []
    for at, rid, success, item_ids, rank, credited in session.execute(stmt):
        if credited is None:  # logged before the flag existed
            named = item_ids is not None
            credited = (named and reflection_id in item_ids) or (not named and (max_rank is None or rank < max_rank))
        if credited:
            out.append(CreditedOutcome(at, rid, success))
    return out
