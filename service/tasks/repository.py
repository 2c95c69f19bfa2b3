"""Curriculum statistics: per task (or per task and policy version), how often it
was attempted, how it went, and how much a group-relative learner (GRPO) can still
learn from it. One query over `trajectory_view`, so live and pinned reads share it.

The aggregation, bottom up:

    rows      one per trajectory of the view: its reward (`reward` when set, else
              1.0 / 0.0 from `success`, else none; open trajectories have none) and,
              by window, the mean reward of its task and of its rollout group
    buckets   GROUP BY (task_hash[, policy_version], group_id): counts, reward sums,
              squared deviations from the task mean and from the group mean
    tasks     GROUP BY (task_hash[, policy_version]): the statistics; a bucket whose
              group_id is null (ungrouped trajectories) counts as attempts but is
              no group

Variances are means of squared deviations from a mean computed first (two-pass),
not E[r²] − E[r]², which cancels catastrophically for rewards far from zero.

Paging is keyset over the aggregated subquery, in SQL: the order is the sort value
(nulls last in both directions), then task_hash, then policy_version (null as ''),
ascending; text compares bytewise on both engines (COLLATE "C" on PostgreSQL, the
default BINARY on SQLite), so both answer in the same order.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from sqlalchemy import BigInteger, Float, String, and_, case, cast, func, literal, null, or_, select
from sqlalchemy.orm import Session
from sqlalchemy.sql import ColumnElement

from store.snapshots import trajectory_view

TaskSort = Literal["learning_signal", "attempts", "success_rate", "reward_var", "last_seen", "task"]
NULLABLE_SORTS = frozenset({"learning_signal", "success_rate", "reward_var"})


@dataclass(frozen=True)
class TaskFilters:
    environment: str | None = None
    agent: str | None = None
    policy_version: str | None = None
    min_attempts: int | None = None
    task_hashes: tuple[str, ...] | None = None  # only these tasks


@dataclass(frozen=True)
class TaskPosition:
    """Where a page ended: the last row's sort value (None when it was null) and key."""

    value: Any
    task_hash: str
    policy_version: str | None = None


@dataclass(frozen=True)
class TaskStats:
    task_hash: str
    task: str
    policy_version: str | None
    attempts: int
    open: int
    successes: int
    failures: int
    rewarded: int
    success_rate: float | None
    reward_mean: float | None
    reward_var: float | None
    groups: int
    mixed_groups: int
    signal_groups: int
    learning_signal: float | None
    last_seen: datetime

    def sort_value(self, sort: TaskSort) -> Any:
        return getattr(self, sort)


def _bytewise(session: Session, column: Any) -> Any:
    """Text compared byte by byte: SQLite's default; PostgreSQL's database collation
    (often a locale) would order differently."""
    return column.collate("C") if session.get_bind().dialect.name == "postgresql" else column


def _as_float(expr: Any) -> Any:
    return cast(expr, Float)


def _count_where(condition: ColumnElement[bool]) -> Any:
    return func.sum(case((condition, 1), else_=0))


def _total(column: Any) -> Any:
    # SUM of a bigint sum is numeric on PostgreSQL: keep counts integers.
    return cast(func.sum(column), BigInteger)


