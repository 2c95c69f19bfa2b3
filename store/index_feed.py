"""The index change feed: every change to what the vector indexes hold is a row
here, and each process's indexes catch up by reading the rows after the last one
they applied.

Writers that touch what the vector indexes hold take the namespace's feed lock
first (`lock_feed`), so `index_changes.seq` order is commit order within a
namespace and an index catching up "after seq N" never skips a late commit.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

from sqlalchemy import func, insert, select, text
from sqlalchemy.orm import Session

from store.models import IndexChange, utcnow


def lock_feed(session: Session, namespace: str) -> None:
    """Serialise index-feed writers of one namespace until commit (PostgreSQL
    advisory transaction lock; SQLite write units are already exclusive)."""
    if session.get_bind().dialect.name != "postgresql":
        return
    key = int.from_bytes(hashlib.blake2b(namespace.encode(), digest_size=8).digest(), "big", signed=True)
    session.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": key})


def create_changes(session: Session, namespace: str, changes: Iterable[tuple[str, int, str]]) -> None:
    """(kind, reflection_pk, op) rows onto the feed; call after `lock_feed`."""
    rows = [
        {"namespace": namespace, "kind": kind, "reflection_pk": pk, "op": op, "created_at": utcnow()}
        for kind, pk, op in changes
    ]
    if rows:
        session.execute(insert(IndexChange), rows)


def list_changes_after(session: Session, namespace: str, seq: int, limit: int) -> list[IndexChange]:
    stmt = (
        select(IndexChange)
        .where(IndexChange.namespace == namespace, IndexChange.seq > seq)
        .order_by(IndexChange.seq)
        .limit(limit)
    )
    return list(session.scalars(stmt))


def read_last_change_seq(session: Session, namespace: str) -> int:
    stmt = select(func.max(IndexChange.seq)).where(IndexChange.namespace == namespace)
    return session.scalar(stmt) or 0
