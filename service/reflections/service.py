"""Browsing and curation of reflections: every edit is a new version with the old
one kept; every status change is recorded with who, what and when."""

from __future__ import annotations

from service.auth import Permission, Principal
from service.errors import Conflict, InvalidInput, NotFound
from service.limits import LimitChecker
from service.namespaces.service import NamespaceService
from service.pagination import decode_cursor, encode_cursor
from service.reflections.schemas import (
    ReflectionRead,
    ReflectionUpdate,
    ReflectionUtility,
    ReflectionVersionRead,
)
from service.retrieval.schemas import EvidenceRead
from store import jobs as jobs_repo
from store import reflections as repo
from store import retrievals as retrievals_repo
from store.database import Database
from store.models import Reflection

EMBED_JOB_KIND = "reflection.embed"
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


def _read(row: Reflection, evidence: list[tuple[str, int | None, int | None]]) -> ReflectionRead:
    return ReflectionRead(
        id=row.id,
        kind=row.kind,  # type: ignore[arg-type]
        status=row.status,  # type: ignore[arg-type]
        version=row.version,
        content=row.content,
        text=row.text,
        environment=row.environment,
        task=row.task,
        reflector=row.reflector,
        reflector_version=row.reflector_version,
        model=row.model,
        evidence_count=row.evidence_count,
        evidence_successes=row.evidence_successes,
        evidence_failures=row.evidence_failures,
        evidence_value=row.evidence_value,
        utility=ReflectionUtility(
            uses=row.uses, successes=row.successes, failures=row.failures, reward_sum=row.reward_sum
        ),
        evidence=[EvidenceRead(trajectory_id=t, step_start=s, step_end=e) for t, s, e in evidence],
        created_at=row.created_at,
        updated_at=row.updated_at,
    )


class ReflectionService:
    def __init__(self, db: Database, namespaces: NamespaceService, checker: LimitChecker) -> None:
        self.db = db
        self.namespaces = namespaces
        self.checker = checker

    def list(
        self,
        principal: Principal,
        ns: str,
        filters: repo.ReflectionFilters,
        *,
        cursor: str | None,
        limit: int,
    ) -> tuple[list[ReflectionRead], str | None]:
        principal.require(Permission.REFLECTIONS_READ, ns)
        with self.db.read() as session:
            self.namespaces.require(session, ns)
            rows = repo.list_reflections(session, ns, filters, before_pk=decode_cursor(cursor), limit=limit + 1)
            page = rows[:limit]
            evidence = retrievals_repo.evidence_summaries(session, [r.pk for r in page], LIST_EVIDENCE)
            items = [_read(r, evidence[r.pk]) for r in page]
        return items, (encode_cursor(page[-1].pk) if len(rows) > limit else None)

    def get(self, principal: Principal, ns: str, id: str) -> ReflectionRead:
        principal.require(Permission.REFLECTIONS_READ, ns)
        with self.db.read() as session:
            self.namespaces.require(session, ns)
            row = self._get_or_404(session, ns, id)
            evidence = retrievals_repo.evidence_summaries(session, [row.pk], FULL_EVIDENCE)
            return _read(row, evidence[row.pk])

    def history(self, principal: Principal, ns: str, id: str) -> list[ReflectionVersionRead]:
        principal.require(Permission.REFLECTIONS_READ, ns)
        with self.db.read() as session:
            self.namespaces.require(session, ns)
            row = self._get_or_404(session, ns, id)
            return [
                ReflectionVersionRead(
                    version=v.version,
                    action=v.action,
                    status=v.status,  # type: ignore[arg-type]
                    content=v.content,
                    actor=v.actor,
                    note=v.note,
                    created_at=v.created_at,
                )
                for v in repo.history(session, row.pk)
            ]

    def update(self, principal: Principal, ns: str, id: str, body: ReflectionUpdate) -> ReflectionRead:
        principal.require(Permission.REFLECTIONS_CURATE, ns)
        if body.content is None and body.text is None and body.status is None:
            raise InvalidInput("nothing to change: give content, text or status", field="body", rule="non_empty")
        self.checker.json(body.content, "content")
        self.checker.text(body.text, "text")
        self.checker.text(body.note, "note")
        actor = f"key:{principal.key_id}"
        with self.db.write() as session:
            self.namespaces.require(session, ns)
            row = self._get_or_404(session, ns, id, for_update=True)
            if body.expected_version is not None and body.expected_version != row.version:
                raise Conflict(
                    f"reflection {id!r} is at version {row.version}, not {body.expected_version}; reload and retry",
                    field="expected_version",
                    rule="version_match",
                )
            if body.content is not None or body.text is not None:
                content = body.content if body.content is not None else row.content
                if row.kind == "exemplar" and not {"observation", "action"} <= set(content):
                    raise InvalidInput(
                        "an exemplar's content needs its observation and action", field="content", rule="exemplar"
                    )
                repo.edit_reflection(session, row, content=content, text=body.text, actor=actor, note=body.note)
                # Its vectors follow its new text; the index picks them up through the feed.
                jobs_repo.enqueue_job(
                    session,
                    namespace=ns,
                    kind=EMBED_JOB_KIND,
                    payload={"reflection_pk": row.pk, "version": row.version},
                    dedup_key=f"{EMBED_JOB_KIND}:{row.pk}:{row.version}",
                    priority=20,
                )
            if body.status is not None and body.status != row.status:
                repo.set_status(
                    session, row, body.status, action=_action(row.status, body.status), actor=actor, note=body.note
                )
            evidence = retrievals_repo.evidence_summaries(session, [row.pk], FULL_EVIDENCE)
            return _read(row, evidence[row.pk])

    def _get_or_404(self, session, ns: str, id: str, *, for_update: bool = False) -> Reflection:  # type: ignore[no-untyped-def]
        row = repo.get_reflection(session, ns, id, for_update=for_update)
        if row is None:
            raise NotFound(f"reflection {id!r} not found in namespace {ns!r}", field="id")
        return row
