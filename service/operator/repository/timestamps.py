"""Timestamps in the operator's grouped reads: a UTC day name computed in SQL on
either engine, and a timestamp back from an aggregate as an aware datetime."""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import func
from sqlalchemy.orm import Session
from sqlalchemy.sql.elements import ColumnElement


def day_of(session: Session, column: ColumnElement[datetime]) -> ColumnElement[str]:
    """'YYYY-MM-DD' (UTC) of a timestamp column, on either engine. SQLite keeps the
    UTC text SQLAlchemy wrote; PostgreSQL converts the timestamptz to UTC first."""
    if session.get_bind().dialect.name == "postgresql":
        return func.to_char(func.timezone("UTC", column), "YYYY-MM-DD")
    return func.substr(column, 1, 10)


def as_utc(value: datetime | str | None) -> datetime | None:
    """SQLite's MIN()/MAX() bypass the column type and return text."""
    if value is None:
        return None
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value
