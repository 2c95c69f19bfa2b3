"""The operator's review queue: candidates awaiting approval, active items whose
posterior utility fell below the namespace baseline, and items whose causal effect
is negative, ordered by impact; and the steps each item cites.

Impact (docs/ui.md): a candidate's is the evidence it stands on plus its uses
(what approving it would put in front of agents); an underperformer's is
uses * (baseline - mean), the successes it is estimated to have cost. An operator's
"keep" records `reviewed_uses`; the item returns only after `renew_after` more uses."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import case, false, func, literal, or_, select
from sqlalchemy.orm import Session
from sqlalchemy.sql.elements import ColumnElement

from store.models import (
    Reflection,
    ReflectionEvidence,
    Step,
    Trajectory,
)
from store.reflections import utility_mean


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
