"""Reflection rows and their version history: create, read, list, edit (a new
version) and status changes, each recorded with who and why."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, get_args

from sqlalchemy import func, or_, select
from sqlalchemy.orm import Session

from store.models import Reflection, ReflectionVersion, utcnow


def read_reflection(session: Session, namespace: str, id: str, *, for_update: bool = False) -> Reflection | None:
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
    exclude_status: str | None = None
    # Posterior mean utility bounds (inclusive); the mean is the ranking's Beta
    # posterior: (prior_strength * baseline + successes) / (prior_strength + successes + failures).
    utility_min: float | None = None
    utility_max: float | None = None
    baseline: float = 0.5
    prior_strength: float = 2.0


def utility_mean(baseline: float, prior_strength: float) -> Any:
    """The posterior mean utility of a reflection row as a SQL expression."""
    r = Reflection
    return (prior_strength * baseline + r.successes) / (prior_strength + r.successes + r.failures)


def _filtered(stmt: Any, namespace: str, f: ReflectionFilters) -> Any:
    stmt = stmt.where(Reflection.namespace == namespace)
    for column, value in (
        (Reflection.kind, f.kind),
        (Reflection.status, f.status),
        (Reflection.environment, f.environment),
        (Reflection.reflector, f.reflector),
    ):
        if value is not None:
            stmt = stmt.where(column == value)
    if f.exclude_status is not None:
        stmt = stmt.where(Reflection.status != f.exclude_status)
    if f.utility_min is not None or f.utility_max is not None:
        mean = utility_mean(f.baseline, f.prior_strength)
        if f.utility_min is not None:
            stmt = stmt.where(mean >= f.utility_min)
        if f.utility_max is not None:
            stmt = stmt.where(mean <= f.utility_max)
    return stmt


def list_reflections(
    session: Session, namespace: str, f: ReflectionFilters, *, before_pk: int | None, limit: int
) -> list[Reflection]:
    """Newest first, keyset-paginated."""
    stmt = _filtered(select(Reflection), namespace, f)
    if before_pk is not None:
        stmt = stmt.where(Reflection.pk < before_pk)
    return list(session.scalars(stmt.order_by(Reflection.pk.desc()).limit(limit)))


ReflectionSort = Literal["utility", "utility_low", "uses"]
SORTS: tuple[ReflectionSort, ...] = get_args(ReflectionSort)


def sort_key(f: ReflectionFilters, sort: ReflectionSort) -> Any:
    """The value a sorted list orders by (the posterior mean at the filters' baseline, or uses)."""
    return Reflection.uses if sort == "uses" else utility_mean(f.baseline, f.prior_strength)


def list_reflections_sorted(
    session: Session,
    namespace: str,
    f: ReflectionFilters,
    sort: ReflectionSort,
    *,
    after: tuple[float, int] | None,
    limit: int,
) -> list[tuple[Reflection, float]]:
    """Rows with their sort value: highest first (`utility_low`: lowest first), ties
    newest first; keyset-paged on (value, pk)."""
    key = sort_key(f, sort)
    stmt = _filtered(select(Reflection, key), namespace, f)
    ascending = sort == "utility_low"
    if after is not None:
        at, pk = after
        beyond = key > at if ascending else key < at
        stmt = stmt.where(or_(beyond, (key == at) & (Reflection.pk < pk)))
    order = key.asc() if ascending else key.desc()
    return [
        (row, float(value)) for row, value in session.execute(stmt.order_by(order, Reflection.pk.desc()).limit(limit))
    ]


def count_reflections(session: Session, namespace: str, f: ReflectionFilters) -> int:
    return int(session.scalar(_filtered(select(func.count()).select_from(Reflection), namespace, f)) or 0)


def list_reflections_for_update(
    session: Session, namespace: str, f: ReflectionFilters, *, after_pk: int, limit: int
) -> list[Reflection]:
    """The next `limit` matching rows above `after_pk`, oldest first, locked (bulk actions)."""
    stmt = _filtered(select(Reflection), namespace, f).where(Reflection.pk > after_pk)
    return list(session.scalars(stmt.order_by(Reflection.pk).limit(limit).with_for_update()))


def list_reflections_in_pk_order(
    session: Session, namespace: str, kinds: Sequence[str], *, after_pk: int, limit: int
) -> list[Reflection]:
    """A page of the namespace's reflections of these kinds, oldest first (rebuilds)."""
    stmt = select(Reflection).where(
        Reflection.namespace == namespace, Reflection.kind.in_(list(kinds)), Reflection.pk > after_pk
    )
    return list(session.scalars(stmt.order_by(Reflection.pk).limit(limit)))


def list_reflections_by_pks(session: Session, pks: Sequence[int]) -> list[Reflection]:
    return list(session.scalars(select(Reflection).where(Reflection.pk.in_(list(pks))).order_by(Reflection.pk)))


def list_reflection_versions(session: Session, reflection_pk: int) -> list[ReflectionVersion]:
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


def update_reflection(
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


def update_reflection_status(
    session: Session, row: Reflection, status: str, *, action: str, actor: str, note: str | None
) -> None:
    row.status = status
    row.updated_at = utcnow()
    session.flush()
    _record(session, row, action, actor, note)


def update_reflection_kept(session: Session, row: Reflection, *, actor: str, note: str | None) -> None:
    """An operator reviewed it and kept it as it is: recorded in the history, and
    the review queue leaves it alone until new outcomes arrive."""
    row.reviewed_uses = row.uses
    session.flush()
    _record(session, row, "keep", actor, note)


def read_reflections_by_ids(session: Session, namespace: str, ids: Sequence[str]) -> dict[str, Reflection]:
    if not ids:
        return {}
    rows = session.scalars(select(Reflection).where(Reflection.namespace == namespace, Reflection.id.in_(ids)))
    return {r.id: r for r in rows}


def create_reflection(session: Session, values: dict[str, Any], actor: str) -> Reflection:
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
