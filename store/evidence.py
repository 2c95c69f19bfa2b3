"""Evidence: which trajectories (and step ranges) each reflection was distilled
from, with the credit and value each source carries, and the evidence statistics
kept on the reflection row in step with it."""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Select, and_, bindparam, case, delete, func, null, select, update
from sqlalchemy.orm import Session

from store.database import dialect_insert, one_of
from store.index_feed import create_changes, lock_feed
from store.models import Reflection, ReflectionEvidence, SnapshotEvidence, Step, Trajectory, utcnow


@dataclass(frozen=True)
class EvidenceIn:
    trajectory_pk: int
    step_start: int | None
    step_end: int | None
    success: bool | None = None
    value: float | None = None
    internal_hash: str | None = None  # text_hash of the step's internal-state text (exemplars)


def create_evidence(session: Session, reflection_pk: int, evidence: Sequence[EvidenceIn]) -> int:
    """Link evidence; a link already stored (same trajectory and step start, a whole
    trajectory's NULL start included) is left as is (re-run jobs). Returns the
    number of links added."""
    if not evidence:
        return 0
    e = ReflectionEvidence
    stored = {
        (t, start)
        for t, start in session.execute(
            select(e.trajectory_pk, e.step_start).where(
                e.reflection_pk == reflection_pk, e.trajectory_pk.in_({x.trajectory_pk for x in evidence})
            )
        )
    }
    rows = []
    for x in evidence:
        key = (x.trajectory_pk, x.step_start)
        if key in stored:  # NULL starts compare equal here, unlike in the unique index
            continue
        stored.add(key)
        rows.append(
            {
                "reflection_pk": reflection_pk,
                "trajectory_pk": x.trajectory_pk,
                "step_start": x.step_start,
                "step_end": x.step_end,
                "success": x.success,
                "value": x.value,
                "internal_hash": x.internal_hash,
            }
        )
    if not rows:
        return 0
    stmt = (
        dialect_insert(session)(e)
        .values(rows)
        .on_conflict_do_nothing(index_elements=["reflection_pk", "trajectory_pk", "step_start"])
        .returning(e.pk)  # a concurrent writer's link is skipped, and not counted
    )
    return len(session.execute(stmt).all())


def update_evidence_stats(session: Session, reflection_pks: Sequence[int]) -> None:
    """Recompute the evidence_* columns and `internal_hashes` from the evidence rows
    (after links change)."""
    stats = _evidence_stats(session, reflection_pks)
    hashes = _internal_hashes(session, reflection_pks)
    now = utcnow()
    for pk in reflection_pks:
        n, s, f, v = stats.get(pk, (0, 0, 0, None))
        session.execute(
            update(Reflection)
            .where(Reflection.pk == pk)
            .values(
                evidence_count=n,
                evidence_successes=s,
                evidence_failures=f,
                evidence_value=v,
                internal_hashes=hashes[pk] if pk in hashes else null(),  # SQL NULL, not JSON null
                updated_at=now,
            )
        )


def _internal_hashes(session: Session, reflection_pks: Sequence[int]) -> dict[int, list[str]]:
    """pk -> the sorted distinct internal hashes of its evidence (absent: none)."""
    out: dict[int, list[str]] = {}
    if not reflection_pks:
        return out
    e = ReflectionEvidence
    stmt = (
        select(e.reflection_pk, e.internal_hash)
        .where(e.reflection_pk.in_(list(reflection_pks)), e.internal_hash.is_not(None))
        .distinct()
        .order_by(e.reflection_pk, e.internal_hash)
    )
    for pk, digest in session.execute(stmt):
        out.setdefault(pk, []).append(digest)
    return out


@dataclass(frozen=True)
class Occurrence:
    """An evidence row of an exemplar with the internal state of the step it cites."""

    evidence_pk: int
    reflection_pk: int
    internal_state: str | None
    internal_hash: str | None


