"""Part (c) of bench.reflect, the raw floor: the offline reflectors' own work on the
same trajectories, in this process, with no HTTP, queue or database.

- exemplars: `build_exemplars` on each trajectory (credit, return-to-go, merging
  identical (state, action) pairs across trajectories, as the stored ids would);
- encode: the new exemplars' state and internal-state texts through the worker's
  own embedder (`make_embedder` with the same settings: ONNX, batch size, cache),
  one call over all of them;
- index: those state vectors added to a `VectorIndex`, as an API process does when
  it catches up with the index feed;
- contrastive: `find` once per environment over all its exemplars (a drain
  coalesces the recounts; at best it does exactly this);
- evidence cards: `build_card` once per task over its latest groups, plus the
  task text's vector.

What the floor leaves out is what the service adds: SQL reads and writes, job
claims, leases, and one transaction per job.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np

from bench.common.processes import share_models
from bench.reflect.workload import Trajectory
from domain.settings import parse_settings
from domain.state_text import task_query_text
from reflectors.contrastive import ContrastiveConfig, find
from reflectors.embed import encode_texts
from reflectors.evidence_cards import build_card
from reflectors.exemplars import build_exemplars
from service.container import make_embedder
from service.settings import Settings
from store.models import Step
from store.models import Trajectory as TrajectoryRow
from store.vectors import VectorIndex


@dataclass
class FloorResult:
    trajectories: int
    steps: int
    exemplars: int
    texts: int
    seconds: dict[str, float]  # part -> seconds

    @property
    def total_s(self) -> float:
        return sum(self.seconds.values())

    @property
    def trajectories_per_s(self) -> float:
        return self.trajectories / self.total_s

    @property
    def steps_per_s(self) -> float:
        return self.steps / self.total_s


def _rows(pk: int, t: Trajectory) -> tuple[TrajectoryRow, list[Step]]:
    """Unsaved ORM objects, as the reflectors read them from SQL."""
    traj = TrajectoryRow(
        pk=pk, namespace="floor", id=t["id"], task=t["task"], environment=t["environment"], group_id=t["group_id"],
        success=t["outcome"]["success"], reward=t["outcome"]["reward"], failure_reason=None,
    )  # fmt: skip
    steps = [
        Step(
            index=i,
            observation=s["state"]["observation"],
            state_data=None,
            internal_state=s["internal_state"],
            action=s["action"],
            result=s["result"],
            reward=None,
            caused_failure=s["caused_failure"],
        )  # fmt: skip
        for i, s in enumerate(t["steps"])
    ]
    return traj, steps


def _timed(seconds: dict[str, float], part: str, started: float) -> float:
    now = time.perf_counter()
    seconds[part] = seconds.get(part, 0.0) + now - started
    return now


def raw_floor(groups: Iterable[list[Trajectory]], work: Path, card_groups: int = 3) -> FloorResult:
    settings = parse_settings({})
    embedder = make_embedder(Settings(data_dir=share_models(work / "floor-data")))
    embedder.encode(["warm-up"])  # the model loads outside the timing, as in a started worker
    runs = [_rows(pk, t) for pk, t in enumerate((t for g in groups for t in g), start=1)]
    seconds: dict[str, float] = {}

    t0 = time.perf_counter()
    exemplars: dict[str, Any] = {}
    for traj, steps in runs:
        for ex in build_exemplars(traj, steps, settings):
            if ex.id in exemplars:
                exemplars[ex.id].evidence += ex.evidence
            else:
                exemplars[ex.id] = ex
    t0 = _timed(seconds, "exemplars (Python)", t0)

    fresh = list(exemplars.values())
    per_row = [{"state": e.state_text} | ({"internal": e.internal_text} if e.internal_text else {}) for e in fresh]
    vectors = encode_texts(embedder, per_row)
    t0 = _timed(seconds, "encode", t0)

    state = np.vstack([v["state"] for v in vectors]).astype(np.float32)
    VectorIndex(state.shape[1]).add(np.arange(len(fresh), dtype=np.int64), state)
    t0 = _timed(seconds, "index add", t0)

    by_env: dict[str | None, list[int]] = defaultdict(list)
    for i, e in enumerate(fresh):
        by_env[e.draft.environment].append(i)
    config = ContrastiveConfig()
    for members in by_env.values():
        # Most-seen first, as `exemplars_with_vectors` orders them.
        members.sort(key=lambda i: -len(fresh[i].evidence))
        rows = [
            SimpleNamespace(
                id=fresh[i].id,
                content=fresh[i].draft.content,
                evidence_successes=sum(ev.success is True for ev in fresh[i].evidence),
                evidence_failures=sum(ev.success is False for ev in fresh[i].evidence),
            )
            for i in members
        ]
        find(rows, state[members], config)  # type: ignore[arg-type]
    t0 = _timed(seconds, "contrastive", t0)

    by_task: dict[str, list[tuple[TrajectoryRow, list[Step]]]] = defaultdict(list)
    for run in runs:
        by_task[run[0].task].append(run)
    for task, task_runs in by_task.items():
        latest: list[str] = []
        for traj, _ in reversed(task_runs):
            if traj.group_id not in latest:
                latest.append(traj.group_id)
        build_card(task, [r for r in task_runs if r[0].group_id in latest[:card_groups]])
        encode_texts(embedder, [{"state": task_query_text(task)}])
    _timed(seconds, "evidence cards", t0)

    texts = sum(len(r) for r in per_row) + len(by_task)
    return FloorResult(len(runs), sum(len(s) for _, s in runs), len(fresh), texts, seconds)
