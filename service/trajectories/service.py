"""Trajectory ingest and reads: durable before the response, idempotent by
client-supplied ids (service.trajectories.ingest says how), atomic per request.

Closing a trajectory (outcome) queues its `trajectory.closed` job in the same
transaction; what closing and deleting mean to other domains (crediting the
retrievals an episode used, the LLM pools' votes) is declared in service/hooks.py.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable

from sqlalchemy.orm import Session

from domain.consistency import NOTHING_QUEUED, encode_token
from domain.errors import Conflict, InvalidInput
from domain.jobs import TRAJECTORY_CLOSED
from service import hooks
from service.auth import Permission, Principal
from service.limits.checks import LimitChecker
from service.namespaces.service import NamespaceService
from service.pagination import keyset_page
from service.retrieval.log import RetrievalLog
from service.trajectories import ingest
from service.trajectories.schemas import (
    BatchItemResult,
    BatchWritten,
    OutcomeCreate,
    StepCreate,
    StepsAppended,
    TrajectoryCreate,
    TrajectoryDeleted,
    TrajectoryPage,
    TrajectoryRead,
    TrajectoryWritten,
)
from store import trajectories as repo
from store import trajectory_reader as reader
from store.database import Database
from store.models import Trajectory, utcnow
from store.records import record_columns
from store.trajectory_reader import StoredStep, StoredTrajectory, TrajectoryFilter, stored_trajectory

STORED = record_columns(StoredTrajectory)


class TrajectoryService:
    def __init__(
        self,
        db: Database,
        namespaces: NamespaceService,
        checker: LimitChecker,
        retrieval_log: RetrievalLog,
        on_enqueue: Callable[[], None] | None = None,
    ) -> None:
        self.db = db
        self.namespaces = namespaces
        self.checker = checker
        # closing an episode credits its retrievals: those answered a moment ago may
        # still be on their way to the database (service/retrieval/log.py)
        self.retrieval_log = retrieval_log
        # Called after a commit that queued jobs: an in-process worker starts at once.
        self.on_enqueue = on_enqueue or (lambda: None)

    def _notify(self, ns: str, token: str) -> None:
        """After a write that queued jobs (only closing an episode does): wake the
        worker, and drop the cached utility baseline (closing credits retrievals)."""
        if token != NOTHING_QUEUED:
            self.on_enqueue()
            self.namespaces.outcomes_changed(ns)

    def _get_or_404(self, session: Session, ns: str, id: str, *, for_update: bool = False) -> Trajectory:
        return self.namespaces.get_or_404(
            session, ns, "trajectory", id, lambda: repo.read_trajectory(session, ns, id, for_update=for_update)
        )

    # -- writes --------------------------------------------------------------

    def create(self, principal: Principal, ns: str, body: TrajectoryCreate) -> tuple[TrajectoryWritten, bool]:
        principal.require(Permission.TRAJECTORIES_WRITE, ns)
        self.checker.trajectory(body)
        if body.id is None:
            body = body.model_copy(update={"id": uuid.uuid4().hex})
        self._await_retrievals(ns, [body])

        def work(session: Session) -> tuple[TrajectoryWritten, bool]:
            self.namespaces.require(session, ns)
            results, job_ids = self._create_many(session, principal, ns, [body], "")
            traj, created = results[0]
            return TrajectoryWritten.from_row(stored_trajectory(traj), consistency_token=encode_token(job_ids)), created

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
        self._await_retrievals(ns, items)

        def work(session: Session) -> tuple[BatchWritten, bool]:
            self.namespaces.require(session, ns)
            results, job_ids = self._create_many(session, principal, ns, items, "trajectories")
            out = [
                BatchItemResult(id=t.id, created=created, step_count=t.step_count, status=t.status)
                for t, created in results
            ]
            return BatchWritten(items=out, consistency_token=encode_token(job_ids)), any(c for _, c in results)

        written, created = self.db.run_write(work)
        self._notify(ns, written.consistency_token)
        return written, created

    def _create_many(
        self, session: Session, principal: Principal, ns: str, items: list[TrajectoryCreate], field: str
    ) -> tuple[list[tuple[Trajectory, bool]], list[int]]:
        def where(i: int) -> str:
            return f"{field}[{i}]." if field else ""

        ids: list[str] = [t.id for t in items]  # type: ignore[misc]  # every item has an id by now
        existing = repo.read_trajectories_by_ids(session, ns, ids)
        new_rows = []
        for i, t in enumerate(items):
            h = ingest.request_hash(t)
            old = existing.get(ids[i])
            if old is not None:
                if old.request_hash != h:
                    raise Conflict(
                        f"trajectory {t.id!r} already exists with a different body",
                        field=f"{where(i)}id",
                        rule="idempotent_replay",
                    )
                continue
            ingest.check_new_step_indexes(t, where(i))
            new_rows.append(ingest.trajectory_row(ns, t, h, principal.key_id))

        pks = repo.create_trajectories(session, new_rows)
        step_rows = []
        job_ids: list[int] = []
        for t, id_ in zip(items, ids, strict=True):
            pk = pks.get(id_)
            if pk is None:  # a replay: its token still names its (earlier) job
                old = existing[id_]
                if old.status == "closed":
                    job_ids.append(self._enqueue_closed(session, ns, old.pk, old.id))
                continue
            step_rows.extend(ingest.step_row(pk, j, s, ingest.step_hash(s)) for j, s in enumerate(t.steps))
            if t.outcome is not None:
                job_ids.append(self._enqueue_closed(session, ns, pk, id_))
        repo.create_steps(session, step_rows)

        fetched = repo.read_trajectories_by_ids(session, ns, ids)
        for id_ in ids:
            if id_ in pks and fetched[id_].status == "closed":
                hooks.trajectory_closed(session, ns, fetched[id_])
        return [(fetched[id_], id_ in pks) for id_ in ids], job_ids

    def _await_retrievals(self, ns: str, items: list[TrajectoryCreate]) -> None:
        closing = [t for t in items if t.outcome is not None]
        if closing:
            self.retrieval_log.await_logged(
                ns,
                [rid for t in closing for rid in t.retrieval_ids or ()],
                trajectory_ids=[t.id for t in closing if t.id is not None],
            )

    def _stored_retrieval_ids(self, ns: str, id: str) -> list[str]:
        with self.db.read() as session:
            traj = repo.read_trajectory(session, ns, id)
            return list(traj.retrieval_ids or []) if traj is not None else []

    @staticmethod
    def _enqueue_closed(session: Session, ns: str, pk: int, id: str) -> int:
        # Once per trajectory: a replay gets the id of the job queued the first time.
        return TRAJECTORY_CLOSED.enqueue(session, ns, {"trajectory_pk": pk, "trajectory_id": id}, pk)

    def append_steps(self, principal: Principal, ns: str, id: str, steps: list[StepCreate]) -> StepsAppended:
        principal.require(Permission.TRAJECTORIES_WRITE, ns)
        self.checker.steps(steps, "steps")
        max_steps = self.checker.limits.max_steps_per_trajectory

        def work(session: Session) -> StepsAppended:
            traj = self.namespaces.get_or_404(
                session, ns, "trajectory", id, lambda: repo.read_append_target(session, ns, id)
            )
            plan = ingest.plan_steps(session, traj.pk, traj.step_count, steps, "steps")
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
                repo.create_steps(session, plan.rows)
                repo.update_trajectory(session, traj.pk, step_count=plan.next_index)
            return StepsAppended(
                trajectory_id=id,
                step_count=max(plan.next_index, traj.step_count),
                appended=len(plan.rows),
                consistency_token=NOTHING_QUEUED,
            )

        return self.db.run_write(work)

    def close(self, principal: Principal, ns: str, id: str, outcome: OutcomeCreate) -> TrajectoryWritten:
        principal.require(Permission.TRAJECTORIES_WRITE, ns)
        self.checker.json(outcome.details, "details")
        values = ingest.outcome_values(outcome)
        self.retrieval_log.await_logged(ns, lambda: self._stored_retrieval_ids(ns, id), trajectory_ids=[id])

        def work(session: Session) -> TrajectoryWritten:
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
                repo.update_trajectory(session, traj.pk, status="closed", closed_at=utcnow(), **values)
                session.refresh(traj)
                hooks.trajectory_closed(session, ns, traj)
            job_ids = [self._enqueue_closed(session, ns, traj.pk, traj.id)]
            return TrajectoryWritten.from_row(stored_trajectory(traj), consistency_token=encode_token(job_ids))

        written = self.db.run_write(work)
        self._notify(ns, written.consistency_token)
        return written

    def delete(self, principal: Principal, ns: str, id: str) -> TrajectoryDeleted:
        principal.require(Permission.TRAJECTORIES_DELETE, ns)

        def work(session: Session) -> TrajectoryDeleted:
            traj = self._get_or_404(session, ns, id, for_update=True)
            steps, reflections, voted = repo.delete_trajectory(session, traj)
            hooks.trajectory_deleted(session, ns, voted)  # its votes go with its evidence
            return TrajectoryDeleted(id=id, deleted_steps=steps, deleted_reflections=reflections)

        return self.db.run_write(work)

    # -- reads ---------------------------------------------------------------

    def get(self, principal: Principal, ns: str, id: str) -> TrajectoryRead:
        principal.require(Permission.TRAJECTORIES_READ, ns)
        with self.db.read() as session:
            traj = self.namespaces.get_or_404(
                session,
                ns,
                "trajectory",
                id,
                lambda: reader.read_trajectory_records(session, ns, None, [id], StoredTrajectory).get(id),
            )
            steps = reader.read_step_records(session, ns, None, [traj.pk], StoredStep)
            return TrajectoryRead.from_row(traj, steps[traj.pk])

    def list(
        self,
        principal: Principal,
        ns: str,
        filters: TrajectoryFilter,
        *,
        cursor: str | None,
        limit: int,
        include_steps: bool,
    ) -> TrajectoryPage:
        principal.require(Permission.TRAJECTORIES_READ, ns)
        with self.db.read() as session:
            self.namespaces.require(session, ns)
            rows, next_cursor = keyset_page(
                lambda before, n: [
                    StoredTrajectory(**row)
                    for row in reader.read_trajectories(
                        session, ns, None, filters, columns=STORED, before_pk=before, newest_first=True, limit=n
                    )
                ],
                cursor=cursor,
                limit=limit,
                key=lambda r: r.pk,
            )
            steps = (
                reader.read_step_records(session, ns, None, [r.pk for r in rows], StoredStep) if include_steps else {}
            )
            items = [TrajectoryRead.from_row(r, steps.get(r.pk) if include_steps else None) for r in rows]
        return TrajectoryPage(items=items, next_cursor=next_cursor)
