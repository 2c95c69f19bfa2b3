"""The raw floors of bench.distill, in the benchmark's own process, no HTTP.

Contexts: the reads a teacher-context request needs, as plain SQLAlchemy core
statements through the same snapshot views (the batch's trajectories by id, their
steps, their groups' members, each one's earlier attempts and their steps), every
step's query texts (state and internal state, made by the server's own functions)
through the embedder the server builds (`service.container.make_embedder(Settings())`,
one `encode` call), an exact search of the snapshot's vectors (a numpy matrix
product per (kind, field), top `MIN_FETCH`), and the candidate rows of what it
found, read as the server reads them for a batch (`service.retrieval.repository.list_candidates`
once with the row filters, `list_citations` once, each trajectory's leakage filters
applied to the citations in Python). No ranking (vector or lexical), no rendering, no
response.

Export: the same keyset batches of trajectories and their steps the export reads
(`store.trajectory_reader`, the dataset's filter, the service's batch sizes), each trajectory
with its steps serialised as one orjson line.
"""

from __future__ import annotations

import contextlib
import gc
import inspect
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import orjson
from sqlalchemy import Engine, func, select
from sqlalchemy.orm import Session

from domain.hashing import task_hash
from domain.settings import NamespaceSettings, parse_settings
from domain.state_text import internal_text, state_text
from service.distill import repository as distill_repo
from service.distill.contexts.schemas import DEFAULT_ATTEMPTS, DEFAULT_MEMORY_KINDS
from service.export.service import EXPORTED_STEP_COLUMNS, ExportService, chunked
from service.retrieval import repository as retrieval_repo
from service.retrieval.candidates import MIN_FETCH
from store import snapshots as snapshots_repo
from store import trajectory_reader as reader
from store.models import SnapshotEmbedding, SnapshotEvidence, SnapshotReflection, SnapshotTrajectory
from store.trajectory_reader import MAX_IN, TrajectoryFilter

# The filter each dataset's export reads its trajectories with (service/export/service.py).
DATASET_FILTERS = {
    "trajectories": TrajectoryFilter(),
    "sft": TrajectoryFilter(status="closed", success=True),
    "preferences": TrajectoryFilter(status="closed", with_outcome=True),
    "attempts": TrajectoryFilter(status="closed", with_parent=True),
}
_EXPORT_DEFAULTS = inspect.signature(ExportService.__init__).parameters
BATCH_TRAJECTORIES = min(int(_EXPORT_DEFAULTS["batch_trajectories"].default), MAX_IN)
BATCH_STEPS = int(_EXPORT_DEFAULTS["batch_steps"].default)


@contextlib.contextmanager
def no_gc() -> Iterator[None]:
    """No cyclic collection while a floor runs: the benchmark process holds the whole
    workload and two parsed responses' worth of objects, which the server does not, and
    a collection's cost grows with the heap; the floor is the work alone."""
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def snapshot_ref(engine: Engine, ns: str, snapshot_id: str) -> snapshots_repo.SnapshotRef:
    with Session(engine) as s:
        row = snapshots_repo.read_snapshot(s, ns, snapshot_id)
        assert row is not None, f"snapshot {snapshot_id} not found"
        return snapshots_repo.ref(row)


def copied_rows(engine: Engine, snapshot_pk: int) -> dict[str, int]:
    """Rows a snapshot copied, per table."""
    out = {}
    with Session(engine) as s:
        for name, table in (
            ("reflections", SnapshotReflection),
            ("embeddings", SnapshotEmbedding),
            ("evidence", SnapshotEvidence),
            ("trajectories", SnapshotTrajectory),
        ):
            out[name] = int(s.scalar(select(func.count()).select_from(table).where(table.snapshot_pk == snapshot_pk)))
    return out


# -- contexts ------------------------------------------------------------------------------


@dataclass
class ContextsFloorRun:
    steps: int
    texts: int
    reads_s: float  # trajectories, steps, groups, earlier attempts and their steps
    encode_s: float
    search_s: float
    candidates_s: float
    candidate_rows: int

    @property
    def total_s(self) -> float:
        return self.reads_s + self.encode_s + self.search_s + self.candidates_s


@dataclass
class _Matrix:
    pks: np.ndarray
    vectors: np.ndarray


