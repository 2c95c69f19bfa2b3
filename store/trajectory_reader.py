"""One reader of trajectories and their steps, live or as a snapshot pinned them:
a `TrajectoryFilter` says which trajectories, a column set says what of them (the
shape of Prefect's `read_flow_runs` with its filter schemas). Teacher contexts,
rubric scoring, dataset exports, the API's trajectory reads and the reflectors
read through it; each names the columns it needs as a record dataclass.

Reads go through store.snapshots' views: `trajectory_view` (a snapshot's outcome
and step count, or the live ones) and `steps_of(view)` (only the steps that existed
then), so one statement serves live and pinned reads. Statements are built once per
shape and run with new parameters (ids, pks, keyset bounds): building one is most
of a small read's cost, and a new statement per batch left reference cycles that
outgrew the batch itself in a large export (tests/service/export/test_export.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache
from typing import Any, TypeVar

from sqlalchemy import Select, bindparam, or_, select
from sqlalchemy.engine import RowMapping
from sqlalchemy.orm import Session
from sqlalchemy.sql.elements import ColumnElement

from store.models import Step, Trajectory
from store.records import record_columns, record_from
from store.snapshots import LIVE_TRAJECTORY_COLUMNS, TRAJECTORY_VIEW_COLUMNS, steps_of, trajectory_view

# What the inference engine reported for a step's action tokens: per-token arrays,
# the heavy part of a step. Read where they are shown (GET of a trajectory, the
# `trajectories` export); reads that build prompts name their columns without them.
ROLLOUT_FIELDS: tuple[str, ...] = ("rollout_logprobs", "rollout_token_ids")


@dataclass(frozen=True)
class StepContent:
    """What a prompt or a context shows of a step, by its stored names
    (`observation` and `state_data` are the API's `state.observation` and
    `state.data`)."""

    index: int
    observation: str
    state_data: Any
    internal_state: str | None
    action: Any
    result: str | None
    error: str | None
    reward: float | None
    done: bool
    truncated: bool
    caused_failure: bool


@dataclass(frozen=True)
class StoredStep(StepContent):
    """A step as stored, every field (`metadata` is the column the ORM calls
    `metadata_`): what the API shows and reflectors read. Its fields between `index`
    and `created_at` are STEP_FIELDS, in the order shown."""

    policy_version: str | None  # the step's own (null: the trajectory's applies)
    rollout_logprobs: list[float] | None
    rollout_token_ids: list[int] | None
    metadata: dict[str, Any] | None
    created_at: datetime


# A step's content fields, written once (StoredStep's): ingest stores them, prompts
# and read models show them.
STEP_FIELDS: tuple[str, ...] = record_columns(StoredStep)[1:-1]
assert set(ROLLOUT_FIELDS) <= set(STEP_FIELDS)
STEP_COLUMNS: tuple[str, ...] = ("trajectory_pk", "index", *STEP_FIELDS)


@dataclass(frozen=True)
class StoredTrajectory:
    """A live trajectory as the API shows it: the view's columns and the live-only
    ones (LIVE_TRAJECTORY_COLUMNS), `pk` for keyset pages."""

    pk: int
    namespace: str
    id: str
    task: str
    environment: str | None
    agent: str | None
    policy_version: str | None
    group_id: str | None
    parent_trajectory_id: str | None
    attempt: int | None
    metadata: dict[str, Any] | None
    retrieval_ids: list[str] | None
    status: str
    success: bool | None
    reward: float | None
    failure_reason: str | None
    outcome_details: dict[str, Any] | None
    step_count: int
    created_at: datetime
    updated_at: datetime
    closed_at: datetime | None


def stored_trajectory(row: Trajectory) -> StoredTrajectory:
    """A trajectory the write path holds (an ORM row) as the record reads return."""
    return record_from(StoredTrajectory, row, metadata=row.metadata_)


# Every column of a trajectory view but the namespace (which the caller named).
TRAJECTORY_FIELDS: tuple[str, ...] = tuple(c for c in TRAJECTORY_VIEW_COLUMNS if c != "namespace")
# Most values in one IN (…) list: well under SQLite's and PostgreSQL's bind limits.
MAX_IN = 500

T = TypeVar("T")


@dataclass(frozen=True)
class TrajectoryFilter:
    """Which trajectories a read returns; every field given must match."""

    environment: str | None = None
    agent: str | None = None
    policy_version: str | None = None
    group_id: str | None = None
    group_ids: tuple[str, ...] | None = None  # any of these rollout groups
    task: str | None = None
    task_hash: str | None = None  # with `task` (the index leads by it); alone, every task of that hash
    task_contains: str | None = None  # a case-insensitive substring of the task (no index: a scan)
    success: bool | None = None
    status: str | None = None
    created_after: datetime | None = None
    created_before: datetime | None = None
    with_outcome: bool = False  # success is known (true or false)
    with_parent: bool = False  # names parent_trajectory_id (a retry)
    exclude_ids: tuple[str, ...] = ()
    exclude_group_ids: tuple[str, ...] = ()  # trajectories without a group always pass

    def clauses(self, c: Mapping[str, Any]) -> list[ColumnElement[bool]]:
        """The WHERE clauses over columns named as in a trajectory view (a view's
        `.c`, or the trajectories table's)."""
        out: list[ColumnElement[bool]] = [
            c[name] == value
            for name, value in (
                ("environment", self.environment),
                ("agent", self.agent),
                ("policy_version", self.policy_version),
                ("group_id", self.group_id),
                ("task_hash", self.task_hash),
                ("task", self.task),
                ("success", self.success),
                ("status", self.status),
            )
            if value is not None
        ]
        if self.task_contains is not None:
            # autoescape: a typed % or _ is matched as itself, not as a wildcard
            out.append(c["task"].icontains(self.task_contains, autoescape=True))
        if self.group_ids is not None:
            out.append(c["group_id"].in_(sorted(set(self.group_ids))))
        if self.created_after is not None:
            out.append(c["created_at"] >= self.created_after)
        if self.created_before is not None:
            out.append(c["created_at"] < self.created_before)
        if self.with_outcome:
            out.append(c["success"].is_not(None))
        if self.with_parent:
            out.append(c["parent_trajectory_id"].is_not(None))
        if self.exclude_ids:
            out.append(c["id"].not_in(sorted(set(self.exclude_ids))))
        if self.exclude_group_ids:
            out.append(or_(c["group_id"].is_(None), c["group_id"].not_in(sorted(set(self.exclude_group_ids)))))
        return out


EVERY = TrajectoryFilter()


@lru_cache(maxsize=128)
def _trajectory_statement(
    namespace: str,
    snapshot_pk: int | None,
    where: TrajectoryFilter,
    columns: tuple[str, ...],
    by_ids: bool,
    after: bool,
    before: bool,
    newest_first: bool,
    limit: int | None,
) -> Select[Any]:
    view = trajectory_view(namespace, snapshot_pk)
    stmt = select(*(view.c[name] for name in columns)).where(*where.clauses(view.c))
    if by_ids:
        stmt = stmt.where(view.c.id.in_(bindparam("ids", expanding=True)))
    if after:
        stmt = stmt.where(view.c.pk > bindparam("after_pk"))
    if before:
        stmt = stmt.where(view.c.pk < bindparam("before_pk"))
    stmt = stmt.order_by(view.c.pk.desc() if newest_first else view.c.pk)
    return stmt if limit is None else stmt.limit(limit)


def read_trajectories(
    session: Session,
    namespace: str,
    snapshot_pk: int | None,
    where: TrajectoryFilter = EVERY,
    *,
    ids: Sequence[str] | None = None,
    columns: tuple[str, ...] = TRAJECTORY_FIELDS,
    after_pk: int | None = None,
    before_pk: int | None = None,
    newest_first: bool = False,
    limit: int | None = None,
) -> list[RowMapping]:
    """The matching trajectories as the view holds them (one created after the
    snapshot is absent), in pk order (newest first if asked): the keyset order,
    stable under inserts. `ids` narrows to those, read MAX_IN at a time (the order
    holds within each chunk; callers by id key the rows by id, and take no limit)."""
    assert ids is None or limit is None, "a limit per chunk of ids would mean nothing"
    assert snapshot_pk is None or not set(columns) & set(LIVE_TRAJECTORY_COLUMNS), "no snapshot pins these"
    stmt = _trajectory_statement(
        namespace,
        snapshot_pk,
        where,
        columns,
        ids is not None,
        after_pk is not None,
        before_pk is not None,
        newest_first,
        limit,
    )
    params: dict[str, Any] = {}
    if after_pk is not None:
        params["after_pk"] = after_pk
    if before_pk is not None:
        params["before_pk"] = before_pk
    if ids is None:
        return list(session.execute(stmt, params).mappings())
    unique = sorted(set(ids))
    return [
        row
        for start in range(0, len(unique), MAX_IN)
        for row in session.execute(stmt, {**params, "ids": unique[start : start + MAX_IN]}).mappings()
    ]


@lru_cache(maxsize=128)
def _steps_statement(namespace: str, snapshot_pk: int | None, columns: tuple[str, ...]) -> Select[Any]:
    view = trajectory_view(namespace, snapshot_pk)
    step = Step.__table__.c
    return (
        select(*(step[name] for name in columns))
        .join(view, steps_of(view))
        .where(view.c.pk.in_(bindparam("pks", expanding=True)))
        .order_by(step.trajectory_pk, step.index)
    )


def read_steps(
    session: Session,
    namespace: str,
    snapshot_pk: int | None,
    trajectory_pks: Sequence[int],
    *,
    columns: tuple[str, ...] = STEP_COLUMNS,
) -> dict[int, list[RowMapping]]:
    """trajectory pk -> its steps in index order (under a snapshot, only those that
    existed then), read MAX_IN trajectories at a time. `columns` must hold
    `trajectory_pk`."""
    out: dict[int, list[RowMapping]] = {pk: [] for pk in trajectory_pks}
    unique = sorted(out)
    stmt = _steps_statement(namespace, snapshot_pk, columns)
    for start in range(0, len(unique), MAX_IN):
        for row in session.execute(stmt, {"pks": unique[start : start + MAX_IN]}).mappings():
            out[row["trajectory_pk"]].append(row)
    return out


def read_trajectory_records(
    session: Session, namespace: str, snapshot_pk: int | None, ids: Sequence[str], record: type[T]
) -> dict[str, T]:
    """id -> the trajectory as `record`, a dataclass whose fields are view columns
    (`id` among them): plain frozen values the caller keeps after its session closes."""
    rows = read_trajectories(session, namespace, snapshot_pk, ids=ids, columns=record_columns(record))
    return {row["id"]: record(**row) for row in rows}


def read_step_records(
    session: Session, namespace: str, snapshot_pk: int | None, trajectory_pks: Sequence[int], record: type[T]
) -> dict[int, list[T]]:
    """trajectory pk -> its steps in order as `record`, a dataclass whose fields are
    step columns."""
    names = record_columns(record)
    steps = read_steps(session, namespace, snapshot_pk, trajectory_pks, columns=("trajectory_pk", *names))
    return {pk: [record(**{name: row[name] for name in names}) for row in rows] for pk, rows in steps.items()}
