"""Browsing and curation of reflections: every edit is a new version with the old
one kept; every status change is recorded with who, what and when."""

from __future__ import annotations

from sqlalchemy.orm import Session

from domain.errors import Conflict, InvalidInput
from domain.jobs import REFLECTION_EMBED
from service.auth import Permission, Principal
from service.limits.checks import LimitChecker
from service.namespaces.service import NamespaceService
from service.pagination import decode_pair_cursor, encode_pair_cursor, keyset_page
from service.reflections.schemas import (
    HoldoutArm,
    ReflectionEffect,
    ReflectionPage,
    ReflectionRead,
    ReflectionUpdate,
    ReflectionVersionRead,
)
from service.retrieval.holdout import effect_of
from service.retrieval.ranking import baseline_rate
from store import evidence as evidence_repo
from store import reflections as repo
from store import retrievals as retrievals_repo
from store.database import Database
from store.models import Reflection

LIST_EVIDENCE = 5
FULL_EVIDENCE = 1000

# old status -> new status -> the history action that names the change
_ACTIONS = {
    ("candidate", "active"): "approve",
    ("retired", "active"): "restore",
    ("retired", "candidate"): "restore",
}


def _action(old: str, new: str) -> str:
    if new == "retired":
        return "retire"
    return _ACTIONS.get((old, new), "status")


