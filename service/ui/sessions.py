"""Operator sign-in: an operator or admin key opens a browser session. The cookie
holds a random secret (only its SHA-256 is stored); each session has its own CSRF
token; sessions expire, end on sign-out, and end with their key's revocation."""

from __future__ import annotations

import hmac
import secrets
from dataclasses import dataclass
from datetime import timedelta

from sqlalchemy.orm import Session

from domain.errors import Forbidden, Unauthorized
from service.auth import Principal, hash_key  # a cookie is stored hashed as a key is
from service.keys.service import KeyService
from store import ui_sessions as repo
from store.database import Database
from store.models import utcnow

SIGN_IN_ROLES = frozenset({"operator", "admin"})


@dataclass(frozen=True)
class UiSession:
    principal: Principal
    csrf_token: str
    secret_hash: str

    def csrf_matches(self, token: str | None) -> bool:
        # Timing-safe: the token is a secret.
        return token is not None and hmac.compare_digest(token.encode("utf-8"), self.csrf_token.encode("utf-8"))


class UiSessionService:
    def __init__(self, db: Database, keys: KeyService, session_hours: float) -> None:
        self.db = db
        self.keys = keys
        self.lifetime = timedelta(hours=session_hours)

    def sign_in(self, key_secret: str) -> tuple[str, UiSession]:
        """(cookie secret, session) for a valid operator or admin key."""
        secret = key_secret.strip()
        if not secret:
            raise Unauthorized("enter an operator or admin API key", field="key", rule="required")
        try:
            principal = self.keys.authenticate(f"Bearer {secret}")
        except Unauthorized:
            raise Unauthorized("unknown or revoked API key", field="key", rule="valid_key") from None
        if principal.role not in SIGN_IN_ROLES:
            raise Forbidden(
                f"a {principal.role} key cannot sign in to the operator UI; use an operator or admin key",
                field="key",
                rule="role",
            )
        cookie = secrets.token_urlsafe(32)
        csrf = secrets.token_urlsafe(32)

        def work(session: Session) -> None:
            repo.create_session(
                session,
                secret_hash=hash_key(cookie),
                key_id=principal.key_id,
                csrf_token=csrf,
                expires_at=utcnow() + self.lifetime,
            )

        self.db.run_write(work)
        return cookie, UiSession(principal, csrf, hash_key(cookie))

    def read(self, cookie: str | None) -> UiSession | None:
        """The live session of a cookie: unexpired, not ended, its key not revoked and
        still allowed to sign in. Read from SQL on every page, so a sign-out or a
        revocation on any replica takes effect at once."""
        if not cookie or len(cookie) > 200:
            return None
        digest = hash_key(cookie)
        with self.db.read() as session:
            found = repo.read_live_session(session, digest)
        if found is None:
            return None
        row, key = found
        if key.role not in SIGN_IN_ROLES:
            return None
        return UiSession(self.keys.principal_of(key), row.csrf_token, digest)

    def sign_out(self, session_: UiSession) -> None:
        self.db.run_write(lambda s: repo.end_session(s, session_.secret_hash))
