"""When the LLM reflectors run: jobs queued when a closed trajectory has been
indexed (from the exemplar job's write, so in the same transaction as its
exemplars), only by workers that have an LLM configured.

| job | for | dedup |
|---|---|---|
| reflect.golden_negative | a failed attempt with `metadata.expert == true` | once per trajectory |
| reflect.heuristics | any other attempt with a known outcome (success or reward) | once per trajectory |
| reflect.skills | a successful attempt | once per trajectory |
| reflect.rubrics | a task whose recent attempts include a success and a failure | coalesced per task |
"""

from __future__ import annotations

from sqlalchemy.orm import Session

from reflectors.llm_reflectors.common import (
    GOLDEN_NEGATIVE_JOB,
    HEURISTICS_JOB,
    RUBRICS_JOB,
    SKILLS_JOB,
    is_expert,
)
from reflectors.llm_reflectors.rubrics import LOOKBACK, mixed, pick_attempts
from service.namespaces.schemas import NamespaceSettings
from store import jobs as jobs_repo
from store import trajectories as trajectories_repo
from store.models import Trajectory

PER_TRAJECTORY_PRIORITY = 70  # after indexing (10) and the offline reflectors (50)
RUBRICS_PRIORITY = 80


def queue_llm_reflection(session: Session, traj: Trajectory, settings: NamespaceSettings) -> None:
    cfg = settings.reflection.llm
    if not cfg.enabled or traj.step_count == 0:
        return
    wanted = set(cfg.reflectors)
    payload = {"trajectory_pk": traj.pk, "trajectory_id": traj.id}

    def once(kind: str) -> None:
        jobs_repo.enqueue_job(
            session,
            namespace=traj.namespace,
            kind=kind,
            payload=payload,
            dedup_key=f"{kind}:{traj.pk}",
            priority=PER_TRAJECTORY_PRIORITY,
        )

    if traj.success is False and is_expert(traj) and "golden_negatives" in wanted:
        once(GOLDEN_NEGATIVE_JOB)
    elif "heuristics" in wanted and (traj.success is not None or traj.reward is not None):
        once(HEURISTICS_JOB)
    if traj.success is True and "skills" in wanted:
        once(SKILLS_JOB)
    if traj.success is not None and "rubrics" in wanted:
        recent = trajectories_repo.recent_closed_with_outcome(
            session, traj.namespace, traj.task_hash, LOOKBACK * cfg.rubric_attempts
        )
        if mixed(pick_attempts(recent, cfg.rubric_attempts)):
            jobs_repo.enqueue_job(
                session,
                namespace=traj.namespace,
                kind=RUBRICS_JOB,
                payload={"task": traj.task, "task_hash": traj.task_hash},
                dedup_key=f"{RUBRICS_JOB}:{traj.namespace}:{traj.task_hash}",
                once=False,
                priority=RUBRICS_PRIORITY,
            )
