"""Namespaces: creation (idempotent by name) and the existence check every
namespaced request goes through."""

from __future__ import annotations

import time

from sqlalchemy.orm import Session

from service.auth import Permission, Principal
from service.errors import Conflict, NotFound
from service.namespaces.schemas import NamespaceCreate, NamespaceRead, NamespaceSettings, parse_settings
from store import namespaces as repo
from store.database import Database

RANKING_INPUTS_TTL = 1.0  # seconds


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
        if repo.get_namespace(session, name) is None:
            raise NotFound(f"namespace {name!r} not found", field="namespace")
        self._known.add(name)

    def ranking_inputs(self, name: str) -> tuple[NamespaceSettings, int, int]:
        """(settings, outcome successes, outcomes) for ranking, read at most once per
        RANKING_INPUTS_TTL in this process: a baseline a second old ranks the same,
        and this process's own credits refresh it at once (`outcomes_changed`)."""
        now = time.monotonic()
        hit = self._inputs.get(name)
        if hit is not None and hit[0] > now:
            return hit[1]
        with self.db.read() as session:
            row = repo.ranking_inputs(session, name)
        if row is None:
            raise NotFound(f"namespace {name!r} not found", field="namespace")
        inputs = (parse_settings(row[0]), row[1], row[2])
        self._inputs[name] = (now + RANKING_INPUTS_TTL, inputs)
        return inputs

    def outcomes_changed(self, name: str) -> None:
        self._inputs.pop(name, None)

    def create(self, principal: Principal, body: NamespaceCreate) -> tuple[NamespaceRead, bool]:
        """Returns (namespace, created). An identical repeat is a replay; a
        different one for an existing name is a conflict."""
        principal.require(Permission.NAMESPACES_CREATE)
        settings = body.settings.model_dump(mode="json")

        def work(session: Session) -> tuple[NamespaceRead, bool]:
            existing = repo.get_namespace(session, body.name)
            if existing is not None:
                if existing.settings != settings:
                    raise Conflict(
                        f"namespace {body.name!r} exists with different settings",
                        field="settings",
                        rule="idempotent_replay",
                    )
                return NamespaceRead.model_validate(existing, from_attributes=True), False
            row = repo.insert_namespace(session, body.name, settings)
            return NamespaceRead.model_validate(row, from_attributes=True), True

        result = self.db.run_write(work)
        self._known.add(body.name)
        return result

    def list(self, principal: Principal) -> list[NamespaceRead]:
        scope = None if principal.all_namespaces else principal.namespaces
        with self.db.read() as session:
            return [NamespaceRead.model_validate(r, from_attributes=True) for r in repo.list_namespaces(session, scope)]
