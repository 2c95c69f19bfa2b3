"""Operator browser sessions: create on sign-in, read per page, end on sign-out.
Only a SHA-256 of the cookie's secret is stored."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from store.models import ApiKey, UiSession, utcnow


def create_session(
    session: Session, *, secret_hash: str, key_id: str, csrf_token: str, expires_at: datetime
) -> UiSession:
    row = UiSession(
        secret_hash=secret_hash, key_id=key_id, csrf_token=csrf_token, created_at=utcnow(), expires_at=expires_at
    )
    session.add(row)
    session.flush()
    return row


def read_live_session(session: Session, secret_hash: str) -> tuple[UiSession, ApiKey] | None:
    """The session and its key, if the session is unexpired and not ended and its
    key not revoked."""
    now = utcnow()
    stmt = (
        select(UiSession, ApiKey)
        .join(ApiKey, ApiKey.id == UiSession.key_id)
        .where(
            UiSession.secret_hash == secret_hash,
            UiSession.ended_at.is_(None),
            UiSession.expires_at > now,
            ApiKey.revoked_at.is_(None),
            ApiKey.expires_at.is_(None) | (ApiKey.expires_at > now),
        )
    )
    row = session.execute(stmt).one_or_none()
    return None if row is None else (row[0], row[1])


def end_session(session: Session, secret_hash: str) -> bool:
    result = session.execute(
        update(UiSession)
        .where(UiSession.secret_hash == secret_hash, UiSession.ended_at.is_(None))
        .values(ended_at=utcnow())
    )
    return bool(result.rowcount)


def end_sessions_of_key(session: Session, key_id: str) -> int:
    result = session.execute(
        update(UiSession).where(UiSession.key_id == key_id, UiSession.ended_at.is_(None)).values(ended_at=utcnow())
    )
    return result.rowcount or 0
