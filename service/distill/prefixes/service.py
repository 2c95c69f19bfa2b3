"""Prefix replay (ReOPD): per task, the first steps of stored successful
trajectories, as many as the step-decay schedule gives at the trainer's step, for
the trainer to replay before its policy acts.

One short read: the requested trajectories (their task and rollout group), each
distinct task's newest successful trajectories, the chosen ones' steps. The rest
is pure. Sources are ranked by reward (highest first, unknown last), then fewer
steps, then newest — deterministic under a snapshot.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy.orm import Session

from domain.errors import NotFound
from service.auth import Permission, Principal
from service.distill import repository as repo
from service.distill.prefixes.schedule import fraction, prefix_steps
from service.distill.prefixes.schemas import (
    EntryPrefixes,
    Prefix,
    PrefixesRequest,
    PrefixesResponse,
    PrefixLeakage,
    PrefixStep,
)
from service.limits.checks import LimitChecker
from service.namespaces.service import NamespaceService
from service.snapshots.service import SnapshotService
from service.trajectories.schemas import StateRead
from store import trajectory_reader as reader
from store.database import Database

CANDIDATES = 256  # successful trajectories read per task: the newest


@dataclass(frozen=True)
class _Entry:
    """One task or trajectory asked for, and what its guards withhold."""

    task: str
    trajectory_id: str | None
    own: str | None  # the trajectory itself (withheld unless allowed)
    group_id: str | None  # its rollout group (withheld unless allowed)

    def withholds(self, source: repo.TrajectoryRecord, leakage: PrefixLeakage) -> bool:
        if not leakage.allow_same_trajectory and self.own is not None and source.id == self.own:
            return True
        return not leakage.allow_same_group and self.group_id is not None and source.group_id == self.group_id


def _rank(source: repo.TrajectoryRecord) -> tuple[int, float, int, int]:
    known = source.reward is not None
    return (0 if known else 1, -(source.reward or 0.0), source.step_count, -source.pk)


class PrefixService:
    def __init__(
        self, db: Database, namespaces: NamespaceService, snapshots: SnapshotService, checker: LimitChecker
    ) -> None:
        self.db = db
        self.namespaces = namespaces
        self.snapshots = snapshots
        self.checker = checker

    def prefixes(self, principal: Principal, ns: str, body: PrefixesRequest) -> PrefixesResponse:
        principal.require(Permission.DISTILL, ns)
        n_entries = len(body.tasks if body.tasks is not None else body.trajectories or [])
        field = "tasks" if body.tasks is not None else "trajectories"
        self.checker.batch_size(n_entries, field, self.checker.limits.max_batch_trajectories)
        s = body.schedule
        share = fraction(body.step, s.start_fraction, s.half_life_steps, s.min_fraction)
        with self.db.read() as session:
            self.namespaces.require(session, ns)
            snap = self.snapshots.resolve(session, ns, body.snapshot, field="snapshot")
            spk = snap.pk if snap else None
            entries = self._entries(session, ns, spk, body, snap.id if snap else None)
            candidates = {
                task: repo.list_successes(session, ns, spk, task, limit=CANDIDATES)
                for task in sorted({e.task for e in entries})
            }
            chosen: list[tuple[_Entry, list[repo.TrajectoryRecord], int]] = []
            for e in entries:
                kept = [c for c in candidates[e.task] if not e.withholds(c, body.leakage)]
                excluded = len(candidates[e.task]) - len(kept)
                chosen.append((e, sorted(kept, key=_rank)[: body.k], excluded))
            pks = sorted({c.pk for _, picked, _ in chosen for c in picked})
            steps = reader.read_step_records(session, ns, spk, pks, repo.StepRecord)
        out = [
            EntryPrefixes(
                task=e.task,
                trajectory_id=e.trajectory_id,
                prefixes=[_prefix(c, steps[c.pk], share) for c in picked],
                candidates=len(candidates[e.task]),
                excluded=excluded,
            )
            for e, picked, excluded in chosen
        ]
        return PrefixesResponse(snapshot=snap.id if snap else None, step=body.step, fraction=share, entries=out)

    @staticmethod
    def _entries(
        session: Session, ns: str, spk: int | None, body: PrefixesRequest, snapshot: str | None
    ) -> list[_Entry]:
        if body.tasks is not None:
            return [_Entry(task=t, trajectory_id=None, own=None, group_id=None) for t in body.tasks]
        wanted = body.trajectories or []
        stored = [t.id for t in wanted if t.stored and t.id is not None]
        records = reader.read_trajectory_records(session, ns, spk, stored, repo.TrajectoryRecord)
        out = []
        for i, t in enumerate(wanted):
            if t.stored:
                rec = records.get(t.id or "")
                if rec is None:
                    where = f"snapshot {snapshot!r}" if snapshot else f"namespace {ns!r}"
                    raise NotFound(f"trajectory {t.id!r} not found in {where}", field=f"trajectories[{i}].id")
                out.append(_Entry(task=rec.task, trajectory_id=rec.id, own=rec.id, group_id=rec.group_id))
            else:
                out.append(_Entry(task=t.task or "", trajectory_id=t.id, own=t.id, group_id=t.group_id))
        return out


def _prefix(source: repo.TrajectoryRecord, steps: list[repo.StepRecord], share: float) -> Prefix:
    n = prefix_steps(len(steps), share)
    return Prefix(
        trajectory_id=source.id,
        reward=source.reward,
        total_steps=len(steps),
        prefix_steps=n,
        steps=[
            PrefixStep(
                index=s.index,
                state=StateRead(observation=s.observation, data=s.state_data),
                internal_state=s.internal_state,
                action=s.action,
                result=s.result,
                error=s.error,
                reward=s.reward,
            )
            for s in steps[:n]
        ],
    )
