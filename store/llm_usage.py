"""LLM token usage per (namespace, UTC day): read the day's spend, add to it."""

from __future__ import annotations

from datetime import date

from sqlalchemy import select
from sqlalchemy.orm import Session

from store.database import dialect_insert
from store.models import LLMTokenUsage


def read_tokens_spent(session: Session, namespace: str, day: date) -> int:
    value = session.scalar(
        select(LLMTokenUsage.tokens).where(LLMTokenUsage.namespace == namespace, LLMTokenUsage.day == day)
    )
    return int(value or 0)


def update_tokens_spent(session: Session, namespace: str, day: date, tokens: int) -> None:
    """Add one call's tokens; concurrent adders never lose an increment (the
    increment happens in SQL, on conflict with the day's row)."""
    stmt = dialect_insert(session)(LLMTokenUsage).values(namespace=namespace, day=day, tokens=tokens, calls=1)
    stmt = stmt.on_conflict_do_update(
        index_elements=["namespace", "day"],
        set_={"tokens": LLMTokenUsage.tokens + stmt.excluded.tokens, "calls": LLMTokenUsage.calls + 1},
    )
    session.execute(stmt)
