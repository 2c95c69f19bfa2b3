"""Snapshots (memory pinned for trainers) and evaluation freezes.

Every trainer read resolves its `snapshot` here: one in another namespace, or
deleted, is a 404 naming the `snapshot` field."""

from __future__ import annotations

import uuid

from sqlalchemy.orm import Session

from domain.errors import Conflict, NotFound
from domain.hashing import canonical_hash
from service.auth import Permission, Principal
from service.namespaces.service import NamespaceService
from service.pagination import keyset_page
from service.snapshots.schemas import FreezeRead, SnapshotCreate, SnapshotPage, SnapshotRead
from store import namespaces as ns_repo
from store import snapshots as repo
from store.database import Database
from store.models import utcnow
from store.snapshots import SnapshotRef


class SnapshotService:
    def __init__(self, db: Database, namespaces: NamespaceService, model: str) -> None:
        self.db = db
        self.namespaces = namespaces
        self.model = model  # the embedding model whose vectors a snapshot keeps

    def resolve(
        self, session: Session, ns: str, snapshot_id: str | None, *, field: str = "snapshot"
    ) -> SnapshotRef | None:
        """The snapshot a read names (None: read live)."""
        if snapshot_id is None:
            return None
        row = repo.read_snapshot(session, ns, snapshot_id)
        if row is None:
            raise NotFound(f"snapshot {snapshot_id!r} not found in namespace {ns!r}", field=field)
        return repo.ref(row)

    def create(self, principal: Principal, ns: str, body: SnapshotCreate) -> tuple[SnapshotRead, bool]:
        principal.require(Permission.SNAPSHOTS, ns)
        id = body.id or "snap_" + uuid.uuid4().hex
        h = canonical_hash(body.model_dump(mode="json", exclude={"id"}))

        def work(session: Session) -> tuple[SnapshotRead, bool]:
            repo.begin_consistent(session)
            old = repo.read_snapshot(session, ns, id)
            if old is None:
                self.namespaces.require(session, ns)
            elif old.request_hash != h:
                raise Conflict(
                    f"snapshot {id!r} already exists with a different body", field="id", rule="idempotent_replay"
                )
            else:
                return SnapshotRead.from_row(old), False
            row = repo.create_snapshot(
                session,
                namespace=ns,
                id=id,
                note=body.note,
                request_hash=h,
                created_by=principal.key_id,
                model=self.model,
            )
            return SnapshotRead.from_row(row), True

        return self.db.run_write(work)

    def get(self, principal: Principal, ns: str, id: str) -> SnapshotRead:
        principal.require(Permission.SNAPSHOTS, ns)
        with self.db.read() as session:
            row = self.namespaces.get_or_404(session, ns, "snapshot", id, lambda: repo.read_snapshot(session, ns, id))
            return SnapshotRead.from_row(row)

    def list(self, principal: Principal, ns: str, *, cursor: str | None, limit: int) -> SnapshotPage:
        principal.require(Permission.SNAPSHOTS, ns)
        with self.db.read() as session:
            self.namespaces.require(session, ns)
            rows, next_cursor = keyset_page(
                lambda before, n: repo.list_snapshots(session, ns, before, n),
                cursor=cursor,
                limit=limit,
                key=lambda r: r.pk,
            )
            return SnapshotPage(items=[SnapshotRead.from_row(r) for r in rows], next_cursor=next_cursor)

    def delete(self, principal: Principal, ns: str, id: str) -> None:
        principal.require(Permission.SNAPSHOTS, ns)

        def work(session: Session) -> None:
            row = self.namespaces.get_or_404(session, ns, "snapshot", id, lambda: repo.read_snapshot(session, ns, id))
            repo.delete_snapshot(session, row.pk)

        self.db.run_write(work)

    def freeze_state(self, principal: Principal, ns: str) -> FreezeRead:
        principal.require(Permission.REFLECTIONS_READ, ns)
        with self.db.read() as session:
            row = self.namespaces.get_or_404(
                session, ns, "namespace", ns, lambda: ns_repo.read_namespace(session, ns), field="namespace"
            )
            return FreezeRead(namespace=ns, frozen=row.frozen, frozen_at=row.frozen_at)

    def set_frozen(self, principal: Principal, ns: str, frozen: bool) -> FreezeRead:
        """Idempotent: freezing a frozen namespace keeps its first frozen_at."""
        principal.require(Permission.FREEZE, ns)

        def work(session: Session) -> FreezeRead:
            row = self.namespaces.get_or_404(
                session, ns, "namespace", ns, lambda: ns_repo.read_namespace(session, ns), field="namespace"
            )
            if row.frozen != frozen:
                ns_repo.update_frozen(session, ns, frozen, utcnow() if frozen else None)
            fresh = ns_repo.read_namespace(session, ns)
            assert fresh is not None
            return FreezeRead(namespace=ns, frozen=fresh.frozen, frozen_at=fresh.frozen_at)

        result = self.db.run_write(work)
        self.namespaces.frozen_changed(ns)
        return result
