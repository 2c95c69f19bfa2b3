"""Reflection queries: idempotent upserts with evidence, merged-exemplar statistics,
embeddings, and the index change feed.

Writers that touch what the vector indexes hold take the namespace's feed lock
first (`lock_feed`), so `index_changes.seq` order is commit order within a
namespace and an index catching up "after seq N" never skips a late commit.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from sqlalchemy import case, delete, exists, func, insert, select, text, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.orm import Session

from store.models import Embedding, IndexChange, Reflection, ReflectionEvidence, ReflectionVersion, utcnow


def _insert(session: Session):  # type: ignore[no-untyped-def]
    return pg_insert if session.get_bind().dialect.name == "postgresql" else sqlite_insert


def lock_feed(session: Session, namespace: str) -> None:
    """Serialise index-feed writers of one namespace until commit (PostgreSQL
    advisory transaction lock; SQLite write units are already exclusive)."""
    if session.get_bind().dialect.name != "postgresql":
        return
    key = int.from_bytes(hashlib.blake2b(namespace.encode(), digest_size=8).digest(), "big", signed=True)
    session.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": key})


def append_changes(session: Session, namespace: str, changes: Iterable[tuple[str, int, str]]) -> None:
    """(kind, reflection_pk, op) rows onto the feed; call after `lock_feed`."""
    rows = [
        {"namespace": namespace, "kind": kind, "reflection_pk": pk, "op": op, "created_at": utcnow()}
        for kind, pk, op in changes
    ]
    if rows:
        session.execute(insert(IndexChange), rows)


def changes_after(session: Session, namespace: str, seq: int, limit: int) -> list[IndexChange]:
    stmt = (
        select(IndexChange)
        .where(IndexChange.namespace == namespace, IndexChange.seq > seq)
        .order_by(IndexChange.seq)
        .limit(limit)
    )
    return list(session.scalars(stmt))


def last_change_seq(session: Session, namespace: str) -> int:
    stmt = select(func.max(IndexChange.seq)).where(IndexChange.namespace == namespace)
    return session.scalar(stmt) or 0


@dataclass(frozen=True)
class EvidenceIn:
    trajectory_pk: int
    step_start: int | None
    step_end: int | None
    success: bool | None = None
    value: float | None = None


def get_reflection(session: Session, namespace: str, id: str, *, for_update: bool = False) -> Reflection | None:
    stmt = select(Reflection).where(Reflection.namespace == namespace, Reflection.id == id)
    if for_update:
        stmt = stmt.with_for_update()
    return session.scalars(stmt).one_or_none()


@dataclass(frozen=True)
class ReflectionFilters:
    kind: str | None = None
    status: str | None = None
    environment: str | None = None
    reflector: str | None = None


def list_reflections(
    session: Session, namespace: str, f: ReflectionFilters, *, before_pk: int | None, limit: int
) -> list[Reflection]:
    """Newest first, keyset-paginated."""
    stmt = select(Reflection).where(Reflection.namespace == namespace)
    for column, value in (
        (Reflection.kind, f.kind),
        (Reflection.status, f.status),
        (Reflection.environment, f.environment),
        (Reflection.reflector, f.reflector),
    ):
        if value is not None:
            stmt = stmt.where(column == value)
    if before_pk is not None:
        stmt = stmt.where(Reflection.pk < before_pk)
    return list(session.scalars(stmt.order_by(Reflection.pk.desc()).limit(limit)))


def history(session: Session, reflection_pk: int) -> list[ReflectionVersion]:
    stmt = select(ReflectionVersion).where(ReflectionVersion.reflection_pk == reflection_pk)
    return list(session.scalars(stmt.order_by(ReflectionVersion.pk)))


def _record(session: Session, row: Reflection, action: str, actor: str, note: str | None) -> None:
    session.add(
        ReflectionVersion(
            reflection_pk=row.pk,
            version=row.version,
            action=action,
            status=row.status,
            content=row.content,
            actor=actor,
            note=note,
            created_at=utcnow(),
        )
    )
    session.flush()


def edit_reflection(
    session: Session, row: Reflection, *, content: dict[str, Any], text: str | None, actor: str, note: str | None
) -> None:
    """A new version: the row holds the latest, the history keeps every one."""
    row.content = content
    if text is not None:
        row.text = text
    row.version += 1
    row.updated_at = utcnow()
    session.flush()
    _record(session, row, "edit", actor, note)


def set_status(session: Session, row: Reflection, status: str, *, action: str, actor: str, note: str | None) -> None:
    row.status = status
    row.updated_at = utcnow()
    session.flush()
    _record(session, row, action, actor, note)


def get_reflections_by_ids(session: Session, namespace: str, ids: Sequence[str]) -> dict[str, Reflection]:
    if not ids:
        return {}
    rows = session.scalars(select(Reflection).where(Reflection.namespace == namespace, Reflection.id.in_(ids)))
    return {r.id: r for r in rows}


def insert_reflection(session: Session, values: dict[str, Any], actor: str) -> Reflection:
    now = utcnow()
    row = Reflection(**values, created_at=now, updated_at=now)
    session.add(row)
    session.flush()
    session.add(
        ReflectionVersion(
            reflection_pk=row.pk,
            version=row.version,
            action="create",
            status=row.status,
            content=row.content,
            actor=actor,
            created_at=now,
        )
    )
    return row


def add_evidence(session: Session, reflection_pk: int, evidence: Sequence[EvidenceIn]) -> int:
    """Link evidence; a link already stored is left as is (re-run jobs). Returns new links."""
    if not evidence:
        return 0
    rows = [
        {
            "reflection_pk": reflection_pk,
            "trajectory_pk": e.trajectory_pk,
            "step_start": e.step_start,
            "step_end": e.step_end,
            "success": e.success,
            "value": e.value,
        }
        for e in evidence
    ]
    stmt = (
        _insert(session)(ReflectionEvidence)
        .values(rows)
        .on_conflict_do_nothing(index_elements=["reflection_pk", "trajectory_pk", "step_start"])
    )
    return session.execute(stmt).rowcount or 0


def refresh_evidence_stats(session: Session, reflection_pks: Sequence[int]) -> None:
    """Recompute the evidence_* columns from the evidence rows (after links change)."""
    stats = _evidence_stats(session, reflection_pks)
    now = utcnow()
    for pk in reflection_pks:
        n, s, f, v = stats.get(pk, (0, 0, 0, None))
        session.execute(
            update(Reflection)
            .where(Reflection.pk == pk)
            .values(evidence_count=n, evidence_successes=s, evidence_failures=f, evidence_value=v, updated_at=now)
        )


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


def evidence_for(session: Session, reflection_pks: Sequence[int]) -> dict[int, list[ReflectionEvidence]]:
    out: dict[int, list[ReflectionEvidence]] = {pk: [] for pk in reflection_pks}
    if not reflection_pks:
        return out
    stmt = select(ReflectionEvidence).where(ReflectionEvidence.reflection_pk.in_(list(reflection_pks)))
    for row in session.scalars(stmt.order_by(ReflectionEvidence.pk)):
        out[row.reflection_pk].append(row)
    return out


def upsert_embeddings(
    session: Session,
    *,
    reflection_pk: int,
    namespace: str,
    kind: str,
    model: str,
    vectors: dict[str, np.ndarray],
) -> None:
    """Store one vector per field for this model, replacing an older one."""
    for field, vec in vectors.items():
        data = np.ascontiguousarray(vec, dtype="<f4").tobytes()
        stmt = (
            _insert(session)(Embedding)
            .values(
                reflection_pk=reflection_pk,
                namespace=namespace,
                kind=kind,
                field=field,
                model=model,
                dim=int(vec.shape[0]),
                vector=data,
                created_at=utcnow(),
            )
            .on_conflict_do_update(
                index_elements=["reflection_pk", "field", "model"],
                set_={"vector": data, "dim": int(vec.shape[0])},
            )
        )
        session.execute(stmt)


def embeddings_for(session: Session, reflection_pks: Sequence[int], model: str) -> dict[int, dict[str, np.ndarray]]:
    """pk -> {field: vector} for the given model."""
    out: dict[int, dict[str, np.ndarray]] = {}
    if not reflection_pks:
        return out
    stmt = select(Embedding.reflection_pk, Embedding.field, Embedding.vector).where(
        Embedding.reflection_pk.in_(list(reflection_pks)), Embedding.model == model
    )
    for pk, field, blob in session.execute(stmt):
        out.setdefault(pk, {})[field] = np.frombuffer(blob, dtype="<f4")
    return out


def embedded_kinds(session: Session, namespace: str, model: str) -> list[tuple[str, str]]:
    """The (kind, field) pairs that have vectors of this model in the namespace."""
    stmt = (
        select(Embedding.kind, Embedding.field)
        .where(Embedding.namespace == namespace, Embedding.model == model)
        .distinct()
    )
    return [(k, f) for k, f in session.execute(stmt)]


def reflections_without_vector(
    session: Session, namespace: str, model: str, *, after_pk: int, limit: int
) -> list[Reflection]:
    """Reflections lacking a state vector of this model (a changed model, a
    re-encode), in pk order from `after_pk`."""
    has_vector = exists().where(
        Embedding.reflection_pk == Reflection.pk, Embedding.model == model, Embedding.field == "state"
    )
    stmt = (
        select(Reflection)
        .where(Reflection.namespace == namespace, Reflection.pk > after_pk, ~has_vector)
        .order_by(Reflection.pk)
        .limit(limit)
    )
    return list(session.scalars(stmt))


def iter_embeddings(
    session: Session, namespace: str, kind: str, field: str, model: str, *, after_pk: int, limit: int
) -> list[tuple[int, int, bytes]]:
    """(embedding pk, reflection pk, vector bytes) pages, for full index rebuilds."""
    stmt = (
        select(Embedding.pk, Embedding.reflection_pk, Embedding.vector)
        .where(
            Embedding.namespace == namespace,
            Embedding.kind == kind,
            Embedding.field == field,
            Embedding.model == model,
            Embedding.pk > after_pk,
        )
        .order_by(Embedding.pk)
        .limit(limit)
    )
    return [(a, b, c) for a, b, c in session.execute(stmt)]


def unlink_trajectory(session: Session, namespace: str, trajectory_pk: int) -> int:
    """Remove a trajectory's evidence: reflections left with none are deleted (and
    leave the index through the feed); the others get their statistics recomputed.
    Returns how many reflections were deleted."""
    lock_feed(session, namespace)
    affected = list(
        session.scalars(
            select(ReflectionEvidence.reflection_pk).where(ReflectionEvidence.trajectory_pk == trajectory_pk).distinct()
        )
    )
    if not affected:
        return 0
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
        append_changes(session, namespace, [(kind, pk, "delete") for pk, kind in orphans])
    refresh_evidence_stats(session, sorted(still_cited))
    _refresh_importance(session, sorted(still_cited))
    return len(orphans)


def _refresh_importance(session: Session, reflection_pks: Sequence[int]) -> None:
    """Items of the LLM pools carry `content.importance`, the sum of their evidence
    votes (+1 / -1): a deleted voter's vote goes with its evidence. Status is left
    to curation (an item is not retired because its source data was deleted)."""
    if not reflection_pks:
        return
    sums = evidence_value_sums(session, reflection_pks)
    for row in session.scalars(select(Reflection).where(Reflection.pk.in_(list(reflection_pks)))):
        if "importance" in row.content:
            importance = round(sums[row.pk])
            if row.content["importance"] != importance:
                row.content = {**row.content, "importance": importance}


def replace_evidence(session: Session, reflection_pk: int, evidence: Sequence[EvidenceIn]) -> None:
    """Make the reflection cite exactly this evidence (a rebuilt card drops the
    rollouts it no longer draws on), then refresh its statistics."""
    session.execute(delete(ReflectionEvidence).where(ReflectionEvidence.reflection_pk == reflection_pk))
    add_evidence(session, reflection_pk, evidence)
    refresh_evidence_stats(session, [reflection_pk])


def exemplars_with_vectors(
    session: Session, namespace: str, environment: str | None, model: str, limit: int
) -> list[tuple[Reflection, np.ndarray]]:
    """The environment's most-seen active exemplars with their state vectors."""
    stmt = (
        select(Reflection, Embedding.vector)
        .join(Embedding, (Embedding.reflection_pk == Reflection.pk) & (Embedding.field == "state"))
        .where(
            Reflection.namespace == namespace,
            Reflection.kind == "exemplar",
            Reflection.status == "active",
            Embedding.model == model,
            Reflection.environment.is_(None) if environment is None else Reflection.environment == environment,
        )
        .order_by(Reflection.evidence_count.desc(), Reflection.pk)
        .limit(limit)
    )
    return [(row, np.frombuffer(blob, dtype="<f4")) for row, blob in session.execute(stmt)]


