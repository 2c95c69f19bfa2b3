"""Reward capabilities: a secret in a URL path that lets a caller without an API key
(OpenRLHF's remote reward model sends only a Content-Type header) score one rubric
of one namespace, and nothing else: `POST /v1/reward/<secret>`.

The secret (`rfxrw_` + 256 random bits) is returned once, by the create; only its
SHA-256 is stored, so the database never holds it in plain text. Revoking keeps the
row with `revoked_at` (idempotent). An unknown, malformed or revoked secret is the
same 404, which names no secret; no message or log line repeats one (the access log
filter in service/rubrics/router.py redacts the path; /metrics labels the route by
its template).
"""

from __future__ import annotations

import secrets
import uuid

from sqlalchemy.orm import Session

from domain.errors import NotFound
from service.auth import Permission, Principal, hash_key
from service.namespaces.service import NamespaceService
from service.pagination import keyset_page
from service.rubrics import repository as repo
from service.rubrics.schemas import CapabilityCreate, CapabilityCreated, CapabilityPage, CapabilityRead
from store.database import Database
from store.models import utcnow

SECRET_PREFIX = "rfxrw_"
REWARD_PATH = "/v1/reward/"
MAX_SECRET_CHARS = 100


def new_secret() -> str:
    return SECRET_PREFIX + secrets.token_urlsafe(32)


class CapabilityService:
    def __init__(self, db: Database, namespaces: NamespaceService) -> None:
        self.db = db
        self.namespaces = namespaces

    def create(self, principal: Principal, ns: str, rubric_id: str, body: CapabilityCreate) -> CapabilityCreated:
        """A new capability for the rubric (which must exist). Each call mints a new
        secret: the client must not retry one that may have arrived."""
        principal.require(Permission.REWARDS, ns)
        secret = new_secret()

        def work(session: Session) -> CapabilityCreated:
            self.namespaces.get_or_404(
                session, ns, "rubric", rubric_id, lambda: repo.read_rubric(session, ns, None, rubric_id)
            )
            row = repo.create_capability(
                session,
                id="cap_" + uuid.uuid4().hex,
                namespace=ns,
                rubric_id=rubric_id,
                secret_hash=hash_key(secret),
                note=body.note,
                created_by=principal.key_id,
            )
            read = CapabilityRead.model_validate(row, from_attributes=True)
            return CapabilityCreated(**read.model_dump(), secret=secret, path=REWARD_PATH + secret)

        return self.db.run_write(work)

    def list(self, principal: Principal, ns: str, rubric_id: str, *, cursor: str | None, limit: int) -> CapabilityPage:
        """Newest first, revoked ones too (with `revoked_at`); never a secret."""
        principal.require(Permission.REWARDS, ns)
        with self.db.read() as session:
            self.namespaces.require(session, ns)
            rows, next_cursor = keyset_page(
                lambda before, n: repo.list_capabilities(session, ns, rubric_id, before, n),
                cursor=cursor,
                limit=limit,
                key=lambda r: r.pk,
            )
            return CapabilityPage(
                items=[CapabilityRead.model_validate(r, from_attributes=True) for r in rows], next_cursor=next_cursor
            )

    def revoke(self, principal: Principal, ns: str, rubric_id: str, capability_id: str) -> None:
        """Idempotent: revoking a revoked capability keeps its first revoked_at."""
        principal.require(Permission.REWARDS, ns)

        def work(session: Session) -> None:
            row = self.namespaces.get_or_404(
                session,
                ns,
                "reward capability",
                capability_id,
                lambda: repo.read_capability(session, ns, rubric_id, capability_id, for_update=True),
                field="capability_id",
            )
            if row.revoked_at is None:
                repo.update_capability_revoked(session, row, utcnow())

        self.db.run_write(work)

    def resolve(self, secret: str) -> tuple[str, str]:
        """(namespace, rubric id) of a live capability; one 404 for anything else."""
        unknown = NotFound("reward capability not found (unknown or revoked)", field="capability")
        if not secret.startswith(SECRET_PREFIX) or len(secret) > MAX_SECRET_CHARS:
            raise unknown
        with self.db.read() as session:
            row = repo.read_active_capability(session, hash_key(secret))
            if row is None:
                raise unknown
            return row.namespace, row.rubric_id
