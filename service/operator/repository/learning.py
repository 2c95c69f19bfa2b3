"""Learning over time: closed episodes per block and per policy version, numbers
per reflector, and the outcomes that credited one reflection."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import case, func, select
from sqlalchemy.orm import Session
from sqlalchemy.sql.elements import ColumnElement

from service.operator.repository.timestamps import as_utc
from store.models import (
    Reflection,
    ReflectionServed,
    RetrievalItem,
    RetrievalOutcome,
    Trajectory,
)
from store.reflections import utility_mean


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
        as_utc(first),
        as_utc(last),
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