def list_by_reflector(session: Session, namespace: str, reflector: str, environment: str | None) -> list[Reflection]:
    stmt = select(Reflection).where(
        Reflection.namespace == namespace,
        Reflection.reflector == reflector,
        Reflection.environment.is_(None) if environment is None else Reflection.environment == environment,
    )
    return list(session.scalars(stmt))


def pool_with_vectors(
    session: Session,
    namespace: str,
    *,
    kind: str,
    environment: str | None,
    reflectors: Sequence[str],
    model: str,
    limit: int,
) -> list[tuple[Reflection, np.ndarray]]:
    """The not-retired reflections of one kind, environment and set of reflectors
    with their state vectors of `model` (rows without one are left out), newest
    first: the pool an LLM reflector compares a new item against."""
    stmt = (
        select(Reflection, Embedding.vector)
        .join(Embedding, (Embedding.reflection_pk == Reflection.pk) & (Embedding.field == "state"))
        .where(
            Reflection.namespace == namespace,
            Reflection.kind == kind,
            Reflection.status != "retired",
            Reflection.reflector.in_(list(reflectors)),
            Embedding.model == model,
            Reflection.environment.is_(None) if environment is None else Reflection.environment == environment,
        )
        .order_by(Reflection.pk.desc())
        .limit(limit)
    )
    return [(row, np.frombuffer(blob, dtype="<f4")) for row, blob in session.execute(stmt)]


