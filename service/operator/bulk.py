"""Bulk curation of a filtered set: count it, then retire or approve every match.

The operator confirms the count first; the action refuses (409) when the set has
changed since, so nobody retires more than they saw. Rows change in chunks, each
its own transaction (a writer never holds SQLite's lock for the whole set); every
row's change is whole and recorded in its history, and re-running the action
finishes what an interrupted one left."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

from sqlalchemy.orm import Session

from domain.errors import Conflict, InvalidInput
from service.auth import Permission, Principal
from service.namespaces.service import NamespaceService
from service.reflections.service import ReflectionService
from store import reflections as repo
from store.database import Database
from store.models import Reflection
from store.reflections import ReflectionFilters

BulkAction = Literal["retire", "approve"]
TARGET = {"retire": "retired", "approve": "active"}
CHUNK = 500
PREVIEW = 10  # reflections listed on the confirmation


def is_unfiltered(filters: ReflectionFilters) -> bool:
    """No filter narrows the set: the action would reach every reflection."""
    return all(
        value is None
        for value in (
            filters.kind,
            filters.status,
            filters.environment,
            filters.reflector,
            filters.utility_min,
            filters.utility_max,
        )
    )


@dataclass
class BulkResult:
    action: str
    matched: int
    changed: int


class BulkService:
    def __init__(self, db: Database, namespaces: NamespaceService, max_items: int) -> None:
        self.db = db
        self.namespaces = namespaces
        self.max_items = max_items

    @staticmethod
    def _pending(filters: ReflectionFilters, action: str) -> ReflectionFilters:
        """The matching rows the action would change: those not already in its status."""
        if action not in TARGET:
            raise InvalidInput(f"action {action!r} is not one of retire, approve", field="action", rule="enum")
        return replace(filters, exclude_status=TARGET[action])

    def count(self, principal: Principal, ns: str, filters: ReflectionFilters, action: str) -> int:
        """How many reflections the action would change."""
        principal.require(Permission.REFLECTIONS_CURATE, ns)
        pending = self._pending(filters, action)
        with self.db.read() as session:
            self.namespaces.require(session, ns)
            return repo.count_reflections(session, ns, pending)

    def preview(
        self, principal: Principal, ns: str, filters: ReflectionFilters, action: str, limit: int = PREVIEW
    ) -> list[Reflection]:
        """The newest of the reflections the action would change (what the operator is
        about to touch, not only how many)."""
        principal.require(Permission.REFLECTIONS_CURATE, ns)
        pending = self._pending(filters, action)
        with self.db.read() as session:
            self.namespaces.require(session, ns)
            return repo.list_reflections(session, ns, pending, before_pk=None, limit=limit)

    def apply(
        self,
        principal: Principal,
        ns: str,
        filters: ReflectionFilters,
        action: str,
        *,
        confirmed_count: int,
        note: str | None,
        everything: bool = False,
    ) -> BulkResult:
        """`everything`: the operator confirmed an action with no filter at all (the
        whole namespace); without it an unfiltered action is refused."""
        if not everything and is_unfiltered(filters):
            raise InvalidInput(
                "filters: choose at least one filter, or confirm the action on every reflection of the namespace",
                field="everything",
                rule="filter_or_everything",
            )
        pending = self._pending(filters, action)
        matched = self.count(principal, ns, filters, action)
        if matched != confirmed_count:
            raise Conflict(
                f"{matched} reflections match now, not the {confirmed_count} confirmed; review the set again",
                field="confirm_count",
                rule="count_changed",
            )
        if matched > self.max_items:
            raise InvalidInput(
                f"{matched} reflections match; a bulk action changes at most {self.max_items} (narrow the filters)",
                field="filters",
                rule="max_bulk_items",
            )
        target = TARGET[action]
        actor = f"key:{principal.key_id}"
        changed = 0
        after = 0
        while True:

            def chunk(session: Session, after_pk: int = after) -> tuple[int, int | None]:
                if self.namespaces.is_frozen(session, ns):
                    raise Conflict(
                        f"namespace {ns!r} is frozen for evaluation: its reflections cannot change until it is thawed",
                        field="namespace",
                        rule="namespace_frozen",
                    )
                rows = repo.list_reflections_for_update(session, ns, pending, after_pk=after_pk, limit=CHUNK)
                for row in rows:
                    ReflectionService.change_status(session, row, target, actor=actor, note=note)
                return len(rows), (rows[-1].pk if len(rows) == CHUNK else None)

            n, last = self.db.run_write(chunk)
            changed += n
            if last is None:
                return BulkResult(action, matched, changed)
            after = last
