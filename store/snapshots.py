"""Snapshot queries: taking one (a copy of the namespace's memory by INSERT …
SELECT, one statement per table), reading, listing and deleting them, and the
views every trainer read goes through, so one query serves live and pinned data.

A snapshot is taken in one write unit; on PostgreSQL at REPEATABLE READ, so every
copy sees the same committed state (SQLite's write unit is already exclusive).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Select, and_, delete, func, insert, literal, select, text
from sqlalchemy.orm import Session
from sqlalchemy.sql import Subquery

from store.index_feed import read_last_change_seq
from store.models import (
    Embedding,
    LexicalText,
    Namespace,
    Reflection,
    ReflectionEvidence,
    Snapshot,
    SnapshotEmbedding,
    SnapshotEvidence,
    SnapshotReflection,
    SnapshotTrajectory,
    Step,
    Trajectory,
    utcnow,
)
from store.records import record_from

_REFLECTION_COPIED = (
    "namespace",
    "id",
    "kind",
    "status",
    "version",
    "content",
    "text",
    "environment",
    "task",
    "reflector",
    "reflector_version",
    "model",
    "evidence_count",
    "evidence_successes",
    "evidence_failures",
    "evidence_value",
    "internal_hashes",  # a pinned retrieve's exact matches are the live ones of its moment
    "uses",
    "successes",
    "failures",
    "reward_sum",
    "created_at",
    "updated_at",
)


@dataclass(frozen=True)
class SnapshotRef:
    """What a read under a snapshot needs to know of it."""

    pk: int
    id: str
    namespace: str
    settings: dict[str, Any]
    outcome_successes: int
    outcome_total: int
    created_at: Any


def ref(row: Snapshot) -> SnapshotRef:
    return record_from(SnapshotRef, row)


def read_snapshot(session: Session, namespace: str, id: str) -> Snapshot | None:
    return session.scalars(select(Snapshot).where(Snapshot.namespace == namespace, Snapshot.id == id)).one_or_none()


def list_snapshots(session: Session, namespace: str, before_pk: int | None, limit: int) -> list[Snapshot]:
    stmt = select(Snapshot).where(Snapshot.namespace == namespace).order_by(Snapshot.pk.desc()).limit(limit)
    if before_pk is not None:
        stmt = stmt.where(Snapshot.pk < before_pk)
    return list(session.scalars(stmt))


def count_snapshots(session: Session) -> dict[str, int]:
    """Snapshots per namespace (for /metrics)."""
    stmt = select(Snapshot.namespace, func.count()).group_by(Snapshot.namespace)
    return {ns: int(n) for ns, n in session.execute(stmt)}


def delete_snapshot(session: Session, pk: int) -> None:
    # Children first: SQLite enforces ON DELETE CASCADE only with foreign keys on,
    # and one statement per table is as fast as the cascade anyway.
    for table in (SnapshotEmbedding, SnapshotEvidence, SnapshotReflection, SnapshotTrajectory):
        session.execute(delete(table).where(table.snapshot_pk == pk))
    session.execute(delete(Snapshot).where(Snapshot.pk == pk))


def begin_consistent(session: Session) -> None:
    """Make the unit of work read one committed state throughout (PostgreSQL:
    REPEATABLE READ, which must be the first statement; SQLite's write unit is
    exclusive already). Call before anything else in it."""
    if session.get_bind().dialect.name == "postgresql":
        session.execute(text("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ"))


def create_snapshot(
    session: Session,
    *,
    namespace: str,
    id: str,
    note: str | None,
    request_hash: str,
    created_by: str | None,
    model: str,
) -> Snapshot:
    """Copy the namespace's memory into a new snapshot, in a unit of work begun with
    `begin_consistent`."""
    ns = session.get(Namespace, namespace)
    assert ns is not None, "the caller checks the namespace"
    row = Snapshot(
        namespace=namespace,
        id=id,
        note=note,
        watermark=read_last_change_seq(session, namespace),
        settings=_settings_as_ranked(ns),
        outcome_successes=ns.outcome_successes,
        outcome_total=ns.outcome_total,
        reflection_count=0,
        trajectory_count=0,
        step_count=0,
        request_hash=request_hash,
        created_by=created_by,
        created_at=utcnow(),
    )
    session.add(row)
    session.flush()
    spk = literal(row.pk)

    r = Reflection
    session.execute(
        insert(SnapshotReflection).from_select(
            ["snapshot_pk", "reflection_pk", *_REFLECTION_COPIED, "lexical_text"],
            select(spk, r.pk, *(getattr(r, c) for c in _REFLECTION_COPIED), LexicalText.text)
            .outerjoin(LexicalText, LexicalText.reflection_pk == r.pk)
            .where(r.namespace == namespace),
        )
    )
    e = Embedding
    session.execute(
        insert(SnapshotEmbedding).from_select(
            ["snapshot_pk", "reflection_pk", "field", "model", "kind", "vector", "text_hash"],
            select(spk, e.reflection_pk, e.field, e.model, e.kind, e.vector, e.text_hash).where(
                e.namespace == namespace, e.model == model
            ),
        )
    )
    ev, t = ReflectionEvidence, Trajectory
    session.execute(
        insert(SnapshotEvidence).from_select(
            ["snapshot_pk", *EVIDENCE_VIEW_COLUMNS],  # the copy holds what the view shows
            select(
                spk,
                ev.reflection_pk,
                ev.trajectory_pk,
                t.id,
                t.task_hash,
                t.agent,
                t.policy_version,
                t.group_id,
                ev.step_start,
                ev.step_end,
                ev.success,
                ev.value,
            )
            .join(t, t.pk == ev.trajectory_pk)
            .join(r, r.pk == ev.reflection_pk)
            .where(r.namespace == namespace)
            .order_by(ev.pk),
        )
    )
    session.execute(
        insert(SnapshotTrajectory).from_select(
            [
                "snapshot_pk",
                "trajectory_pk",
                "step_count",
                "status",
                "success",
                "reward",
                "failure_reason",
                "closed_at",
            ],
            select(spk, t.pk, t.step_count, t.status, t.success, t.reward, t.failure_reason, t.closed_at).where(
                t.namespace == namespace
            ),
        )
    )
    row.reflection_count = session.scalar(
        select(func.count()).select_from(SnapshotReflection).where(SnapshotReflection.snapshot_pk == row.pk)
    )
    row.trajectory_count, row.step_count = session.execute(
        select(func.count(), func.coalesce(func.sum(SnapshotTrajectory.step_count), 0)).where(
            SnapshotTrajectory.snapshot_pk == row.pk
        )
    ).one()
    session.flush()
    return row


# -- views: one query shape for live and pinned reads --------------------------

TRAJECTORY_VIEW_COLUMNS = (
    "pk",
    "namespace",
    "id",
    "task",
    "task_hash",
    "environment",
    "agent",
    "policy_version",
    "group_id",
    "parent_trajectory_id",
    "attempt",
    "metadata",
    "status",
    "success",
    "reward",
    "failure_reason",
    "step_count",
    "created_at",
    "closed_at",
)


# What a snapshot pins of a trajectory (SnapshotTrajectory's copies, where a pinned
# read takes them from); the other columns never change once written.
_PINNED_TRAJECTORY_COLUMNS = frozenset({"status", "success", "reward", "failure_reason", "step_count", "closed_at"})
# Columns only a live view has: they change after the trajectory is written and no
# snapshot pins them, so a pinned read that named one would mix then and now.
LIVE_TRAJECTORY_COLUMNS = ("retrieval_ids", "outcome_details", "updated_at")


def trajectory_view(namespace: str, snapshot_pk: int | None) -> Subquery:
    """The namespace's trajectories as a subquery with TRAJECTORY_VIEW_COLUMNS (and,
    live, LIVE_TRAJECTORY_COLUMNS): live, or as they were in the snapshot (its
    outcome and step count; a trajectory created since is absent). Join steps with
    `steps_of(view)`."""
    t = Trajectory
    pinned: Any = t if snapshot_pk is None else SnapshotTrajectory
    columns = TRAJECTORY_VIEW_COLUMNS if snapshot_pk is not None else TRAJECTORY_VIEW_COLUMNS + LIVE_TRAJECTORY_COLUMNS
    stmt: Select[Any] = select(
        *(
            getattr(pinned if c in _PINNED_TRAJECTORY_COLUMNS else t, "metadata_" if c == "metadata" else c).label(c)
            for c in columns
        )
    )
    if snapshot_pk is not None:
        stmt = stmt.join(pinned, and_(pinned.trajectory_pk == t.pk, pinned.snapshot_pk == snapshot_pk))
    return stmt.where(t.namespace == namespace).subquery("tv")


def steps_of(view: Subquery) -> Any:
    """The join condition of steps to a trajectory view: only the steps that
    existed in it (steps are append-only and numbered from 0)."""
    return and_(Step.trajectory_pk == view.c.pk, Step.index < view.c.step_count)


REFLECTION_VIEW_COLUMNS = ("pk", *_REFLECTION_COPIED)


def reflection_view(namespace: str, snapshot_pk: int | None) -> Subquery:
    """The namespace's reflections (every status) as a subquery with
    REFLECTION_VIEW_COLUMNS: live, or as they were in the snapshot."""
    r: Any = Reflection if snapshot_pk is None else SnapshotReflection
    stmt = select(r.pk.label("pk"), *(getattr(r, c).label(c) for c in _REFLECTION_COPIED)).where(
        r.namespace == namespace
    )
    if snapshot_pk is not None:
        stmt = stmt.where(SnapshotReflection.snapshot_pk == snapshot_pk)
    return stmt.subquery("rv")


EVIDENCE_VIEW_COLUMNS = (
    "reflection_pk",
    "trajectory_pk",
    "trajectory_id",
    "task_hash",
    "agent",
    "policy_version",
    "group_id",
    "step_start",
    "step_end",
    "success",
    "value",
)

# The evidence view's columns a live read takes from the citing trajectory (a
# snapshot's evidence rows hold copies): view column -> trajectory attribute.
_CITING_TRAJECTORY = {
    "trajectory_id": "id",
    "task_hash": "task_hash",
    "agent": "agent",
    "policy_version": "policy_version",
    "group_id": "group_id",
}


def evidence_view(namespace: str, snapshot_pk: int | None) -> Subquery:
    """Evidence rows with the citing trajectory's fixed fields (EVIDENCE_VIEW_COLUMNS):
    live, or as they were in the snapshot."""
    if snapshot_pk is not None:
        s = SnapshotEvidence
        return (
            select(*(getattr(s, c).label(c) for c in EVIDENCE_VIEW_COLUMNS))
            .where(s.snapshot_pk == snapshot_pk)
            .subquery("ev")
        )
    ev, t = ReflectionEvidence, Trajectory
    return (
        select(
            *(
                (getattr(t, _CITING_TRAJECTORY[c]) if c in _CITING_TRAJECTORY else getattr(ev, c)).label(c)
                for c in EVIDENCE_VIEW_COLUMNS
            )
        )
        .join(t, t.pk == ev.trajectory_pk)
        .where(t.namespace == namespace)
        .subquery("ev")
    )


def list_pinned_vectors(session: Session, snapshot_pk: int, model: str) -> Iterator[tuple[str, str, int, bytes]]:
    """(kind, field, reflection pk, vector) of a snapshot, in (kind, field, pk) order."""
    e = SnapshotEmbedding
    stmt = (
        select(e.kind, e.field, e.reflection_pk, e.vector)
        .where(e.snapshot_pk == snapshot_pk, e.model == model)
        .order_by(e.kind, e.field, e.reflection_pk)
    )
    for kind, fld, pk, blob in session.execute(stmt):
        yield kind, fld, int(pk), blob


def list_pinned_lexical_texts(session: Session, snapshot_pk: int) -> Iterator[tuple[int, str, str]]:
    """(reflection pk, kind, lexical text) of a snapshot's reflections that have one."""
    r = SnapshotReflection
    stmt = (
        select(r.pk, r.kind, r.lexical_text)
        .where(r.snapshot_pk == snapshot_pk, r.lexical_text.is_not(None))
        .order_by(r.pk)
    )
    for pk, kind, text_ in session.execute(stmt):
        yield int(pk), kind, text_


def _settings_as_ranked(ns: Namespace) -> dict[str, Any]:
    """The namespace's settings, a `calibrated` lexical weight replaced by the weight
    calibrated by then: a snapshot ranks as the namespace did when it was taken."""
    settings = dict(ns.settings or {})
    ranking = settings.get("ranking")
    calibrated = ns.lexical_weight_calibrated
    if isinstance(ranking, dict) and ranking.get("lexical_weight") == "calibrated" and calibrated is not None:
        settings["ranking"] = {**ranking, "lexical_weight": calibrated}
    return settings