def cited_by_reflectors(session: Session, namespace: str, trajectory_pk: int, reflectors: Sequence[str]) -> bool:
    """Whether any reflection of these reflectors already cites the trajectory (an
    LLM reflection job whose results were written)."""
    stmt = (
        select(ReflectionEvidence.pk)
        .join(Reflection, Reflection.pk == ReflectionEvidence.reflection_pk)
        .where(
            ReflectionEvidence.trajectory_pk == trajectory_pk,
            Reflection.namespace == namespace,
            Reflection.reflector.in_(list(reflectors)),
        )
        .limit(1)
    )
    return session.scalar(stmt) is not None


def cites_trajectory(session: Session, reflection_pk: int, trajectory_pk: int) -> bool:
    """Whether the reflection has any evidence from the trajectory."""
    stmt = (
        select(ReflectionEvidence.pk)
        .where(ReflectionEvidence.reflection_pk == reflection_pk, ReflectionEvidence.trajectory_pk == trajectory_pk)
        .limit(1)
    )
    return session.scalar(stmt) is not None


def evidence_value_sums(session: Session, reflection_pks: Sequence[int]) -> dict[int, float]:
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


def evidence_trajectory_pks(session: Session, reflection_pk: int) -> set[int]:
    """The trajectories the reflection cites."""
    stmt = select(ReflectionEvidence.trajectory_pk).where(ReflectionEvidence.reflection_pk == reflection_pk)
    return set(session.scalars(stmt.distinct()))