def list_task_stats(
    session: Session,
    namespace: str,
    *,
    snapshot_pk: int | None,
    by_policy: bool,
    filters: TaskFilters,
    sort: TaskSort,
    descending: bool,
    after: TaskPosition | None,
    limit: int,
) -> list[TaskStats]:
    """Up to `limit` tasks in the sort order, those after `after` when given."""
    tv = trajectory_view(namespace, snapshot_pk)

    # -- rows: one per trajectory, with its reward and the means it deviates from
    closed = tv.c.status == "closed"
    reward = case(
        (and_(closed, tv.c.reward.is_not(None)), tv.c.reward),
        (and_(closed, tv.c.success.is_(True)), literal(1.0, Float)),
        (and_(closed, tv.c.success.is_(False)), literal(0.0, Float)),
        else_=None,
    )
    seen = case((tv.c.closed_at > tv.c.created_at, tv.c.closed_at), else_=tv.c.created_at)
    outcomes_stmt = select(
        tv.c.task_hash,
        tv.c.policy_version,
        tv.c.group_id,
        tv.c.task,
        tv.c.status,
        tv.c.success,
        reward.label("r"),
        seen.label("seen"),
    )
    if filters.environment is not None:
        outcomes_stmt = outcomes_stmt.where(tv.c.environment == filters.environment)
    if filters.agent is not None:
        outcomes_stmt = outcomes_stmt.where(tv.c.agent == filters.agent)
    if filters.policy_version is not None:
        outcomes_stmt = outcomes_stmt.where(tv.c.policy_version == filters.policy_version)
    if filters.task_hashes is not None:
        outcomes_stmt = outcomes_stmt.where(tv.c.task_hash.in_(sorted(set(filters.task_hashes))))
    outcomes = outcomes_stmt.subquery("task_outcomes")
    o = outcomes.c
    task_key = [o.task_hash, *([o.policy_version] if by_policy else [])]
    rows = select(
        outcomes,
        func.avg(o.r).over(partition_by=task_key).label("task_mean"),
        func.avg(o.r).over(partition_by=[*task_key, o.group_id]).label("group_mean"),
    ).subquery("task_rows")

    # -- buckets: per (task[, policy_version], group_id)
    b_closed = rows.c.status == "closed"
    b_key = [rows.c.task_hash, *([rows.c.policy_version] if by_policy else [])]
    buckets = (
        select(
            *b_key,
            rows.c.group_id,
            func.min(rows.c.task).label("task"),
            _count_where(b_closed).label("attempts"),
            _count_where(rows.c.status == "open").label("open"),
            _count_where(and_(b_closed, rows.c.success.is_(True))).label("successes"),
            _count_where(and_(b_closed, rows.c.success.is_(False))).label("failures"),
            func.count(rows.c.r).label("rewarded"),
            func.sum(rows.c.r).label("reward_sum"),
            func.sum((rows.c.r - rows.c.task_mean) * (rows.c.r - rows.c.task_mean)).label("task_dev"),
            func.sum((rows.c.r - rows.c.group_mean) * (rows.c.r - rows.c.group_mean)).label("group_dev"),
            func.max(rows.c.seen).label("last_seen"),
        )
        .group_by(*b_key, rows.c.group_id)
        .subquery("task_buckets")
    )

    # -- tasks
    g = buckets.c
    grouped = g.group_id.is_not(None)
    signal = and_(grouped, g.rewarded >= 2)
    judged = func.sum(g.successes) + func.sum(g.failures)
    rewarded = func.sum(g.rewarded)
    t_key = [g.task_hash, *([g.policy_version] if by_policy else [])]
    tasks = (
        select(
            g.task_hash,
            (g.policy_version if by_policy else cast(null(), String)).label("policy_version"),
            func.min(g.task).label("task"),
            _total(g.attempts).label("attempts"),
            _total(g.open).label("open"),
            _total(g.successes).label("successes"),
            _total(g.failures).label("failures"),
            _total(g.rewarded).label("rewarded"),
            case((judged > 0, _as_float(func.sum(g.successes)) / _as_float(judged)), else_=None).label("success_rate"),
            case((rewarded > 0, _as_float(func.sum(g.reward_sum)) / _as_float(rewarded)), else_=None).label(
                "reward_mean"
            ),
            case((rewarded > 0, _as_float(func.sum(g.task_dev)) / _as_float(rewarded)), else_=None).label("reward_var"),
            _total(case((grouped, 1), else_=0)).label("groups"),
            _total(case((and_(grouped, g.successes > 0, g.failures > 0), 1), else_=0)).label("mixed_groups"),
            _total(case((signal, 1), else_=0)).label("signal_groups"),
            func.avg(case((signal, _as_float(g.group_dev) / _as_float(g.rewarded)), else_=None)).label(
                "learning_signal"
            ),
            func.max(g.last_seen).label("last_seen"),
        )
        .group_by(*t_key)
        .subquery("task_stats")
    )

    # -- the page: filter on aggregates, keyset, order
    c = tasks.c
    value = _bytewise(session, c.task) if sort == "task" else c[sort]
    tie_hash = _bytewise(session, c.task_hash)
    tie_policy = _bytewise(session, func.coalesce(c.policy_version, ""))
    stmt = select(tasks)
    if filters.min_attempts is not None:
        stmt = stmt.where(c.attempts >= filters.min_attempts)
    if after is not None:
        stmt = stmt.where(_after(value, tie_hash, tie_policy, after, by_policy=by_policy, descending=descending))
    stmt = stmt.order_by(
        case((c[sort].is_(None), 1), else_=0),
        value.desc() if descending else value.asc(),
        tie_hash.asc(),
        *([tie_policy.asc()] if by_policy else []),
    ).limit(limit)
    return [TaskStats(**row._asdict()) for row in session.execute(stmt)]


def _after(
    value: Any, tie_hash: Any, tie_policy: Any, pos: TaskPosition, *, by_policy: bool, descending: bool
) -> ColumnElement[bool]:
    """Rows that come after `pos` in the order of list_task_stats."""
    later_key = tie_hash > pos.task_hash
    if by_policy:
        later_key = or_(later_key, and_(tie_hash == pos.task_hash, tie_policy > (pos.policy_version or "")))
    if pos.value is None:  # in the null tail: only the nulls with a later key
        return and_(value.is_(None), later_key)
    beyond = value < pos.value if descending else value > pos.value
    return or_(beyond, and_(value == pos.value, later_key), value.is_(None))
