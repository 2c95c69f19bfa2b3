"""Trajectory and step queries. Functions take the unit of work's Session and only
flush; the caller commits."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any, NamedTuple

from sqlalchemy import Update, bindparam, delete, func, insert, inspect, select, update
from sqlalchemy.orm import Session

from store.evidence import delete_trajectory_evidence
from store.models import Job, Step, Trajectory, utcnow


def read_trajectory(session: Session, namespace: str, id: str, *, for_update: bool = False) -> Trajectory | None:
    stmt = select(Trajectory).where(Trajectory.namespace == namespace, Trajectory.id == id)
    if for_update:
        # Row lock on PostgreSQL; SQLite write units already hold the database lock.
        stmt = stmt.with_for_update()
    return session.scalars(stmt).one_or_none()


class AppendTarget(NamedTuple):
    pk: int
    step_count: int
    status: str


# The append's read, built once: building it and its cache key on each append cost
# more CPU than running it (bench/ingest profile); `update_trajectory` caches its own.
_READ_APPEND_TARGET = (
    select(Trajectory.pk, Trajectory.step_count, Trajectory.status)
    .where(Trajectory.namespace == bindparam("namespace"), Trajectory.id == bindparam("id"))
    .with_for_update()
)


def read_append_target(session: Session, namespace: str, id: str) -> AppendTarget | None:
    """What an append checks, locked for the rest of the write (PostgreSQL: the row;
    SQLite: write units hold the database lock). Three columns on the connection:
    loading the ORM entity cost a fifth of an append's CPU."""
    row = session.connection().execute(_READ_APPEND_TARGET, {"namespace": namespace, "id": id}).one_or_none()
    return AppendTarget(*row) if row is not None else None


def read_trajectories_by_ids(session: Session, namespace: str, ids: Sequence[str]) -> dict[str, Trajectory]:
    if not ids:
        return {}
    rows = session.scalars(select(Trajectory).where(Trajectory.namespace == namespace, Trajectory.id.in_(ids)))
    return {row.id: row for row in rows}


def create_trajectories(session: Session, rows: list[dict[str, Any]]) -> dict[str, int]:
    """Insert trajectory rows; returns id -> pk."""
    if not rows:
        return {}
    now = utcnow()
    for row in rows:
        row.setdefault("created_at", now)
        row.setdefault("updated_at", now)
    result = session.execute(insert(Trajectory).returning(Trajectory.id, Trajectory.pk), rows)
    return {id_: pk for id_, pk in result}


def create_steps(session: Session, rows: list[dict[str, Any]]) -> None:
    """Bulk insert of rows keyed by attribute name (one executemany): the ingest hot
    path. A core insert on the session's connection: the ORM's bulk insert spent
    more CPU than the statement."""
    if not rows:
        return
    now = utcnow()
    for row in rows:
        row.setdefault("created_at", now)
        for attribute, column in _STEP_COLUMN_NAMES.items():
            if attribute in row:
                row[column] = row.pop(attribute)
    session.connection().execute(_INSERT_STEP, rows)


def update_trajectory(session: Session, pk: int, **values: Any) -> None:
    """A core UPDATE on the session's connection: a Trajectory loaded in this session
    keeps its old values until refreshed. The statement is built once per set of
    columns (`_update_statement`): every append runs one."""
    values.setdefault("updated_at", utcnow())
    params = {f"new_{name}": value for name, value in values.items()}
    session.connection().execute(_update_statement(tuple(sorted(values))), {"target_pk": pk, **params})


@functools.cache
def _update_statement(columns: tuple[str, ...]) -> Update:
    """`update_trajectory`'s UPDATE of these columns, each value a bound parameter `new_<column>`."""
    table = Trajectory.__table__
    return (
        update(table)
        .where(table.c.pk == bindparam("target_pk"))
        .values({name: bindparam(f"new_{name}", type_=table.c[name].type) for name in columns})
    )


_INSERT_STEP = insert(Step.__table__)
# attribute -> column where they differ (metadata_ -> metadata: `metadata` is taken on a model)
_STEP_COLUMN_NAMES = {a.key: a.columns[0].key for a in inspect(Step).column_attrs if a.key != a.columns[0].key}


def read_step_hashes(session: Session, trajectory_pk: int, indexes: Sequence[int]) -> dict[int, str]:
    if not indexes:
        return {}
    rows = session.execute(
        select(Step.index, Step.content_hash).where(Step.trajectory_pk == trajectory_pk, Step.index.in_(list(indexes)))
    )
    return {index: h for index, h in rows}


def delete_trajectory(session: Session, trajectory: Trajectory) -> tuple[int, int, list[int]]:
    """Delete a trajectory, its steps, its queued jobs, and every reflection derived
    only from it. Returns (deleted steps, deleted reflections, pks of the reflections
    that also cite other trajectories: they keep living, with their evidence
    statistics recomputed)."""
    pk = trajectory.pk
    deleted_reflections, still_cited = delete_trajectory_evidence(session, trajectory.namespace, pk)
    deleted_steps = session.execute(delete(Step).where(Step.trajectory_pk == pk)).rowcount
    # Work still queued for it has nothing left to work on.
    session.execute(
        delete(Job).where(
            Job.namespace == trajectory.namespace,
            Job.status == "queued",
            Job.payload["trajectory_pk"].as_integer() == pk,
        )
    )
    session.execute(delete(Trajectory).where(Trajectory.pk == pk))
    return deleted_steps, deleted_reflections, still_cited


def count_trajectories(session: Session, namespace: str) -> int:
    return session.scalar(select(func.count()).select_from(Trajectory).where(Trajectory.namespace == namespace)) or 0
