"""Dataset exports for trainers: checked up front, then streamed in bounded memory.

`open()` does everything that can fail with a clean 4xx (permission, namespace,
snapshot, parameters) before the first byte; what it returns is a lazy stream.
The stream reads in keyset batches (`batch_trajectories` trajectories, their
steps `batch_steps` at a time), each batch in a short read unit of its own: no
transaction is held across the stream, and memory holds one batch, not the
export. Under a snapshot every read goes through its views, so the same request
writes the same bytes for as long as the snapshot lives.

SFT prompts with a teacher context (`context=memory|evidence_card|attempt_summary`)
are built by service/distill, a chunk of trajectories per call: the same contexts
POST …/distill/contexts answers for them, leakage guards on.
"""

from __future__ import annotations

import dataclasses
import re
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from itertools import islice
from typing import TYPE_CHECKING, Any, TypeVar

from sqlalchemy.orm import Session

from domain.contexts.templates import load_template
from domain.errors import InvalidInput
from domain.hashing import task_hash
from service.auth import Permission, Principal
from service.distill.contexts.schemas import TeacherSpec
from service.export import repository as repo
from service.export import rows as build
from service.export.formats import jsonl_chunks, parquet_chunks
from service.export.schemas import MEDIA_TYPES, ROW_GROUP_ROWS, SCHEMAS, ExportQuery
from service.namespaces.service import NamespaceService
from service.settings import Limits
from service.snapshots.service import SnapshotService
from store import trajectory_reader as reader
from store.database import Database
from store.records import record_columns
from store.trajectory_reader import MAX_IN, ROLLOUT_FIELDS, STEP_COLUMNS, TrajectoryFilter

# The context template of sft prompts, plain and teacher alike (its name@version in
# every row's template_version).
SFT_TEMPLATE = "default"

# Exports carry a step's content but not its metadata; the per-token rollout arrays
# only where they are written (the `trajectories` dataset), not where prompts are built.
TRAJECTORY_STEP_COLUMNS = tuple(c for c in STEP_COLUMNS if c != "metadata")
EXPORTED_STEP_COLUMNS = tuple(c for c in TRAJECTORY_STEP_COLUMNS if c not in ROLLOUT_FIELDS)

if TYPE_CHECKING:
    from service.distill.contexts.service import DistillService

Row = Any  # a store row mapping
T = TypeVar("T")

# Parameters that only mean something for one dataset: giving one to another
# dataset is refused rather than silently ignored.
_ONLY_FOR = {
    "context": "sft",
    "history": "sft",
    "history_max_chars": "sft",
    "max_pairs_per_state": "preferences",
    "hints": "preferences",
}

# A query parameter named like a trajectory filter is that filter (environment, agent,
# task, success, created_after, …).
_FILTER_PARAMETERS = tuple(name for name in record_columns(TrajectoryFilter) if name in ExportQuery.model_fields)


@dataclass(frozen=True)
class Export:
    filename: str
    media_type: str
    chunks: Iterator[bytes]


@dataclass(frozen=True)
class _Source:
    """Where a stream reads from: a namespace, live (None) or as of a snapshot; who
    asks, and what builds teacher contexts (both for SFT prompts built by distill)."""

    namespace: str
    snapshot_pk: int | None
    snapshot_id: str | None = None
    principal: Principal | None = None
    distill: DistillService | None = None


def chunked(items: Sequence[T], weight: Callable[[T], int], *, budget: int, most: int) -> Iterator[list[T]]:
    """Consecutive runs of `items`, each of at most `most` items and, unless one
    item alone exceeds it, at most `budget` total weight."""
    chunk: list[T] = []
    total = 0
    for item in items:
        w = weight(item)
        if chunk and (total + w > budget or len(chunk) >= most):
            yield chunk
            chunk, total = [], 0
        chunk.append(item)
        total += w
    if chunk:
        yield chunk


def _filename(ns: str, dataset: str, snapshot: str | None, extension: str) -> str:
    stem = f"{ns}-{dataset}" + (f"-{snapshot}" if snapshot else "")
    return re.sub(r"[^A-Za-z0-9._-]", "_", stem) + "." + extension


