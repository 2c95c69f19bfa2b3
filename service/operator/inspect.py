"""Why a memory exists and whether it helped: a reflection with its evidence, its
version history as diffs, its utility with uncertainty and how often it was served
with what outcomes; an episode with the retrievals made during it; the retrieval log."""

from __future__ import annotations

import difflib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from domain.errors import NotFound
from domain.reflections import KINDS
from service.auth import Permission, Principal
from service.namespaces.service import NamespaceService
from service.operator.history import VersionEntry, VoteRun, history_rows
from service.operator.repository import retrieval_log as repo
from service.operator.repository.retrieval_log import LoggedRetrieval, ServedDay, Serving
from service.pagination import decode_pair_cursor, encode_pair_cursor
from service.reflections.schemas import ReflectionEffect, ReflectionRead
from service.reflections.service import ReflectionService
from service.retrieval import ranking
from service.retrieval.schemas import RetrievedItem, RetrieveFilters, RetrieveRequest
from service.retrieval.service import RetrievalService
from service.trajectories.schemas import State, TrajectoryRead
from service.trajectories.service import TrajectoryService
from store import reflections as reflection_repo
from store.database import Database

EPISODE_RETRIEVALS = 500  # at most this many retrievals shown with one episode
SEARCH_K = 20
SERVED_IN = 20  # the newest retrievals listed on a reflection's page


def content_text(content: dict[str, Any]) -> str:
    return json.dumps(content, indent=2, sort_keys=True, ensure_ascii=False)


def text_diff(before: str, after: str, after_name: str) -> list[str]:
    """A unified diff of two texts, without the ---/+++ header (the page names both)."""
    if before == after:
        return []
    return list(difflib.unified_diff(before.splitlines(), after.splitlines(), "before", after_name, lineterm="", n=2))[
        2:
    ]


@dataclass
class StaleEdit:
    """An edit made against an older version: what others changed since, and what the
    edit would change in the current version (so it can be resubmitted knowingly)."""

    base_version: int
    since: list[VersionEntry]  # the history entries after the version edited, oldest first
    changed_since: list[str]  # content diff: the version edited -> the current one
    content_diff: list[str]  # the current content -> the edit's
    text_diff: list[str]  # the current text -> the edit's


@dataclass
class ReflectionDetail:
    reflection: ReflectionRead
    utility: ranking.Utility
    history: list[VersionEntry | VoteRun]  # oldest first
    served_by_day: list[ServedDay]
    served_in: list[Serving]  # the newest retrievals that served it
    served_total: int
    outcome_successes: int
    outcome_failures: int
    effect: ReflectionEffect  # the causal effect from the random holdout (none drawn: no support)


@dataclass
class Episode:
    trajectory: TrajectoryRead
    retrievals: list[LoggedRetrieval]

    def placed(self) -> tuple[dict[int, list[LoggedRetrieval]], list[LoggedRetrieval]]:
        """The retrievals by the step they served, and those whose step is not known
        (not named by the agent, or not a step of this episode)."""
        indexes = {s.index for s in self.trajectory.steps or []}
        by_step: dict[int, list[LoggedRetrieval]] = {}
        unplaced = []
        for r in self.retrievals:
            if r.step in indexes:
                by_step.setdefault(r.step, []).append(r)
            else:
                unplaced.append(r)
        return by_step, unplaced


@dataclass
class RetrievalLogPage:
    items: list[LoggedRetrieval]
    next_cursor: str | None


def _time_and_id(at: str, id: str) -> tuple[datetime, str]:
    when = datetime.fromisoformat(at)
    if when.tzinfo is None:
        raise ValueError("a cursor's time carries its offset")
    return when, id