class ReflectionService:
    def __init__(self, db: Database, namespaces: NamespaceService, checker: LimitChecker) -> None:
        self.db = db
        self.namespaces = namespaces
        self.checker = checker

    def _get_or_404(self, session: Session, ns: str, id: str, *, for_update: bool = False) -> Reflection:
        return self.namespaces.get_or_404(
            session, ns, "reflection", id, lambda: repo.read_reflection(session, ns, id, for_update=for_update)
        )

    def _read(self, session: Session, row: Reflection) -> ReflectionRead:
        evidence = evidence_repo.list_evidence_summaries(session, [row.pk], FULL_EVIDENCE)
        return ReflectionRead.from_row(row, evidence[row.pk])

    def list(
        self,
        principal: Principal,
        ns: str,
        filters: repo.ReflectionFilters,
        *,
        cursor: str | None,
        limit: int,
        sort: repo.ReflectionSort | None = None,
    ) -> ReflectionPage:
        """Newest first, or by `sort` (each pages with its own cursor)."""
        principal.require(Permission.REFLECTIONS_READ, ns)
        with self.db.read() as session:
            self.namespaces.require(session, ns)
            if sort is None:
                rows, next_cursor = keyset_page(
                    lambda before, n: repo.list_reflections(session, ns, filters, before_pk=before, limit=n),
                    cursor=cursor,
                    limit=limit,
                    key=lambda r: r.pk,
                )
            else:
                rows, next_cursor = self._sorted_page(session, ns, filters, sort, cursor, limit)
            evidence = evidence_repo.list_evidence_summaries(session, [r.pk for r in rows], LIST_EVIDENCE)
            return ReflectionPage(
                items=[ReflectionRead.from_row(r, evidence[r.pk]) for r in rows], next_cursor=next_cursor
            )

    @staticmethod
    def _sorted_page(
        session: Session,
        ns: str,
        filters: repo.ReflectionFilters,
        sort: repo.ReflectionSort,
        cursor: str | None,
        limit: int,
    ) -> tuple[list[Reflection], str | None]:
        kind = f"reflections-{sort}"  # a cursor of one order is refused by another
        after = decode_pair_cursor(cursor, kind, lambda value, pk: (float(value), int(pk)))
        found = repo.list_reflections_sorted(session, ns, filters, sort, after=after, limit=limit + 1)
        page = found[:limit]
        last = page[-1] if len(found) > limit else None
        return [r for r, _ in page], (encode_pair_cursor(kind, repr(last[1]), str(last[0].pk)) if last else None)

    def get(self, principal: Principal, ns: str, id: str) -> ReflectionRead:
        principal.require(Permission.REFLECTIONS_READ, ns)
        with self.db.read() as session:
            return self._read(session, self._get_or_404(session, ns, id))

    def history(self, principal: Principal, ns: str, id: str) -> list[ReflectionVersionRead]:
        principal.require(Permission.REFLECTIONS_READ, ns)
        with self.db.read() as session:
            row = self._get_or_404(session, ns, id)
            return [ReflectionVersionRead.from_row(v) for v in repo.list_reflection_versions(session, row.pk)]

    def effect(self, principal: Principal, ns: str, id: str) -> ReflectionEffect:
        """The item's causal effect on success from the holdout draws (holdout.py)."""
        principal.require(Permission.REFLECTIONS_READ, ns)
        with self.db.read() as session:
            row = self._get_or_404(session, ns, id)
            counts = retrievals_repo.list_holdout_counts(session, ns, [row.pk]).get(row.pk)
        settings, successes, total = self.namespaces.ranking_inputs(ns)
        return effect_read(id, counts, baseline_rate(successes, total), settings.credit.holdout_rate)

    def update(self, principal: Principal, ns: str, id: str, body: ReflectionUpdate) -> ReflectionRead:
        principal.require(Permission.REFLECTIONS_CURATE, ns)
        if body.content is None and body.text is None and body.status is None:
            raise InvalidInput("nothing to change: give content, text or status", field="body", rule="non_empty")
        self.checker.json(body.content, "content")
        actor = f"key:{principal.key_id}"

        def work(session: Session) -> ReflectionRead:
            row = self.editable(session, ns, id, body.expected_version)
            if body.content is not None or body.text is not None:
                content = body.content if body.content is not None else row.content
                if row.kind == "exemplar" and not {"observation", "action"} <= set(content):
                    raise InvalidInput(
                        "an exemplar's content needs its observation and action", field="content", rule="exemplar"
                    )
                repo.update_reflection(session, row, content=content, text=body.text, actor=actor, note=body.note)
                # Its vectors follow its new text; the index picks them up through the feed.
                REFLECTION_EMBED.enqueue(
                    session, ns, {"reflection_pk": row.pk, "version": row.version}, row.pk, row.version
                )
            if body.status is not None and body.status != row.status:
                self.change_status(session, row, body.status, actor=actor, note=body.note)
            return self._read(session, row)

        return self.db.run_write(work)

    def editable(self, session: Session, ns: str, id: str, expected_version: int | None) -> Reflection:
        """The row, locked for a change: 404 if absent, 409 if the namespace is frozen
        or someone else changed it since `expected_version`."""
        row = self._get_or_404(session, ns, id, for_update=True)
        if self.namespaces.is_frozen(session, ns):
            raise Conflict(
                f"namespace {ns!r} is frozen for evaluation: its reflections cannot change until it is thawed",
                field="namespace",
                rule="namespace_frozen",
            )
        if expected_version is not None and expected_version != row.version:
            raise Conflict(
                f"reflection {id!r} is at version {row.version}, not {expected_version}; reload and retry",
                field="expected_version",
                rule="version_match",
            )
        return row

    @staticmethod
    def change_status(session: Session, row: Reflection, status: str, *, actor: str, note: str | None) -> str:
        """Approve, retire or restore, recorded with who and why; returns the action."""
        action = _action(row.status, status)
        repo.update_reflection_status(session, row, status, action=action, actor=actor, note=note)
        return action


def effect_read(
    id: str, counts: retrievals_repo.HoldoutCounts | None, baseline: float, rate: float
) -> ReflectionEffect:
    """One item's holdout counts as the API (and the operator pages) show them."""
    e = effect_of(counts or retrievals_repo.HoldoutCounts(), baseline)
    served, withheld = e.served, e.withheld
    return ReflectionEffect(
        reflection_id=id,
        holdout_rate=rate,
        baseline=baseline,
        served=HoldoutArm(units=served.units, successes=served.successes, rate=served.rate(baseline)),
        withheld=HoldoutArm(units=withheld.units, successes=withheld.successes, rate=withheld.rate(baseline)),
        effect=e.effect,
        low=e.low,
        high=e.high,
        verdict=e.verdict,  # type: ignore[arg-type]
    )