def list_occurrences(session: Session, reflection_pks: Sequence[int]) -> list[Occurrence]:
    """The evidence rows of these reflections that cite one step, with that step's
    internal state (for `reflexa reindex` to recompute their hashes)."""
    if not reflection_pks:
        return []
    e = ReflectionEvidence
    stmt = (
        select(e.pk, e.reflection_pk, Step.internal_state, e.internal_hash)
        .join(Step, and_(Step.trajectory_pk == e.trajectory_pk, Step.index == e.step_start))
        .where(e.reflection_pk.in_(list(reflection_pks)), e.step_end == e.step_start)
        .order_by(e.pk)
    )
    return [Occurrence(*row) for row in session.execute(stmt)]


def update_internal_hashes(session: Session, hashes: Mapping[int, str | None], reflection_pks: Sequence[int]) -> int:
    """Set evidence rows' internal hashes (evidence pk -> hash), then refresh the
    `internal_hashes` of these reflections where they differ. Unlike
    `update_evidence_stats`, leaves `updated_at` (recency) alone: nothing was seen
    again. Returns how many reflections changed."""
    for evidence_pk, digest in hashes.items():
        session.execute(
            update(ReflectionEvidence).where(ReflectionEvidence.pk == evidence_pk).values(internal_hash=digest)
        )
    fresh = _internal_hashes(session, reflection_pks)
    r = Reflection
    stored = {pk: v for pk, v in session.execute(select(r.pk, r.internal_hashes).where(r.pk.in_(list(reflection_pks))))}
    changed = [pk for pk in reflection_pks if pk in stored and (stored[pk] or None) != fresh.get(pk)]
    for pk in changed:
        value = fresh[pk] if pk in fresh else null()
        session.execute(update(Reflection).where(Reflection.pk == pk).values(internal_hashes=value))
    return len(changed)


def _evidence_stats(session: Session, reflection_pks: Sequence[int]) -> dict[int, tuple[int, int, int, float | None]]:
    if not reflection_pks:
        return {}
    e = ReflectionEvidence
    stmt = (
        select(
            e.reflection_pk,
            func.count(),
            func.sum(case((e.success.is_(True), 1), else_=0)),
            func.sum(case((e.success.is_(False), 1), else_=0)),
            func.avg(e.value),
        )
        .where(e.reflection_pk.in_(list(reflection_pks)))
        .group_by(e.reflection_pk)
    )
    return {
        pk: (n, int(s or 0), int(f or 0), None if v is None else float(v)) for pk, n, s, f, v in session.execute(stmt)
    }


def list_evidence(session: Session, reflection_pks: Sequence[int]) -> dict[int, list[ReflectionEvidence]]:
    out: dict[int, list[ReflectionEvidence]] = {pk: [] for pk in reflection_pks}
    if not reflection_pks:
        return out
    stmt = select(ReflectionEvidence).where(ReflectionEvidence.reflection_pk.in_(list(reflection_pks)))
    for row in session.scalars(stmt.order_by(ReflectionEvidence.pk)):
        out[row.reflection_pk].append(row)
    return out


def update_evidence(session: Session, reflection_pk: int, evidence: Sequence[EvidenceIn]) -> None:
    """Make the reflection cite exactly this evidence (a rebuilt card drops the
    rollouts it no longer draws on), then refresh its statistics."""
    session.execute(delete(ReflectionEvidence).where(ReflectionEvidence.reflection_pk == reflection_pk))
    create_evidence(session, reflection_pk, evidence)
    update_evidence_stats(session, [reflection_pk])


def list_evidence_summaries(
    session: Session, reflection_pks: Sequence[int], per_item: int, snapshot_pk: int | None = None
) -> dict[int, list[tuple[str, int | None, int | None]]]:
    """pk -> the newest `per_item` evidence links as (trajectory id, step start, step end):
    live, or as they were in a snapshot."""
    out: dict[int, list[tuple[str, int | None, int | None]]] = {pk: [] for pk in reflection_pks}
    if not reflection_pks:
        return out
    params: dict[str, Any] = {"pks": list(reflection_pks)}
    if snapshot_pk is not None:
        params["snapshot_pk"] = snapshot_pk
    # Core rows on the session's connection: this runs on every retrieve.
    postgres = session.get_bind().dialect.name == "postgresql"
    for pk, tid, start, end in session.connection().execute(
        _summaries_statement(postgres, snapshot_pk is not None), params
    ):
        if len(out[pk]) < per_item:
            out[pk].append((tid, start, end))
    return out


