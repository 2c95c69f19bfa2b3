"""API keys: creation, authentication, and the admin key bootstrap."""

from __future__ import annotations

import logging
import re
import secrets
import time
from dataclasses import dataclass
from datetime import timedelta

from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

from domain.errors import Conflict, InvalidInput, NotFound, Unauthorized
from domain.schemas import NAMESPACE_PATTERN
from service.auth import Permission, Principal, hash_key, new_key_secret
from service.keys.schemas import KeyCreate, KeyCreated, KeyRead, KeyRotate
from store import keys as repo
from store import namespaces as namespaces_repo
from store import ui_sessions
from store.database import Database
from store.models import ApiKey, utcnow

_NAMESPACE_RE = re.compile(NAMESPACE_PATTERN)
ENV_ADMIN_KEY_ID = "admin-env"
# A key's last use is recorded at this resolution: at most one write a minute per
# key, on a lookup that missed the cache, never one per request.
LAST_USED_RESOLUTION = timedelta(seconds=60)
logger = logging.getLogger(__name__)


@dataclass
class BootstrapResult:
    generated_secret: str | None  # set only when a new admin key was made: show it once


def _bearer_digest(authorization: str | None) -> str:
    """The SHA-256 of the key in an `Authorization: Bearer <key>` header; Unauthorized
    saying what is wrong with the header otherwise."""
    if not authorization:
        raise Unauthorized("missing Authorization header; send 'Authorization: Bearer <key>'")
    scheme, _, secret = authorization.partition(" ")
    if scheme.lower() != "bearer" or not secret.strip():
        raise Unauthorized("Authorization header must be 'Bearer <key>'")
    return hash_key(secret.strip())


def _locked_key(session: Session, key_id: str) -> ApiKey:
    """The key row, locked for a change (revoke, rotate); 404 naming `id` if absent."""
    row = repo.read_key(session, key_id, for_update=True)
    if row is None:
        raise NotFound(f"key {key_id!r} not found", field="id")
    return row