class ExportService:
    def __init__(
        self,
        db: Database,
        namespaces: NamespaceService,
        snapshots: SnapshotService,
        limits: Limits,
        *,
        batch_trajectories: int = 500,
        batch_steps: int = 5_000,
        batch_tasks: int = 100,
    ) -> None:
        self.db = db
        self.namespaces = namespaces
        self.snapshots = snapshots
        self.limits = limits
        self.batch_trajectories = min(batch_trajectories, MAX_IN)
        self.batch_steps = batch_steps
        self.batch_tasks = batch_tasks

    # -- the request ---------------------------------------------------------------

    def open(
        self, principal: Principal, ns: str, query: ExportQuery, *, distill: DistillService | None = None
    ) -> Export:
        """Check the request and return its stream (nothing is read until it is
        iterated). `distill` builds teacher contexts (sft with a `context` other than plain)."""
        principal.require(Permission.EXPORT, ns)
        self._check(query)
        if query.context != "plain" and distill is None:
            raise InvalidInput("this server builds no teacher contexts", field="context", rule="unavailable")
        with self.db.read() as session:
            self.namespaces.require(session, ns)
            snapshot = self.snapshots.resolve(session, ns, query.snapshot, field="snapshot")
        source = _Source(
            ns,
            snapshot.pk if snapshot is not None else None,
            snapshot_id=query.snapshot,
            principal=principal,
            distill=distill,
        )
        rows = self._rows(source, query)
        if query.limit is not None:
            rows = islice(rows, query.limit)
        if query.format == "parquet":
            chunks = parquet_chunks(rows, SCHEMAS[query.dataset], row_group_rows=ROW_GROUP_ROWS[query.dataset])
        else:
            chunks = jsonl_chunks(rows)
        return Export(
            filename=_filename(ns, query.dataset, query.snapshot, query.format),
            media_type=MEDIA_TYPES[query.format],
            chunks=chunks,
        )

    def _check(self, query: ExportQuery) -> None:
        cap = self.limits.max_export_rows
        if query.limit is not None and query.limit > cap:
            raise InvalidInput(f"limit is {query.limit}; at most {cap}", field="limit", rule="max_export_rows")
        for name in ("created_after", "created_before"):
            value = getattr(query, name)
            if value is not None and value.tzinfo is None:
                raise InvalidInput(f"{name} needs a timezone (e.g. 2026-01-01T00:00:00Z)", field=name, rule="aware")
        if query.success is not None and query.dataset in ("sft", "preferences"):
            raise InvalidInput(
                f"success does not apply to dataset={query.dataset}: it selects by outcome itself",
                field="success",
                rule="not_applicable",
            )
        for name, dataset in _ONLY_FOR.items():
            if name in query.model_fields_set and query.dataset != dataset:
                raise InvalidInput(f"{name} applies to dataset={dataset} only", field=name, rule="not_applicable")

    @staticmethod
    def _filters(query: ExportQuery) -> TrajectoryFilter:
        given = {name: getattr(query, name) for name in _FILTER_PARAMETERS}
        return TrajectoryFilter(**given, task_hash=task_hash(query.task) if query.task is not None else None)

    def _rows(self, source: _Source, query: ExportQuery) -> Iterator[dict[str, Any]]:
        """The dataset's rows, in export order (lazily)."""
        filters = self._filters(query)
        if query.dataset == "trajectories":
            return self._trajectory_rows(source, filters)
        if query.dataset == "sft" and query.context != "plain":
            return self._teacher_sft_rows(source, filters, TeacherSpec(kind=query.context), query)
        if query.dataset == "sft":
            return self._sft_rows(source, filters, query)
        if query.dataset == "preferences":
            return self._preference_rows(source, filters, cap=query.max_pairs_per_state, hints=query.hints)
        return self._attempt_rows(source, filters)

    # -- batched reads ---------------------------------------------------------------

    def _keyset_batches(
        self, read: Callable[[Session, Any, int], list[T]], limit: int, key: Callable[[T], Any]
    ) -> Iterator[list[T]]:
        """`read(session, after, limit)` batch by batch, each in a read unit of its own
        and after the `key` of the batch before, until one comes back short."""
        after: Any = None
        while True:
            with self.db.read() as session:
                batch = read(session, after, limit)
            if batch:
                yield batch
            if len(batch) < limit:
                return
            after = key(batch[-1])

    def _trajectory_batches(self, source: _Source, filters: TrajectoryFilter) -> Iterator[list[Row]]:
        """Matching trajectories, a keyset batch per read unit."""
        return self._keyset_batches(
            lambda session, after, limit: reader.read_trajectories(
                session, source.namespace, source.snapshot_pk, filters, after_pk=after, limit=limit
            ),
            self.batch_trajectories,
            lambda row: row["pk"],
        )

    def _steps(
        self, source: _Source, pks: Sequence[int], columns: tuple[str, ...] = EXPORTED_STEP_COLUMNS
    ) -> dict[int, list[Row]]:
        with self.db.read() as session:
            return reader.read_steps(session, source.namespace, source.snapshot_pk, pks, columns=columns)

    def _with_steps(
        self, source: _Source, batch: Sequence[Row], columns: tuple[str, ...] = EXPORTED_STEP_COLUMNS
    ) -> Iterator[tuple[Row, list[Row]]]:
        """The batch's trajectories with their steps, read about `batch_steps` at a time."""
        weight: Callable[[Row], int] = lambda t: t["step_count"]  # noqa: E731
        for chunk in chunked(batch, weight, budget=self.batch_steps, most=MAX_IN):
            steps = self._steps(source, [t["pk"] for t in chunk], columns)
            for t in chunk:
                yield t, steps.pop(t["pk"])  # let each go once written: one chunk is held, not two

    def _all_with_steps(
        self, source: _Source, filters: TrajectoryFilter, columns: tuple[str, ...] = EXPORTED_STEP_COLUMNS
    ) -> Iterator[tuple[Row, list[Row]]]:
        for batch in self._trajectory_batches(source, filters):
            yield from self._with_steps(source, batch, columns)

    # -- datasets ----------------------------------------------------------------------

    def _trajectory_rows(self, source: _Source, filters: TrajectoryFilter) -> Iterator[dict[str, Any]]:
        for t, steps in self._all_with_steps(source, filters, TRAJECTORY_STEP_COLUMNS):
            yield build.trajectory_row(t, steps)

    def _sft_rows(self, source: _Source, filters: TrajectoryFilter, query: ExportQuery) -> Iterator[dict[str, Any]]:
        """The plain context of each step (the distill contexts' `plain`, one template)."""
        successful = dataclasses.replace(filters, status="closed", success=True)
        template = load_template(SFT_TEMPLATE)
        for t, steps in self._all_with_steps(source, successful):
            yield from build.sft_rows(
                t, steps, template=template, history=query.history, history_max_chars=query.history_max_chars
            )

    def _teacher_sft_rows(
        self, source: _Source, filters: TrajectoryFilter, spec: TeacherSpec, query: ExportQuery
    ) -> Iterator[dict[str, Any]]:
        """SFT rows whose prompt is a teacher context built by service/distill: one
        call per chunk of trajectories (within its per-request limits; a trajectory
        longer than that in windows of its steps), the step's action as the answer."""
        assert source.distill is not None and source.principal is not None, "open() checks"
        successful = dataclasses.replace(filters, status="closed", success=True)
        budget = min(self.batch_steps, self.limits.max_context_steps)
        most = min(MAX_IN, self.limits.max_batch_trajectories)
        weight: Callable[[Row], int] = lambda t: t["step_count"]  # noqa: E731
        for batch in self._trajectory_batches(source, successful):
            for chunk in chunked(batch, weight, budget=budget, most=most):
                steps = self._steps(source, [t["pk"] for t in chunk])
                longest = max(t["step_count"] for t in chunk)
                windows: list[range | None] = [None]
                if longest > budget:  # one trajectory alone: its steps a window at a time
                    windows = [range(i, min(longest, i + budget)) for i in range(0, longest, budget)]
                for window in windows:
                    answer = source.distill.contexts_for(
                        source.principal,
                        source.namespace,
                        [t["id"] for t in chunk],
                        [spec],
                        snapshot=source.snapshot_id,
                        template=SFT_TEMPLATE,
                        history_max_chars=query.history_max_chars,
                        history_steps=query.history,
                        steps=window,
                        permission=Permission.EXPORT,
                    )
                    for t, contexts in zip(chunk, answer.trajectories, strict=True):
                        actions = {s["index"]: s["action"] for s in steps[t["pk"]]}
                        for sc in contexts.steps:
                            teacher = sc.teachers[spec.key]
                            messages = [m.model_dump() for m in teacher.messages]
                            messages.append(build.message("assistant", build.action_text(actions[sc.index])))
                            yield build.sft_row(
                                messages,
                                t["id"],
                                sc.index,
                                context=spec.kind if teacher.applicable else "plain",
                                template_version=answer.template_version,
                                item_ids=teacher.item_ids if teacher.applicable else (),
                            )

    def _tasks(self, source: _Source, filters: TrajectoryFilter) -> Iterator[str]:
        for batch in self._keyset_batches(
            lambda session, after, limit: repo.read_contrasted_tasks(
                session, source.namespace, source.snapshot_pk, filters, after_task_hash=after, limit=limit
            ),
            self.batch_tasks,
            lambda task_hash: task_hash,
        ):
            yield from batch

    def _preference_rows(
        self, source: _Source, filters: TrajectoryFilter, *, cap: int, hints: bool
    ) -> Iterator[dict[str, Any]]:
        """Task by task: group its closed trajectories' steps by state, pair actions
        of successful and failed ones, attach the heuristic that explains the pair."""
        for h in self._tasks(source, filters):
            matcher = build.StateMatcher(cap)
            task_filters = dataclasses.replace(filters, task_hash=h, status="closed", with_outcome=True)
            for t, steps in self._all_with_steps(source, task_filters):
                for step in steps:
                    matcher.add(t, step)
            pairs = list(matcher.pairs())
            evidence = self._heuristic_evidence(source, {p.chosen[0] for p in pairs} | {p.rejected[0] for p in pairs})
            for pair in pairs:
                cited = evidence.get(pair.chosen[0], []) + evidence.get(pair.rejected[0], [])
                yield build.preference_row(pair, build.choose_hint(pair, cited), hints_in_prompt=hints)

    def _heuristic_evidence(self, source: _Source, trajectory_pks: Iterable[int]) -> dict[int, list[Row]]:
        by_trajectory: dict[int, list[Row]] = defaultdict(list)
        pks = sorted(trajectory_pks)
        if not pks:
            return by_trajectory
        with self.db.read() as session:
            for start in range(0, len(pks), MAX_IN):
                chunk = pks[start : start + MAX_IN]
                for e in repo.read_heuristic_evidence(session, source.namespace, source.snapshot_pk, chunk):
                    by_trajectory[e["trajectory_pk"]].append(e)
        return by_trajectory

    def _attempt_rows(self, source: _Source, filters: TrajectoryFilter) -> Iterator[dict[str, Any]]:
        """Closed retries (they name the attempt they follow) with that closed
        earlier attempt, both as they were in the view."""
        retries = dataclasses.replace(filters, status="closed", with_parent=True)
        for batch in self._trajectory_batches(source, retries):
            with self.db.read() as session:
                parents = {
                    row["id"]: row
                    for row in reader.read_trajectories(
                        session,
                        source.namespace,
                        source.snapshot_pk,
                        ids=sorted({t["parent_trajectory_id"] for t in batch}),
                    )
                }
            pairs = [
                (parents[t["parent_trajectory_id"]], t)
                for t in batch
                if t["parent_trajectory_id"] in parents and parents[t["parent_trajectory_id"]]["status"] == "closed"
            ]
            weight: Callable[[tuple[Row, Row]], int] = lambda p: p[0]["step_count"] + p[1]["step_count"]  # noqa: E731
            for chunk in chunked(pairs, weight, budget=self.batch_steps, most=MAX_IN // 2):
                steps = self._steps(source, sorted({t["pk"] for pair in chunk for t in pair}))
                for first, next_ in chunk:
                    yield build.attempt_row(first, steps[first["pk"]], next_, steps[next_["pk"]])
