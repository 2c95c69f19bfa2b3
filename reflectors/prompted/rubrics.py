"""Rubrics from attempts at one task with different outcomes (RubricEM / CRPO).

`reflect.rubrics` (coalesced per task: queued when an attempt of a task closes and
the task's recent attempts include a success and a failure): the rubrics prompt
reads up to `rubric_attempts` recent attempts — newest first, alternating successes
and failures so both are shown — labelled `### Attempt A: <outcome>`, and writes
2-8 weighted criteria, each either rule-checkable (regex, contains, JSON field, tool
called, step count) or left to an LLM judge.

One rubric per task (its id is a hash of the task), matched by the task text like
an evidence card. It is rewritten in place (a new version; the old ones stay in the
history) once at least `rubric_min_new_attempts` attempts it was not written from
have closed; its evidence is exactly the attempts of its current version. A retired
rubric is left alone.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from domain.jobs import Dedup, Lane, Priority, declare
from domain.reflections import ReflectionDraft
from domain.settings import NamespaceSettings
from domain.state_text import task_query_text
from reflectors import repository
from reflectors.embed import encode_texts, write_vectors
from reflectors.llm_client import LLMClient
from reflectors.llm_client.schemas import Criterion, RubricOut
from reflectors.prompted.common import RUBRICS_NAME, show_steps, stable_id
from reflectors.prompts import load_prompt
from reflectors.prompts.steps import render_outcome
from reflectors.registry import Reflector, register
from reflectors.worker import JobView, Write
from service.namespaces.stored import read_settings
from service.rubrics.content import describe_check
from store import evidence as evidence_repo
from store import index_feed
from store import reflections as repo
from store.database import Database
from store.embedding.base import Embedder
from store.models import Trajectory
from store.trajectory_reader import StoredStep, read_step_records

KIND = "rubric"
PROMPT = ("rubrics", 1)
LOOKBACK = 4  # attempts read per attempt shown, to find both outcomes
FIELD_CHARS = 600  # per step field: several attempts share one prompt


def rubric_id(namespace: str, task_hash: str) -> str:
    return stable_id("rubric_", namespace, task_hash)


def pick_attempts(recent: list[Trajectory], limit: int) -> list[Trajectory]:
    """Up to `limit` of the newest-first `recent`, alternating successes and
    failures while both last, in chronological order."""
    wins = [t for t in recent if t.success]
    losses = [t for t in recent if t.success is False]
    picked: list[Trajectory] = []
    while len(picked) < limit and (wins or losses):
        for side in (wins, losses):
            if side and len(picked) < limit:
                picked.append(side.pop(0))
    return sorted(picked, key=lambda t: t.pk)


def mixed(attempts: list[Trajectory]) -> bool:
    return any(t.success for t in attempts) and any(t.success is False for t in attempts)


def rubric_content(task: str, criteria: list[Criterion], attempts: list[tuple[str, Trajectory]]) -> dict[str, Any]:
    rows = [
        {
            "id": f"c{i + 1}",  # DESIGN.md's criterion ids (the rubric scorer names criteria by them)
            "text": c.text,
            "weight": c.weight,
            "check": None if c.check is None else c.check.model_dump(),
            "rationale": c.rationale,
        }
        for i, c in enumerate(criteria)
    ]
    lines = [f"Rubric for task: {task}"]
    lines += [
        f"- [{c.weight:.2f}] {c.text} ({describe_check(None if c.check is None else c.check.normalised())})"
        for c in criteria
    ]
    return {
        "name": f"Rubric for task: {task}"[:200],
        "task": task,
        "criteria": rows,
        "attempts": [
            {"label": label, "trajectory_id": t.id, "success": t.success, "reward": t.reward} for label, t in attempts
        ],
        "text": "\n".join(lines),
    }


class RubricsReflector:
    """Job handler for `reflect.rubrics` (payload: task, task_hash)."""

    def __init__(self, db: Database, embedder: Embedder, llm: LLMClient) -> None:
        self.db = db
        self.embedder = embedder
        self.llm = llm

    def __call__(self, job: JobView) -> Write | None:
        ns, task, task_hash = job.namespace, job.payload["task"], job.payload["task_hash"]
        id_ = rubric_id(ns, task_hash)
        with self.db.read() as session:
            settings = read_settings(session, ns)
            cfg = settings.reflection.llm
            if not cfg.enabled or "rubrics" not in cfg.reflectors:
                return None
            recent = repository.list_recent_closed_with_outcome(session, ns, task_hash, LOOKBACK * cfg.rubric_attempts)
            attempts = pick_attempts(recent, cfg.rubric_attempts)
            if not mixed(attempts):
                return None
            existing = repo.read_reflection(session, ns, id_)
            if existing is not None:
                if existing.status == "retired":
                    return None
                cited = evidence_repo.list_evidence_trajectory_pks(session, existing.pk)
                if sum(t.pk not in cited for t in attempts) < cfg.rubric_min_new_attempts:
                    return None  # not enough new to say: the rubric stands
            steps = read_step_records(session, ns, None, [t.pk for t in attempts], StoredStep)
        labelled = [(chr(ord("A") + i), t) for i, t in enumerate(attempts)]
        per_attempt = max(4, cfg.max_prompt_steps // len(attempts))
        blocks = []
        for label, t in labelled:
            _, text = show_steps(steps[t.pk], per_attempt, max_field_chars=FIELD_CHARS)
            blocks.append(f"### Attempt {label}: {render_outcome(t.success, t.reward, t.failure_reason)}\n{text}")
        environments = {t.environment for t in attempts}
        environment = environments.pop() if len(environments) == 1 else None
        prompt = load_prompt(*PROMPT)
        messages = prompt.render(task=task, environment=environment, trajectories="\n\n".join(blocks))
        result = self.llm.complete_json(messages, RubricOut, namespace=ns, purpose=prompt.id)
        content = rubric_content(task, result.parsed.criteria, labelled)
        texts = {"state": task_query_text(task)[: settings.state_text.max_chars]}
        vectors = encode_texts(self.embedder, [texts])[0]
        window = {t.pk for t in attempts}
        evidence = [
            evidence_repo.EvidenceIn(t.pk, 0, max(0, len(steps[t.pk]) - 1), success=t.success, value=t.reward)
            for t in attempts
        ]
        model = self.embedder.name
        actor = f"reflector:{RUBRICS_NAME}"
        note = f"written by {prompt.id} ({result.model}) from attempts " + ", ".join(
            f"{label} {t.id}" for label, t in labelled
        )

        def write(session: Session) -> None:
            index_feed.lock_feed(session, ns)
            row = repo.read_reflection(session, ns, id_, for_update=True)
            if row is None:
                draft = ReflectionDraft(
                    namespace=ns,
                    id=id_,
                    kind=KIND,
                    content=content,
                    text=content["text"],
                    environment=environment,
                    task=task,
                    reflector=RUBRICS_NAME,
                    reflector_version=prompt.id,
                    model=result.model,
                    source_key=f"{KIND}:{task_hash}",
                )
                row = repo.create_reflection(session, draft.values(), actor=actor)
            elif row.status == "retired" or evidence_repo.list_evidence_trajectory_pks(session, row.pk) == window:
                return  # retired meanwhile, or this very revision was written already
            else:
                row.reflector_version, row.model, row.environment = prompt.id, result.model, environment
                repo.update_reflection(session, row, content=content, text=content["text"], actor=actor, note=note)
            write_vectors(session, row, model, vectors, texts)
            evidence_repo.update_evidence(session, row.pk, evidence)
            if (
                row.status == "candidate"
                and cfg.activation == "evidence"
                and len(attempts) >= cfg.activation_importance
            ):
                repo.update_reflection_status(
                    session,
                    row,
                    "active",
                    action="activate",
                    actor=actor,
                    note=f"written from {len(attempts)} attempts with both outcomes "
                    f"(activation_importance {cfg.activation_importance})",
                )

        return write


JOB = declare(
    "reflect.rubrics",
    lane=Lane.SLOW,
    priority=Priority.LLM_TASK,
    dedup=Dedup.COALESCE,
    description="write or revise a task's rubric from its recent successes and failures (LLM)",
)


def queue_rubric(session: Session, traj: Trajectory, settings: NamespaceSettings) -> None:
    """A task whose recent attempts include a success and a failure: coalesced per task."""
    cfg = settings.reflection.llm
    if traj.step_count == 0 or traj.success is None or "rubrics" not in cfg.reflectors:
        return
    recent = repository.list_recent_closed_with_outcome(
        session, traj.namespace, traj.task_hash, LOOKBACK * cfg.rubric_attempts
    )
    if mixed(pick_attempts(recent, cfg.rubric_attempts)):
        JOB.enqueue(
            session, traj.namespace, {"task": traj.task, "task_hash": traj.task_hash}, traj.namespace, traj.task_hash
        )


register(
    Reflector(
        name=RUBRICS_NAME,
        version="1",
        job=JOB,
        build=lambda deps: RubricsReflector(deps.db, deps.embedder, deps.llm),
        settings_section="llm",
        needs_llm=True,
        trigger=queue_rubric,
    )
)
