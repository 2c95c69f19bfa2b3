"""API key queries. Only hashes of secrets are stored."""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy import delete, or_, select, update
from sqlalchemy.orm import Session

from store.models import ApiKey, utcnow


def read_key_by_hash(session: Session, key_hash: str) -> ApiKey | None:
    return session.scalars(select(ApiKey).where(ApiKey.key_hash == key_hash)).one_or_none()


def delete_key(session: Session, key_id: str) -> None:
    """Gone if it was there (a statement, not an ORM delete: two replicas replacing
    the same key both succeed)."""
    session.execute(delete(ApiKey).where(ApiKey.id == key_id))


def has_active_admin_key(session: Session) -> bool:
    stmt = select(ApiKey.id).where(ApiKey.role == "admin", ApiKey.revoked_at.is_(None)).limit(1)
    return session.scalar(stmt) is not None


def create_key(
    session: Session, *, id: str, key_hash: str, role: str, namespaces: list[str], description: str | None
) -> ApiKey:
    row = ApiKey(
        id=id,
        key_hash=key_hash,
        role=role,
        namespaces=namespaces,
        description=description,
        created_at=utcnow(),
    )
    session.add(row)
    session.flush()
    return row


def list_keys(session: Session) -> list[ApiKey]:
    return list(session.scalars(select(ApiKey).order_by(ApiKey.created_at)))


def read_key(session: Session, key_id: str, *, for_update: bool = False) -> ApiKey | None:
    stmt = select(ApiKey).where(ApiKey.id == key_id)
    return session.scalars(stmt.with_for_update() if for_update else stmt).one_or_none()


def update_key_expiry(session: Session, row: ApiKey, at: datetime) -> None:
    """Valid until `at` (a rotation's grace period); an earlier expiry is kept."""
    if row.expires_at is None or at < row.expires_at:
        row.expires_at = at
        session.flush()


def update_key_revoked(session: Session, row: ApiKey) -> None:
    """Revoked from now on (the row stays: who had which key remains auditable)."""
    if row.revoked_at is None:
        row.revoked_at = utcnow()
        session.flush()


def update_key_used(session: Session, key_id: str, at: datetime, resolution: timedelta) -> None:
    """Record a use at `at` unless one within `resolution` is already recorded (a
    conditional UPDATE: replicas racing on the same key write at most once)."""
    k = ApiKey
    session.execute(
        update(k)
        .where(k.id == key_id, or_(k.last_used_at.is_(None), k.last_used_at < at - resolution))
        .values(last_used_at=at)
    )