class InspectService:
    def __init__(
        self,
        db: Database,
        namespaces: NamespaceService,
        reflections: ReflectionService,
        trajectories: TrajectoryService,
        retrieval: RetrievalService,
    ) -> None:
        self.db = db
        self.namespaces = namespaces
        self.reflections = reflections
        self.trajectories = trajectories
        self.retriever = retrieval

    def utilities(self, ns: str, rows: Sequence[Any]) -> dict[str, ranking.Utility]:
        """id -> posterior utility (mean and uncertainty) at the namespace's baseline, for
        reflection rows or `ReflectionRead`s (whose counters sit under `.utility`)."""
        baseline = self.baseline(ns)
        out = {}
        for row in rows:
            u = row.utility if hasattr(row, "utility") else row
            out[row.id] = ranking.utility(u.successes, u.failures, u.uses, baseline)
        return out

    def search(
        self,
        principal: Principal,
        ns: str,
        text: str,
        *,
        kind: str | None,
        statuses: list[str],
        environment: str | None,
        k: int = SEARCH_K,
    ) -> list[RetrievedItem]:
        """Reflections for a state text through the real retrieval path (the same
        candidates, ranking and filters an agent gets), not logged: an operator's
        look earns no credit."""
        req = RetrieveRequest(
            state=State(observation=text),
            kinds=[kind] if kind else list(KINDS),
            environment=environment,
            k=k,
            filters=RetrieveFilters(status=statuses),
        )
        return self.retriever.retrieve_many(principal, ns, [req], field="", log=False)[0].items

    def baseline(self, ns: str) -> float:
        _, successes, total = self.namespaces.ranking_inputs(ns)
        return ranking.baseline_rate(successes, total)

    def reflection(self, principal: Principal, ns: str, id: str) -> ReflectionDetail:
        ref = self.reflections.get(principal, ns, id)  # checks the scope and permission
        history = self.reflections.history(principal, ns, id)
        with self.db.read() as session:
            row = reflection_repo.read_reflection(session, ns, id)
            if row is None:  # deleted between the two reads
                raise NotFound(f"reflection {id!r} not found in namespace {ns!r}", field="id")
            served = repo.list_served_by_day(session, row.pk)
            served_in = repo.list_servings(session, row.pk, limit=SERVED_IN)
        u = ref.utility
        return ReflectionDetail(
            reflection=ref,
            utility=ranking.utility(u.successes, u.failures, u.uses, self.baseline(ns)),
            history=history_rows(history),
            served_by_day=served,
            served_in=served_in,
            served_total=sum(d.served for d in served),
            outcome_successes=sum(d.successes for d in served),
            outcome_failures=sum(d.failures for d in served),
            effect=self.reflections.effect(principal, ns, id),
        )

    def stale_edit(
        self, principal: Principal, ns: str, id: str, base_version: int, content: dict[str, Any], text: str | None
    ) -> StaleEdit:
        current = self.reflections.get(principal, ns, id)
        history = self.reflections.history(principal, ns, id)
        base = next((v.content for v in history if v.version == base_version), None)
        now = content_text(current.content)
        return StaleEdit(
            base_version=base_version,
            since=[VersionEntry(v, []) for v in history if v.version > base_version],
            changed_since=[] if base is None else text_diff(content_text(base), now, f"version {current.version}"),
            content_diff=text_diff(now, content_text(content), "your edit"),
            text_diff=[] if text is None else text_diff(current.text, text, "your edit"),
        )

    def episode(self, principal: Principal, ns: str, trajectory_id: str) -> Episode:
        trajectory = self.trajectories.get(principal, ns, trajectory_id)
        principal.require(Permission.RETRIEVE, ns)
        with self.db.read() as session:
            retrievals = repo.list_episode_retrievals(session, ns, trajectory_id, EPISODE_RETRIEVALS)
        return Episode(trajectory, retrievals)

    def retrievals(
        self, principal: Principal, ns: str, *, trajectory_id: str | None, cursor: str | None, limit: int
    ) -> RetrievalLogPage:
        principal.require(Permission.RETRIEVE, ns)
        principal.require(Permission.TRAJECTORIES_READ, ns)
        before = decode_pair_cursor(cursor, "retrieval", _time_and_id)
        with self.db.read() as session:
            self.namespaces.require(session, ns)
            rows = repo.list_logged_retrievals(session, ns, trajectory_id=trajectory_id, before=before, limit=limit + 1)
        page = rows[:limit]
        last = page[-1] if page else None
        next_cursor = (
            encode_pair_cursor("retrieval", last.created_at.isoformat(), last.id)
            if last is not None and len(rows) > limit
            else None
        )
        return RetrievalLogPage(page, next_cursor)

    def retrieval(self, principal: Principal, ns: str, id: str) -> LoggedRetrieval:
        principal.require(Permission.RETRIEVE, ns)
        principal.require(Permission.TRAJECTORIES_READ, ns)
        with self.db.read() as session:
            return self.namespaces.get_or_404(
                session, ns, "retrieval", id, lambda: repo.read_logged_retrieval(session, ns, id)
            )
