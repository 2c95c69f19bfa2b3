"""The shared per-key token buckets: an API process takes a lease of whole tokens
from its caller's bucket in one short write, then spends it locally."""

from __future__ import annotations

from sqlalchemy import delete, select, update
from sqlalchemy.orm import Session

from store.database import dialect_insert
from store.models import KeyBucket


def claim(session: Session, identity: str, want: int, *, rate: float, burst: float, now: float) -> tuple[int, float]:
    """Refill the caller's bucket to `now` (at most `burst`), take up to `want` whole
    tokens and return (taken, tokens left). A new caller starts with a full bucket.
    The row is locked for the rest of the write (SQLite: the write lock), so two
    processes never spend the same token."""
    session.execute(
        dialect_insert(session)(KeyBucket)
        .values(identity=identity, tokens=burst, updated=now)
        .on_conflict_do_nothing(index_elements=["identity"])
    )
    tokens, updated = session.execute(
        select(KeyBucket.tokens, KeyBucket.updated).where(KeyBucket.identity == identity).with_for_update()
    ).one()
    tokens = min(burst, tokens + max(0.0, now - updated) * rate)
    taken = max(0, min(want, int(tokens)))
    left = tokens - taken
    session.execute(
        update(KeyBucket).where(KeyBucket.identity == identity).values(tokens=left, updated=max(updated, now))
    )
    return taken, left


def delete_idle(session: Session, before: float) -> int:
    """Forget buckets not touched since `before` (they would be full again anyway)."""
    return session.execute(delete(KeyBucket).where(KeyBucket.updated < before)).rowcount or 0