class KeyService:
    # A verified key is trusted this long without a database lookup; keeps auth off
    # the ingest hot path.
    CACHE_SECONDS = 30.0

    def __init__(self, db: Database) -> None:
        self.db = db
        self._cache: dict[str, tuple[float, Principal]] = {}

    def create(self, principal: Principal, body: KeyCreate) -> KeyCreated:
        """Over the API and the UI a key names only namespaces that exist: a typo
        would otherwise make a key that silently sees nothing."""
        principal.require(Permission.KEYS_MANAGE)
        return self.create_unchecked(body, existing_only=True)

    def create_unchecked(self, body: KeyCreate, *, existing_only: bool = False) -> KeyCreated:
        """For the CLI (`reflexa keys create`), which has database access, not a key
        (and may make a key for a namespace about to be created)."""
        for i, ns in enumerate(body.namespaces):
            if ns != "*" and not _NAMESPACE_RE.match(ns):
                raise InvalidInput(
                    f"namespaces[{i}] {ns!r} is not a namespace name (or '*')",
                    field=f"namespaces[{i}]",
                    rule="pattern",
                )
        secret = new_key_secret()

        def work(session: Session) -> KeyCreated:
            for i, ns in enumerate(body.namespaces):
                if existing_only and ns != "*" and namespaces_repo.read_namespace(session, ns) is None:
                    raise InvalidInput(
                        f"namespaces[{i}] {ns!r}: no such namespace (create it first)",
                        field=f"namespaces[{i}]",
                        rule="namespace_exists",
                    )
            row = repo.create_key(
                session,
                id="key_" + secrets.token_hex(8),
                key_hash=hash_key(secret),
                role=body.role,
                namespaces=sorted(set(body.namespaces)),
                description=body.description,
            )
            return KeyCreated(**KeyRead.from_row(row).model_dump(), key=secret)

        return self.db.run_write(work)

    def list(self, principal: Principal) -> list[KeyRead]:
        principal.require(Permission.KEYS_MANAGE)
        with self.db.read() as session:
            return [KeyRead.from_row(row) for row in repo.list_keys(session)]

    def revoke(self, principal: Principal, key_id: str) -> KeyRead:
        """Revoked at once in this process and within CACHE_SECONDS on every other
        replica; its UI sessions end with it. Revoking twice is a replay."""
        principal.require(Permission.KEYS_MANAGE)

        def work(session: Session) -> tuple[KeyRead, str]:
            row = _locked_key(session, key_id)
            repo.update_key_revoked(session, row)
            ui_sessions.end_sessions_of_key(session, key_id)
            return KeyRead.from_row(row), row.key_hash

        read, digest = self.db.run_write(work)
        self._cache.pop(digest, None)
        return read

    def rotate(self, principal: Principal, key_id: str, body: KeyRotate) -> KeyCreated:
        """A new key with the same role, scope and description; the old one stays
        valid for `grace_seconds` (then refused, on every replica within
        CACHE_SECONDS), so clients can move over without an outage."""
        principal.require(Permission.KEYS_MANAGE)
        secret = new_key_secret()

        def work(session: Session) -> tuple[KeyCreated, str]:
            old = _locked_key(session, key_id)
            now = utcnow()
            if old.revoked_at is not None or (old.expires_at is not None and old.expires_at <= now):
                raise Conflict(f"key {key_id!r} is no longer valid; create a new one", field="id", rule="key_valid")
            new = repo.create_key(
                session,
                id="key_" + secrets.token_hex(8),
                key_hash=hash_key(secret),
                role=old.role,
                namespaces=list(old.namespaces),
                description=body.description if body.description is not None else old.description,
            )
            repo.update_key_expiry(session, old, now + timedelta(seconds=body.grace_seconds))
            if body.grace_seconds == 0:
                ui_sessions.end_sessions_of_key(session, key_id)
            return KeyCreated(**KeyRead.from_row(new).model_dump(), key=secret), old.key_hash

        created, old_digest = self.db.run_write(work)
        if body.grace_seconds == 0:
            self._cache.pop(old_digest, None)
        return created

    @staticmethod
    def principal_of(row: ApiKey) -> Principal:
        return Principal(key_id=row.id, role=row.role, namespaces=frozenset(row.namespaces))

    def cached(self, authorization: str | None) -> Principal | None:
        """The principal of a recently seen valid key, without touching the database
        (None: not cached or not a bearer header; call `authenticate`)."""
        try:
            return self._cached(_bearer_digest(authorization))
        except Unauthorized:
            return None

    def authenticate(self, authorization: str | None) -> Principal:
        digest = _bearer_digest(authorization)
        hit = self._cached(digest)
        if hit is not None:
            return hit
        now = time.monotonic()
        with self.db.read() as session:
            row = repo.read_key_by_hash(session, digest)
            if row is None or row.revoked_at is not None:
                raise Unauthorized("unknown or revoked API key")
            trusted_for = self.CACHE_SECONDS
            if row.expires_at is not None:
                left = (row.expires_at - utcnow()).total_seconds()
                if left <= 0:
                    raise Unauthorized("this API key was rotated and its grace period is over; use the new key")
                trusted_for = min(trusted_for, left)  # a rotated key is never trusted past its expiry
            principal = self.principal_of(row)
            last_used = row.last_used_at
        if last_used is None or utcnow() - last_used >= LAST_USED_RESOLUTION:
            self._record_use(principal.key_id)
        self._cache[digest] = (now + trusted_for, principal)
        return principal

    def _record_use(self, key_id: str) -> None:
        """Best effort: a busy database delays the record, never the request."""
        try:
            self.db.run_write(lambda s: repo.update_key_used(s, key_id, utcnow(), LAST_USED_RESOLUTION))
        except SQLAlchemyError as exc:
            logger.warning("could not record the use of key %s: %s", key_id, exc)

    def _cached(self, digest: str) -> Principal | None:
        hit = self._cache.get(digest)
        return hit[1] if hit is not None and hit[0] > time.monotonic() else None

    def bootstrap_admin(self, env_secret: str | None) -> BootstrapResult:
        """REFLEXA_ADMIN_KEY, when set, is (re)registered as an admin key. Otherwise,
        if no admin key exists yet, one is generated and returned to be shown once."""

        # A unit retried on a unique violation: replicas started together with the
        # same REFLEXA_ADMIN_KEY race to insert it; the loser re-runs and sees it.
        def work(session: Session) -> BootstrapResult:
            if env_secret:
                digest = hash_key(env_secret)
                if repo.read_key_by_hash(session, digest) is None:
                    repo.delete_key(session, ENV_ADMIN_KEY_ID)  # the env key changed: replace the old one
                    repo.create_key(
                        session,
                        id=ENV_ADMIN_KEY_ID,
                        key_hash=digest,
                        role="admin",
                        namespaces=["*"],
                        description="from REFLEXA_ADMIN_KEY",
                    )
                return BootstrapResult(generated_secret=None)
            if repo.has_active_admin_key(session):
                return BootstrapResult(generated_secret=None)
            secret = new_key_secret()
            repo.create_key(
                session,
                id="key_" + secrets.token_hex(8),
                key_hash=hash_key(secret),
                role="admin",
                namespaces=["*"],
                description="generated on first start",
            )
            return BootstrapResult(generated_secret=secret)

        return self.db.run_write(work)