@dataclass
class ContextsFloor:
    """Built once per run (the snapshot's vectors loaded, the embedder warmed), then
    `run(ids)` per rollout batch; the embedder's cache persists across batches as the
    server's does."""

    engine: Engine
    ns: str
    snapshot_id: str
    embedder: Any  # service.container.make_embedder(Settings()): the server's construction
    kinds: Sequence[str] = DEFAULT_MEMORY_KINDS
    attempts: int = DEFAULT_ATTEMPTS
    load_s: float = 0.0
    vectors: int = 0
    _matrices: dict[tuple[str, str], _Matrix] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.snap = snapshot_ref(self.engine, self.ns, self.snapshot_id)
        self.settings: NamespaceSettings = parse_settings(self.snap.settings)
        t0 = time.perf_counter()
        by: dict[tuple[str, str], tuple[list[int], list[np.ndarray]]] = {}
        with Session(self.engine) as s:
            for kind, fld, pk, blob in snapshots_repo.list_pinned_vectors(s, self.snap.pk, self.embedder.name):
                pks, vecs = by.setdefault((kind, fld), ([], []))
                pks.append(pk)
                vecs.append(np.frombuffer(blob, dtype="<f4"))
        for key, (pks, vecs) in by.items():
            self._matrices[key] = _Matrix(np.array(pks), np.ascontiguousarray(np.vstack(vecs)))
        self.load_s = time.perf_counter() - t0
        self.vectors = sum(len(m.pks) for m in self._matrices.values())

    def _reads(self, s: Session, ids: Sequence[str]) -> tuple[list[Any], dict[int, list[Any]], dict[str, list[str]]]:
        ns, spk = self.ns, self.snap.pk
        records = reader.read_trajectory_records(s, ns, spk, ids, distill_repo.TrajectoryRecord)
        recs = [records[i] for i in ids]
        steps = reader.read_steps(s, ns, spk, [r.pk for r in recs], columns=EXPORTED_STEP_COLUMNS)
        members = distill_repo.list_group_members(s, ns, spk, sorted({r.group_id for r in recs if r.group_id}))
        # earlier attempts: the parent chain (a batched read per link), else the task's earlier closed ones
        chains: dict[str, list[Any]] = {r.id: [] for r in recs}
        tips = {r.id: r.parent_trajectory_id for r in recs if r.parent_trajectory_id}
        while tips:
            found = reader.read_trajectory_records(
                s, ns, spk, sorted(set(tips.values())), distill_repo.TrajectoryRecord
            )
            nxt = {}
            for rid, parent in tips.items():
                rec = found.get(parent)
                if rec is not None:
                    chains[rid].append(rec)
                    if rec.parent_trajectory_id and len(chains[rid]) < self.attempts:
                        nxt[rid] = rec.parent_trajectory_id
            tips = nxt
        for r in recs:
            if not chains[r.id]:
                siblings = members.get(r.group_id, []) if r.group_id else []
                chains[r.id] = distill_repo.list_earlier_attempts(
                    s,
                    ns,
                    spk,
                    r.task_hash,
                    before_pk=r.pk,
                    exclude_ids=sorted({r.id, *siblings}),
                    exclude_group_ids=[r.group_id] if r.group_id else [],
                    limit=self.attempts,
                )
        attempt_pks = sorted({a.pk for chain in chains.values() for a in chain})
        for start in range(0, len(attempt_pks), MAX_IN):
            reader.read_steps(s, ns, spk, attempt_pks[start : start + MAX_IN], columns=EXPORTED_STEP_COLUMNS)
        return recs, steps, members

    def run(self, ids: Sequence[str]) -> ContextsFloorRun:
        with no_gc():
            return self._run(ids)

    def _run(self, ids: Sequence[str]) -> ContextsFloorRun:
        t0 = time.perf_counter()
        with Session(self.engine) as s:
            recs, steps, members = self._reads(s, ids)
        t1 = time.perf_counter()
        cfg = self.settings.state_text
        flat: list[str] = []
        slots: list[tuple[int, int | None]] = []  # per step: its state text's row, its internal text's row
        owner: list[int] = []  # per step: the trajectory's position
        for t_i, r in enumerate(recs):
            for st in steps[r.pk]:
                state_row, internal_row = len(flat), None
                flat.append(state_text(cfg, observation=st["observation"], data=st["state_data"], task=r.task))
                internal = internal_text(st["internal_state"], cfg.max_chars)
                if internal is not None:
                    internal_row = len(flat)
                    flat.append(internal)
                slots.append((state_row, internal_row))
                owner.append(t_i)
        matrix = self.embedder.encode(flat)
        t2 = time.perf_counter()
        state_q = matrix[[a for a, _ in slots]]
        with_internal = [i for i, (_, b) in enumerate(slots) if b is not None]
        internal_q = matrix[[slots[i][1] for i in with_internal]] if with_internal else None
        found: list[set[int]] = [set() for _ in slots]
        for (kind, fld), m in self._matrices.items():
            if kind not in self.kinds:
                continue
            rows = list(range(len(slots))) if fld == "state" else with_internal
            q = state_q if fld == "state" else internal_q
            if q is None or not rows:
                continue
            sims = q @ m.vectors.T
            depth = min(MIN_FETCH, sims.shape[1])
            top = np.argpartition(-sims, depth - 1, axis=1)[:, :depth]
            for row, picked in zip(rows, m.pks[top], strict=True):
                found[row].update(picked.tolist())
        t3 = time.perf_counter()
        # the server's candidate reads: the rows of everything found in one query (row filters
        # only), their citations in one more; each trajectory's citation filters then in Python
        every = sorted(set().union(*found))
        base = retrieval_repo.CandidateFilters(kinds=tuple(self.kinds), statuses=("active",))
        spk = self.snap.pk
        with Session(self.engine) as s:
            rows = retrieval_repo.list_candidates(s, self.ns, every, base, self.embedder.name, spk)
            citations = retrieval_repo.list_citations(s, self.ns, [r.pk for r in rows], spk)
        per_trajectory: list[set[int]] = [set() for _ in recs]
        for i, pks in enumerate(found):
            per_trajectory[owner[i]] |= pks
        candidate_rows = 0
        for r, pks in zip(recs, per_trajectory, strict=True):
            siblings = members.get(r.group_id, []) if r.group_id else []
            guards = retrieval_repo.CandidateFilters(
                kinds=base.kinds,
                statuses=base.statuses,
                exclude_task_hashes=(task_hash(r.task),),
                exclude_trajectory_ids=tuple(sorted({r.id, *siblings})),
            )
            candidate_rows += sum(1 for row in rows if row.pk in pks and guards.admits(citations.get(row.pk, [])))
        t4 = time.perf_counter()
        return ContextsFloorRun(len(slots), len(flat), t1 - t0, t2 - t1, t3 - t2, t4 - t3, candidate_rows)