@functools.cache
def _summaries_statement(postgres: bool, pinned: bool) -> Select[Any]:
    """`list_evidence_summaries`' query, built once (per engine, live or pinned), every
    value a bound parameter: building a statement and its cache key cost more than
    running it. The pks are one parameter on PostgreSQL (`store.database.one_of`)."""
    if not pinned:
        e = ReflectionEvidence
        return (
            select(e.reflection_pk, Trajectory.id, e.step_start, e.step_end)
            .join(Trajectory, Trajectory.pk == e.trajectory_pk)
            .where(one_of(e.reflection_pk, "pks", postgres))
            .order_by(e.reflection_pk, e.pk.desc())
        )
    p = SnapshotEvidence  # copied in live pk order, so its pk order is the same
    return (
        select(p.reflection_pk, p.trajectory_id, p.step_start, p.step_end)
        .where(p.snapshot_pk == bindparam("snapshot_pk"), one_of(p.reflection_pk, "pks", postgres))
        .order_by(p.reflection_pk, p.pk.desc())
    )


def read_evidence_value_sums(session: Session, reflection_pks: Sequence[int]) -> dict[int, float]:
    """pk -> the sum of its evidence rows' values (for LLM pool items: their votes);
    0.0 for a reflection with no evidence."""
    out = dict.fromkeys(reflection_pks, 0.0)
    if reflection_pks:
        stmt = (
            select(ReflectionEvidence.reflection_pk, func.sum(ReflectionEvidence.value))
            .where(ReflectionEvidence.reflection_pk.in_(list(reflection_pks)))
            .group_by(ReflectionEvidence.reflection_pk)
        )
        out.update((pk, float(total or 0.0)) for pk, total in session.execute(stmt))
    return out


def list_evidence_trajectory_pks(session: Session, reflection_pk: int) -> set[int]:
    """The trajectories the reflection cites."""
    stmt = select(ReflectionEvidence.trajectory_pk).where(ReflectionEvidence.reflection_pk == reflection_pk)
    return set(session.scalars(stmt.distinct()))


def cites_trajectory(session: Session, reflection_pk: int, trajectory_pk: int) -> bool:
    """Whether the reflection has any evidence from the trajectory."""
    stmt = (
        select(ReflectionEvidence.pk)
        .where(ReflectionEvidence.reflection_pk == reflection_pk, ReflectionEvidence.trajectory_pk == trajectory_pk)
        .limit(1)
    )
    return session.scalar(stmt) is not None


def delete_trajectory_evidence(session: Session, namespace: str, trajectory_pk: int) -> tuple[int, list[int]]:
    """Remove a trajectory's evidence: reflections left with none are deleted (and
    leave the index through the feed); the others get their statistics recomputed.
    Returns how many reflections were deleted and the pks of those still cited."""
    lock_feed(session, namespace)
    affected = list(
        session.scalars(
            select(ReflectionEvidence.reflection_pk).where(ReflectionEvidence.trajectory_pk == trajectory_pk).distinct()
        )
    )
    if not affected:
        return 0, []
    session.execute(delete(ReflectionEvidence).where(ReflectionEvidence.trajectory_pk == trajectory_pk))
    still_cited = set(
        session.scalars(
            select(ReflectionEvidence.reflection_pk).where(ReflectionEvidence.reflection_pk.in_(affected)).distinct()
        )
    )
    orphans = session.execute(
        select(Reflection.pk, Reflection.kind).where(
            Reflection.pk.in_([pk for pk in affected if pk not in still_cited])
        )
    ).all()
    if orphans:
        session.execute(delete(Reflection).where(Reflection.pk.in_([pk for pk, _ in orphans])))
        create_changes(session, namespace, [(kind, pk, "delete") for pk, kind in orphans])
    update_evidence_stats(session, sorted(still_cited))
    return len(orphans), sorted(still_cited)
