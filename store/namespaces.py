"""Namespace queries."""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from store.models import Namespace, NamespaceSettingChange, utcnow


def read_namespace(session: Session, name: str) -> Namespace | None:
    return session.get(Namespace, name)


def read_ranking_inputs(session: Session, name: str) -> tuple[dict[str, Any], int, int, float | None] | None:
    """(settings, outcome successes, outcomes with a success value, calibrated lexical
    weight) in one row read, or None if there is no such namespace."""
    stmt = select(
        Namespace.settings, Namespace.outcome_successes, Namespace.outcome_total, Namespace.lexical_weight_calibrated
    ).where(Namespace.name == name)
    row = session.execute(stmt).one_or_none()
    return None if row is None else (row[0], int(row[1]), int(row[2]), row[3])


def read_lexical_calibration(session: Session, name: str) -> dict[str, Any] | None:
    """The namespace's last lexical calibration report (None: never calibrated or no namespace)."""
    return session.execute(select(Namespace.lexical_calibration).where(Namespace.name == name)).scalar_one_or_none()


def update_lexical_calibration(session: Session, name: str, weight: float | None, report: dict[str, Any]) -> None:
    """Record a calibration: the weight to rank with (None keeps the one it had: a run
    that found too few near-duplicate states) and its report."""
    values: dict[str, Any] = {"lexical_calibration": report}
    if weight is not None:
        values["lexical_weight_calibrated"] = weight
    session.execute(update(Namespace).where(Namespace.name == name).values(**values))


def list_namespaces(session: Session, names: Collection[str] | None) -> list[Namespace]:
    """All namespaces, or only those named (a key's scope)."""
    stmt = select(Namespace).order_by(Namespace.name)
    if names is not None:
        stmt = stmt.where(Namespace.name.in_(list(names)))
    return list(session.scalars(stmt))


def create_namespace(session: Session, name: str, settings: dict[str, Any]) -> Namespace:
    row = Namespace(name=name, settings=settings, created_at=utcnow())
    session.add(row)
    session.flush()
    return row


def update_settings(session: Session, name: str, settings: dict[str, Any]) -> None:
    session.execute(update(Namespace).where(Namespace.name == name).values(settings=settings))


def update_frozen(session: Session, name: str, frozen: bool, at: datetime | None) -> None:
    session.execute(update(Namespace).where(Namespace.name == name).values(frozen=frozen, frozen_at=at))
    session.expire_all()


def read_frozen(session: Session, name: str) -> bool:
    return bool(session.scalar(select(Namespace.frozen).where(Namespace.name == name)))


def list_frozen(session: Session) -> list[str]:
    return list(session.scalars(select(Namespace.name).where(Namespace.frozen.is_(True)).order_by(Namespace.name)))


def create_setting_changes(
    session: Session, namespace: str, changes: list[tuple[str, Any, Any]], *, actor: str
) -> None:
    """One history row per changed setting: (dotted path, old value, new value)."""
    at = utcnow()
    session.add_all(
        NamespaceSettingChange(namespace=namespace, path=path, old_value=old, new_value=new, actor=actor, created_at=at)
        for path, old, new in changes
    )
    session.flush()


def list_setting_changes(
    session: Session, namespace: str, *, before_pk: int | None, limit: int
) -> list[NamespaceSettingChange]:
    """Newest first, keyset-paged on pk."""
    c = NamespaceSettingChange
    stmt = select(c).where(c.namespace == namespace)
    if before_pk is not None:
        stmt = stmt.where(c.pk < before_pk)
    return list(session.scalars(stmt.order_by(c.pk.desc()).limit(limit)))
