"""Namespaces: creation (idempotent by name) and the existence check every
namespaced request goes through."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

from pydantic import ValidationError
from sqlalchemy.orm import Session

from domain.errors import Conflict, InvalidInput, NotFound
from domain.settings import NamespaceSettings, parse_settings, ranking_settings
from service.auth import Permission, Principal
from service.namespaces.schemas import NamespaceCreate, NamespaceRead, SettingChangeRead
from service.pagination import keyset_page
from store import namespaces as repo
from store.database import Database

RANKING_INPUTS_TTL = 1.0  # seconds
R = TypeVar("R")


def setting_changes(before: dict[str, Any], after: dict[str, Any], prefix: str = "") -> list[tuple[str, Any, Any]]:
    """(dotted path, old, new) for every setting that differs; objects are walked,
    anything else (numbers, text, lists) compared whole."""
    out = []
    for name in sorted(before.keys() | after.keys()):
        old, new = before.get(name), after.get(name)
        path = prefix + name
        if isinstance(old, dict) and isinstance(new, dict):
            out += setting_changes(old, new, path + ".")
        elif old != new:
            out.append((path, old, new))
    return out


class NamespaceService:
    def __init__(self, db: Database) -> None:
        self.db = db
        # Namespaces are never deleted through the API, so a name once seen stays
        # valid: skip the lookup on the ingest hot path.
        self._known: set[str] = set()
        self._inputs: dict[str, tuple[float, tuple[NamespaceSettings, int, int]]] = {}

    def require(self, session: Session, name: str) -> None:
        if name in self._known:
            return
        if repo.read_namespace(session, name) is None:
            raise NotFound(f"namespace {name!r} not found", field="namespace")
        self._known.add(name)

    def get_or_404(
        self, session: Session, ns: str, what: str, id: str, read: Callable[[], R | None], *, field: str = "id"
    ) -> R:
        """`read()`'s row of namespace `ns`, after checking the namespace exists; a
        NotFound naming `what` and `field` when either is missing."""
        self.require(session, ns)
        row = read()
        if row is None:
            raise NotFound(f"{what} {id!r} not found in namespace {ns!r}", field=field)
        return row

    def ranking_inputs(self, name: str) -> tuple[NamespaceSettings, int, int]:
        """(settings, outcome successes, outcomes) for ranking (a `calibrated` lexical
        weight resolved to a number), read at most once per
        RANKING_INPUTS_TTL in this process: a baseline a second old ranks the same,
        and this process's own credits refresh it at once (`outcomes_changed`)."""
        now = time.monotonic()
        hit = self._inputs.get(name)
        if hit is not None and hit[0] > now:
            return hit[1]
        with self.db.read() as session:
            row = repo.read_ranking_inputs(session, name)
        if row is None:
            raise NotFound(f"namespace {name!r} not found", field="namespace")
        inputs = (ranking_settings(row[0], row[3]), row[1], row[2])
        self._inputs[name] = (now + RANKING_INPUTS_TTL, inputs)
        return inputs

    def outcomes_changed(self, name: str) -> None:
        self._inputs.pop(name, None)

    def is_frozen(self, session: Session, name: str) -> bool:
        """Read in the caller's unit of work, so a freeze committed before it is seen
        (an edit or a credit checks this inside the transaction it writes in)."""
        return repo.read_frozen(session, name)

    def frozen_changed(self, name: str) -> None:
        self._inputs.pop(name, None)

    def settings(self, principal: Principal, ns: str) -> dict[str, Any]:
        """The namespace's settings with every default filled in."""
        principal.require(Permission.NAMESPACES_CONFIGURE, ns)
        with self.db.read() as session:
            row = repo.read_namespace(session, ns)
            if row is None:
                raise NotFound(f"namespace {ns!r} not found", field="namespace")
            return parse_settings(row.settings).model_dump(mode="json")

    def update_settings(self, principal: Principal, ns: str, raw: Any) -> dict[str, Any]:
        """Replace the settings (validated whole: an unknown field or a bad value is a
        422 naming it). This process ranks with them at once, others within
        RANKING_INPUTS_TTL."""
        principal.require(Permission.NAMESPACES_CONFIGURE, ns)
        try:
            settings = NamespaceSettings.model_validate(raw).model_dump(mode="json")
        except ValidationError as exc:
            err = exc.errors()[0]
            where = ".".join(str(p) for p in err.get("loc", ())) or "settings"
            raise InvalidInput(
                f"settings.{where}: {err.get('msg', 'invalid')}", field=f"settings.{where}", rule=err["type"]
            ) from None

        def work(session: Session) -> None:
            row = repo.read_namespace(session, ns)
            if row is None:
                raise NotFound(f"namespace {ns!r} not found", field="namespace")
            before = parse_settings(row.settings).model_dump(mode="json")
            repo.update_settings(session, ns, settings)
            # In the same transaction: no change without its history row.
            repo.create_setting_changes(session, ns, setting_changes(before, settings), actor=f"key:{principal.key_id}")

        self.db.run_write(work)
        self._inputs.pop(ns, None)
        return settings

    def setting_history(
        self, principal: Principal, ns: str, *, cursor: str | None, limit: int
    ) -> tuple[list[SettingChangeRead], str | None]:
        """Who changed which setting when, newest first."""
        principal.require(Permission.NAMESPACES_CONFIGURE, ns)
        with self.db.read() as session:
            self.require(session, ns)
            rows, next_cursor = keyset_page(
                lambda before, n: repo.list_setting_changes(session, ns, before_pk=before, limit=n),
                cursor=cursor,
                limit=limit,
                key=lambda c: c.pk,
            )
            return [SettingChangeRead.from_row(r) for r in rows], next_cursor

    def create(self, principal: Principal, body: NamespaceCreate) -> tuple[NamespaceRead, bool]:
        """Returns (namespace, created). An identical repeat is a replay; a
        different one for an existing name is a conflict."""
        principal.require(Permission.NAMESPACES_CREATE)
        settings = body.settings.model_dump(mode="json")

        def work(session: Session) -> tuple[NamespaceRead, bool]:
            existing = repo.read_namespace(session, body.name)
            if existing is not None:
                if existing.settings != settings:
                    raise Conflict(
                        f"namespace {body.name!r} exists with different settings",
                        field="settings",
                        rule="idempotent_replay",
                    )
                return NamespaceRead.from_row(existing), False
            row = repo.create_namespace(session, body.name, settings)
            return NamespaceRead.from_row(row), True

        result = self.db.run_write(work)
        self._known.add(body.name)
        return result

    def list(self, principal: Principal) -> list[NamespaceRead]:
        scope = None if principal.all_namespaces else principal.namespaces
        with self.db.read() as session:
            return [NamespaceRead.from_row(r) for r in repo.list_namespaces(session, scope)]

    def get(self, principal: Principal, name: str) -> NamespaceRead:
        if not principal.can_see(name):
            raise NotFound(f"namespace {name!r} not found", field="namespace")
        with self.db.read() as session:
            row = repo.read_namespace(session, name)
            if row is None:
                raise NotFound(f"namespace {name!r} not found", field="namespace")
            return NamespaceRead.from_row(row)