# -- export --------------------------------------------------------------------------------


@dataclass
class ExportFloorRun:
    dataset: str
    trajectories: int
    steps: int
    bytes: int
    seconds: float

    @property
    def mb_per_s(self) -> float:
        return self.bytes / 1e6 / self.seconds if self.seconds else float("nan")


def _line(t: Any, steps: list[Any]) -> bytes:
    return orjson.dumps({**t, "steps": [dict(st) for st in steps]}, option=orjson.OPT_APPEND_NEWLINE)


def export_floor(engine: Engine, ns: str, snapshot_pk: int, dataset: str) -> ExportFloorRun:
    """The dataset's trajectories (and, for attempts, the attempts they follow) with
    their steps, in the export's keyset batches, one orjson line per trajectory."""
    with no_gc():
        return _export_floor(engine, ns, snapshot_pk, dataset)


def _export_floor(engine: Engine, ns: str, snapshot_pk: int, dataset: str) -> ExportFloorRun:
    filters = DATASET_FILTERS[dataset]
    trajectories = steps_n = size = 0
    after = 0
    t0 = time.perf_counter()
    while True:
        with Session(engine) as s:
            batch = reader.read_trajectories(s, ns, snapshot_pk, filters, after_pk=after, limit=BATCH_TRAJECTORIES)
        if dataset == "attempts" and batch:
            with Session(engine) as s:
                ids = sorted({t["parent_trajectory_id"] for t in batch})
                parents = {row["id"]: row for row in reader.read_trajectories(s, ns, snapshot_pk, ids=ids)}
            rows = [p for t in batch if (p := parents.get(t["parent_trajectory_id"])) is not None] + list(batch)
        else:
            rows = list(batch)
        for chunk in chunked(rows, lambda t: t["step_count"], budget=BATCH_STEPS, most=MAX_IN):
            with Session(engine) as s:
                pks = sorted({t["pk"] for t in chunk})
                steps = reader.read_steps(s, ns, snapshot_pk, pks, columns=EXPORTED_STEP_COLUMNS)
            for t in chunk:
                line = _line(t, steps[t["pk"]])
                size += len(line)
                trajectories += 1
                steps_n += len(steps[t["pk"]])
        if len(batch) < BATCH_TRAJECTORIES:
            break
        after = batch[-1]["pk"]
    return ExportFloorRun(dataset, trajectories, steps_n, size, time.perf_counter() - t0)
