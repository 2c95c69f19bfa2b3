"""Trajectory ingest and reads: durable before the response, idempotent by
client-supplied ids, atomic per request.

Idempotency rules
- A create with an id already stored answers the stored record when the request
  body hashes the same (`request_hash`), and 409 otherwise.
- A step with an explicit `index` below the stored count is a replay when its
  content hashes the same as the stored step, and 409 otherwise; an explicit index
  above the next free one is a gap (409). Steps without an index take the next one.
- An outcome on a closed trajectory is a replay when identical, 409 otherwise.
Closing a trajectory (outcome) queues its `trajectory.closed` job in the same
transaction.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson
from sqlalchemy.orm import Session

from service.auth import Permission, Principal
from service.errors import Conflict, InvalidInput, NotFound
from service.limits import LimitChecker
from service.namespaces.service import NamespaceService
from service.pagination import decode_cursor, encode_cursor
from service.trajectories import convert
from service.trajectories.schemas import (
    BatchItemResult,
    BatchWritten,
    OutcomeIn,
    StepCreate,
    StepsAppended,
    TrajectoryCreate,
    TrajectoryDeleted,
    TrajectoryRead,
    TrajectoryWritten,
)
from store import jobs as jobs_repo
from store import retrievals as retrievals_repo
from store import trajectories as repo
from store.database import Database
from store.models import Trajectory, utcnow
from store.trajectories import TrajectoryFilters

CLOSED_JOB_KIND = "trajectory.closed"


def canonical_hash(value: Any) -> str:
    return hashlib.sha256(orjson.dumps(value, option=orjson.OPT_SORT_KEYS)).hexdigest()


def task_hash(task: str) -> str:
    return hashlib.sha256(task.encode("utf-8")).hexdigest()[:16]


def consistency_token(job_ids: list[int]) -> str:
    """Opaque to clients. It names the id range of the indexing jobs this write
    queued ("c1.0": none), so a reader can wait until they are searchable."""
    if not job_ids:
        return "c1.0"
    return f"c1.{min(job_ids)}.{max(job_ids)}"


def _step_row(trajectory_pk: int, index: int, step: StepCreate, content_hash: str) -> dict[str, Any]:
    return {
        "trajectory_pk": trajectory_pk,
        "index": index,
        "observation": step.state.observation,
        "state_data": step.state.data,
        "internal_state": step.internal_state,
        "action": step.action,
        "result": step.result,
        "error": step.error,
        "reward": step.reward,
        "done": step.done,
        "truncated": step.truncated,
        "caused_failure": step.caused_failure,
        "metadata_": step.metadata,
        "content_hash": content_hash,
    }


def _step_hash(step: StepCreate) -> str:
    return canonical_hash(step.model_dump(mode="json", exclude={"index"}))


@dataclass
class _StepPlan:
    rows: list[dict[str, Any]]
    replayed: int
    next_index: int


def _plan_steps(
    session: Session, trajectory_pk: int, stored_count: int, steps: list[StepCreate], field: str
) -> _StepPlan:
    """Decide, for each step of a request, whether it is new or a replay."""
    hashes = [_step_hash(s) for s in steps]
    explicit_old = [s.index for s in steps if s.index is not None and s.index < stored_count]
    stored_hashes = repo.get_step_hashes(session, trajectory_pk, explicit_old) if explicit_old else {}
    rows: list[dict[str, Any]] = []
    replayed = 0
    next_index = stored_count
    for i, (step, h) in enumerate(zip(steps, hashes, strict=True)):
        index = next_index if step.index is None else step.index
        if index < stored_count:
            if stored_hashes.get(index) != h:
                raise Conflict(
                    f"{field}[{i}]: step {index} is already stored with different content",
                    field=f"{field}[{i}]",
                    rule="idempotent_replay",
                )
            replayed += 1
        elif index < next_index:
            raise InvalidInput(
                f"{field}[{i}].index: step {index} appears twice in this request",
                field=f"{field}[{i}].index",
                rule="unique_index",
            )
        elif index > next_index:
            raise Conflict(
                f"{field}[{i}].index is {index} but the next free index is {next_index}; steps must be contiguous",
                field=f"{field}[{i}].index",
                rule="contiguous_index",
            )
        else:
            rows.append(_step_row(trajectory_pk, index, step, h))
            next_index += 1
    return _StepPlan(rows=rows, replayed=replayed, next_index=next_index)


def _credit_retrievals(session: Session, ns: str, traj: Trajectory) -> None:
    """A closing episode credits the retrievals it used (linked by trajectory_id or
    listed in retrieval_ids) that have no outcome yet, with its own outcome."""
    for rid in retrievals_repo.open_retrievals_of(session, ns, traj.id, traj.retrieval_ids or []):
        retrievals_repo.record_outcome(
            session, ns, rid, success=traj.success, reward=traj.reward, trajectory_id=traj.id, details=None
        )


def _outcome_values(outcome: OutcomeIn) -> dict[str, Any]:
    return {
        "success": outcome.success,
        "reward": outcome.reward,
        "failure_reason": outcome.failure_reason,
        "outcome_details": outcome.details,
    }


class TrajectoryService:
    def __init__(
        self,
        db: Database,
        namespaces: NamespaceService,
        checker: LimitChecker,
        on_enqueue: Callable[[], None] | None = None,
    ) -> None:
        self.db = db
        self.namespaces = namespaces
        self.checker = checker
        # Called after a commit that queued jobs: an in-process worker starts at once.
        self.on_enqueue = on_enqueue or (lambda: None)

    def _notify(self, ns: str, token: str) -> None:
        """After a write that queued jobs (only closing an episode does): wake the
        worker, and drop the cached utility baseline (closing credits retrievals)."""
        if token != "c1.0":
            self.on_enqueue()
            self.namespaces.outcomes_changed(ns)

    # -- writes --------------------------------------------------------------

    def create(self, principal: Principal, ns: str, body: TrajectoryCreate) -> tuple[TrajectoryWritten, bool]:
        principal.require(Permission.TRAJECTORIES_WRITE, ns)
        self.checker.trajectory(body)
        if body.id is None:
            body = body.model_copy(update={"id": uuid.uuid4().hex})

        def work(session: Session) -> tuple[TrajectoryWritten, bool]:
            self.namespaces.require(session, ns)
            results, job_ids = self._create_many(session, principal, ns, [body], "")
            traj, created = results[0]
            return convert.written(traj, consistency_token(job_ids)), created

        written, created = self.db.run_write(work)
        self._notify(ns, written.consistency_token)
        return written, created

    def create_batch(
        self, principal: Principal, ns: str, trajectories: list[TrajectoryCreate]
    ) -> tuple[BatchWritten, bool]:
        """All or nothing: a bad or conflicting item fails the whole batch, naming it."""
        principal.require(Permission.TRAJECTORIES_WRITE, ns)
        self.checker.batch(trajectories)
        seen: dict[str, int] = {}
        items = []
        for i, t in enumerate(trajectories):
            if t.id is None:
                t = t.model_copy(update={"id": uuid.uuid4().hex})
            elif t.id in seen:
                raise InvalidInput(
                    f"trajectories[{i}].id {t.id!r} repeats trajectories[{seen[t.id]}].id",
                    field=f"trajectories[{i}].id",
                    rule="unique_id",
                )
            seen[t.id] = i
            items.append(t)

        def work(session: Session) -> tuple[BatchWritten, bool]:
            self.namespaces.require(session, ns)
            results, job_ids = self._create_many(session, principal, ns, items, "trajectories")
            out = [
                BatchItemResult(id=t.id, created=created, step_count=t.step_count, status=t.status)
                for t, created in results
            ]
            return BatchWritten(items=out, consistency_token=consistency_token(job_ids)), any(c for _, c in results)

        written, created = self.db.run_write(work)
        self._notify(ns, written.consistency_token)
        return written, created

    def _create_many(
        self, session: Session, principal: Principal, ns: str, items: list[TrajectoryCreate], field: str
    ) -> tuple[list[tuple[Trajectory, bool]], list[int]]:
        def where(i: int) -> str:
            return f"{field}[{i}]." if field else ""

        request_hashes = [canonical_hash(t.model_dump(mode="json")) for t in items]
        existing = repo.get_trajectories_by_ids(session, ns, [t.id for t in items])  # type: ignore[misc]
        new_rows: list[dict[str, Any]] = []
        for i, (t, h) in enumerate(zip(items, request_hashes, strict=True)):
            old = existing.get(t.id)  # type: ignore[arg-type]
            if old is not None:
                if old.request_hash != h:
                    raise Conflict(
                        f"trajectory {t.id!r} already exists with a different body",
                        field=f"{where(i)}id",
                        rule="idempotent_replay",
                    )
                continue
            for j, step in enumerate(t.steps):
                if step.index is not None and step.index != j:
                    raise InvalidInput(
                        f"{where(i)}steps[{j}].index is {step.index}; a new trajectory's steps "
                        f"are numbered from 0, so it must be {j}",
                        field=f"{where(i)}steps[{j}].index",
                        rule="contiguous_index",
                    )
            closed = t.outcome is not None
            now = utcnow()
            row: dict[str, Any] = {
                "namespace": ns,
                "id": t.id,
                "task": t.task,
                "task_hash": task_hash(t.task),
                "environment": t.environment,
                "agent": t.agent,
                "policy_version": t.policy_version,
                "group_id": t.group_id,
                "metadata_": t.metadata,
                "retrieval_ids": t.retrieval_ids,
                "status": "closed" if closed else "open",
                "step_count": len(t.steps),
                "request_hash": h,
                "created_by": principal.key_id,
                "closed_at": now if closed else None,
                "success": None,
                "reward": None,
                "failure_reason": None,
                "outcome_details": None,
            }
            if t.outcome is not None:
                row.update(_outcome_values(t.outcome))
            new_rows.append(row)

        pks = repo.insert_trajectories(session, new_rows)
        step_rows: list[dict[str, Any]] = []
        job_ids: list[int] = []
        for t in items:
            pk = pks.get(t.id)  # type: ignore[arg-type]
            if pk is None:  # a replay: its token still names its (earlier) job
                old = existing[t.id]  # type: ignore[index]
                if old.status == "closed":
                    job_ids.append(self._enqueue_closed(session, ns, old.pk, old.id))
                continue
            step_rows.extend(_step_row(pk, j, s, _step_hash(s)) for j, s in enumerate(t.steps))
            if t.outcome is not None:
                job_ids.append(self._enqueue_closed(session, ns, pk, t.id))  # type: ignore[arg-type]
        repo.insert_steps(session, step_rows)

        fetched = repo.get_trajectories_by_ids(session, ns, [t.id for t in items])  # type: ignore[misc]
        for t in items:
            if t.id in pks and fetched[t.id].status == "closed":  # type: ignore[index]
                _credit_retrievals(session, ns, fetched[t.id])  # type: ignore[index]
        results = [(fetched[t.id], t.id in pks) for t in items]  # type: ignore[index]
        return results, job_ids

    def _enqueue_closed(self, session: Session, ns: str, pk: int, id: str) -> int:
        job_id = jobs_repo.enqueue_job(
            session,
            namespace=ns,
            kind=CLOSED_JOB_KIND,
            payload={"trajectory_pk": pk, "trajectory_id": id},
            dedup_key=f"{CLOSED_JOB_KIND}:{pk}",
            priority=10,  # indexing a closed episode is fast-pathed before slow reflection
        )
        return job_id  # once per trajectory: a replay gets the id of the job queued the first time

    def append_steps(self, principal: Principal, ns: str, id: str, steps: list[StepCreate]) -> StepsAppended:
        principal.require(Permission.TRAJECTORIES_WRITE, ns)
        self.checker.steps(steps, "steps")
        max_steps = self.checker.limits.max_steps_per_trajectory

        def work(session: Session) -> StepsAppended:
            self.namespaces.require(session, ns)
            traj = self._get_or_404(session, ns, id, for_update=True)
            plan = _plan_steps(session, traj.pk, traj.step_count, steps, "steps")
            if plan.rows and traj.status == "closed":
                raise Conflict(
                    f"trajectory {id!r} is closed; steps can no longer be appended",
                    field="steps",
                    rule="trajectory_open",
                )
            if plan.next_index > max_steps:
                raise InvalidInput(
                    f"trajectory {id!r} would hold {plan.next_index} steps; at most {max_steps} are accepted",
                    field="steps",
                    rule="max_steps_per_trajectory",
                )
            if plan.rows:
                repo.insert_steps(session, plan.rows)
                repo.set_trajectory_fields(session, traj.pk, step_count=plan.next_index)
            return StepsAppended(
                trajectory_id=id,
                step_count=max(plan.next_index, traj.step_count),
                appended=len(plan.rows),
                consistency_token=consistency_token([]),
            )

        return self.db.run_write(work)

    def close(self, principal: Principal, ns: str, id: str, outcome: OutcomeIn) -> TrajectoryWritten:
        principal.require(Permission.TRAJECTORIES_WRITE, ns)
        self.checker.text(outcome.failure_reason, "failure_reason")
        self.checker.json(outcome.details, "details")
        values = _outcome_values(outcome)

        def work(session: Session) -> TrajectoryWritten:
            self.namespaces.require(session, ns)
            traj = self._get_or_404(session, ns, id, for_update=True)
            if traj.status == "closed":
                stored = {k: getattr(traj, k) for k in values}
                if stored != values:
                    raise Conflict(
                        f"trajectory {id!r} is already closed with a different outcome",
                        field="outcome",
                        rule="idempotent_replay",
                    )
            else:
                repo.set_trajectory_fields(session, traj.pk, status="closed", closed_at=utcnow(), **values)
                session.refresh(traj)
                _credit_retrievals(session, ns, traj)
            job_ids = [self._enqueue_closed(session, ns, traj.pk, traj.id)]
            return convert.written(traj, consistency_token(job_ids))

        written = self.db.run_write(work)
        self._notify(ns, written.consistency_token)
        return written

    def delete(self, principal: Principal, ns: str, id: str) -> TrajectoryDeleted:
        principal.require(Permission.TRAJECTORIES_DELETE, ns)
        with self.db.write() as session:
            self.namespaces.require(session, ns)
            traj = self._get_or_404(session, ns, id, for_update=True)
            steps, reflections = repo.delete_trajectory(session, traj)
        return TrajectoryDeleted(id=id, deleted_steps=steps, deleted_reflections=reflections)

    # -- reads ---------------------------------------------------------------

    def get(self, principal: Principal, ns: str, id: str) -> TrajectoryRead:
        principal.require(Permission.TRAJECTORIES_READ, ns)
        with self.db.read() as session:
            self.namespaces.require(session, ns)
            traj = self._get_or_404(session, ns, id)
            return convert.trajectory(traj, repo.get_steps(session, traj.pk))

    def list(
        self,
        principal: Principal,
        ns: str,
        filters: TrajectoryFilters,
        *,
        cursor: str | None,
        limit: int,
        include_steps: bool,
    ) -> tuple[list[TrajectoryRead], str | None]:
        principal.require(Permission.TRAJECTORIES_READ, ns)
        before = decode_cursor(cursor)
        with self.db.read() as session:
            self.namespaces.require(session, ns)
            rows = repo.list_trajectories(session, ns, filters, before_pk=before, limit=limit + 1)
            more = len(rows) > limit
            rows = rows[:limit]
            steps = repo.get_steps_for(session, [r.pk for r in rows]) if include_steps else {}
            items = [convert.trajectory(r, steps.get(r.pk) if include_steps else None) for r in rows]
        return items, (encode_cursor(rows[-1].pk) if more and rows else None)

    def _get_or_404(self, session: Session, ns: str, id: str, *, for_update: bool = False) -> Trajectory:
        traj = repo.get_trajectory(session, ns, id, for_update=for_update)
        if traj is None:
            raise NotFound(f"trajectory {id!r} not found in namespace {ns!r}", field="id")
        return traj
