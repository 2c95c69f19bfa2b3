"""Heuristics from single attempts (ERL) and from failed expert attempts (ReflectRL
golden negatives), kept in one pool per environment by ExpeL's operations.

`reflect.heuristics` (every closed attempt with a known outcome, once): the
heuristics_single prompt reads the attempt and writes up to 3 heuristics — trigger,
guideline, rationale, polarity, the steps that show it.

`reflect.golden_negative` (a failed attempt whose `metadata.expert` is true, once,
instead of the above): the golden_negative prompt finds the critical step, what went
wrong, the corrected action and a hint, and up to 3 heuristics; the analysis is kept
in the content of the heuristics it produced or confirmed (`golden_negatives`).

Either way each new heuristic then meets the pool (the environment's LLM-written
heuristics that are not retired), compared by the cosine of its text's embedding
with the pool items' stored state vectors:

- at or above `dedup_similarity`: the same heuristic — its evidence is merged into
  the existing one (importance +1), no LLM call;
- else, existing items at or above `maintenance_similarity` (the nearest
  `max_neighbours`) go to the pool_maintenance prompt, which answers ADD, EDIT (a
  new version of the target with the rewritten trigger and guideline, re-embedded),
  UPVOTE or DOWNVOTE;
- no such neighbour: ADD.

The text a heuristic is embedded by (and shown to agents as) is its trigger and
guideline, not the episode-specific rationale, so that two wordings of one lesson
are close and opposite advice for one situation is not.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypeVar

from pydantic import BaseModel
from sqlalchemy.orm import Session

from domain.jobs import Dedup, Lane, Priority, declare
from domain.settings import NamespaceSettings
from reflectors import repository
from reflectors.embed import encode_texts
from reflectors.llm_client import LLMClient
from reflectors.llm_client.client import LLMResult
from reflectors.llm_client.schemas import GoldenNegativeOut, HeuristicItem, HeuristicsOut, PoolOpOut
from reflectors.prompted import pool
from reflectors.prompted.common import (
    GOLDEN_NEGATIVE_NAME,
    HEURISTIC_POOL,
    HEURISTICS_NAME,
    POOL_LIMIT,
    Source,
    is_expert,
    load_source,
    normalise,
    show_steps,
    stable_id,
)
from reflectors.prompts import Prompt, load_prompt
from reflectors.prompts.steps import render_outcome
from reflectors.registry import Reflector, register
from reflectors.worker import JobView, Write
from store import evidence as evidence_repo
from store.database import Database
from store.embedding.base import Embedder
from store.models import Trajectory

KIND = "heuristic"
HEURISTICS_PROMPT = ("heuristics_single", 1)
GOLDEN_NEGATIVE_PROMPT = ("golden_negative", 1)
POOL_PROMPT = ("pool_maintenance", 1)


def heuristic_text(trigger: str, guideline: str) -> str:
    return f"When: {trigger}\nGuideline: {guideline}"


def heuristic_id(namespace: str, environment: str | None, trigger: str, guideline: str) -> str:
    return stable_id("heur_l_", namespace, environment, normalise(trigger), normalise(guideline))


@dataclass
class Candidate:
    """A heuristic the model wrote, before it meets the pool."""

    item: HeuristicItem
    extra: list[dict[str, Any]] | None  # golden-negative analysis

    @property
    def text(self) -> str:
        return heuristic_text(self.item.trigger, self.item.guideline)


def _describe(trigger: str, guideline: str, polarity: str, rationale: str | None = None) -> str:
    lines = [f"trigger: {trigger}", f"guideline: {guideline}", f"polarity: {polarity}"]
    if rationale is not None:
        lines.append(f"rationale: {rationale}")
    return "\n".join(lines)


class HeuristicPool:
    """Plans what new heuristics do to the environment's pool (outside any
    transaction: embedding and pool-maintenance calls happen here)."""

    def __init__(self, db: Database, embedder: Embedder, llm: LLMClient) -> None:
        self.db = db
        self.embedder = embedder
        self.llm = llm

    def plan(
        self,
        src: Source,
        candidates: list[Candidate],
        *,
        reflector: str,
        reflector_version: str,
        model: str,
    ) -> Write:
        traj, cfg = src.trajectory, src.llm
        ns, env = traj.namespace, traj.environment
        vectors = encode_texts(self.embedder, [{"state": c.text} for c in candidates])
        with self.db.read() as session:
            rows = repository.list_pool_with_vectors(
                session,
                ns,
                kind=KIND,
                environment=env,
                reflectors=HEURISTIC_POOL,
                model=self.embedder.name,
                limit=POOL_LIMIT,
            )
        working = pool.WorkingPool.of(rows)
        seen = frozenset(e.id for e in working.entries)
        ops: list[pool.Op] = []
        for cand, vecs in zip(candidates, vectors, strict=True):
            h, vector = cand.item, vecs["state"]
            evidence = evidence_repo.EvidenceIn(
                traj.pk, min(h.evidence_steps), max(h.evidence_steps), success=traj.success, value=1.0
            )
            id_ = heuristic_id(ns, env, h.trigger, h.guideline)
            ranked = working.ranked(vector)
            if working.get(id_) is not None:
                ops.append(pool.Vote(id_, evidence, "merge", f"the same heuristic again, from attempt {traj.id}"))
                continue
            if ranked and ranked[0][1] >= cfg.dedup_similarity:
                target, sim = ranked[0]
                note = f"near-duplicate (cosine {sim:.3f}) from attempt {traj.id}"
                ops.append(pool.Vote(target.id, evidence, "merge", note, cand.extra))
                continue
            neighbours = [e for e, sim in ranked if sim >= cfg.maintenance_similarity][: cfg.max_neighbours]
            decision = self._maintain(ns, env, h, neighbours) if neighbours else None
            if decision is None or decision[0].operation == "ADD":
                content: dict[str, Any] = {
                    "trigger": h.trigger,
                    "guideline": h.guideline,
                    "rationale": h.rationale,
                    "polarity": h.polarity,
                    "importance": 1,
                    "text": cand.text,
                }
                if cand.extra:
                    content["golden_negatives"] = cand.extra
                made_by = (reflector, reflector_version, model)
                item = pool.NewItem.candidate((ns, KIND, env), id_, content, made_by, vector, evidence)
                ops.append(pool.Add(item))
                working.entries.append(pool.PoolEntry(id_, 1, content, cand.text, vector))
                continue
            op, via = decision
            target = working.get(op.target_id or "")
            assert target is not None  # the answer's validator checked target_id against the ids shown
            note = f"{op.operation} by {via} from attempt {traj.id}: {op.reason}"
            if op.operation == "UPVOTE":
                ops.append(pool.Vote(target.id, evidence, "upvote", note, cand.extra))
            elif op.operation == "DOWNVOTE":
                against = evidence_repo.EvidenceIn(
                    evidence.trajectory_pk, evidence.step_start, evidence.step_end, evidence.success, value=-1.0
                )
                ops.append(pool.Vote(target.id, against, "downvote", note))
            else:  # EDIT
                trigger, guideline = op.trigger or "", op.guideline or ""
                text = heuristic_text(trigger, guideline)
                new_vector = encode_texts(self.embedder, [{"state": text}])[0]["state"]
                changes = {"trigger": trigger, "guideline": guideline, "text": text}
                ops.append(pool.Edit(target.id, target.version, changes, text, new_vector, evidence, note, cand.extra))
                target.version += 1
                target.content = {**target.content, **changes}
                target.text, target.vector = text, new_vector

        who = (KIND, HEURISTIC_POOL, f"reflector:{reflector}")
        return pool.writer(
            ops, who=who, traj=traj, environment=env, settings=cfg, model=self.embedder.name, seen_ids=seen
        )

    def _maintain(
        self, namespace: str, environment: str | None, h: HeuristicItem, neighbours: list[pool.PoolEntry]
    ) -> tuple[PoolOpOut, str]:
        prompt = load_prompt(*POOL_PROMPT)
        existing = "\n\n".join(
            f"id: {e.id}\n"
            + _describe(
                str(e.content.get("trigger", "")), str(e.content.get("guideline", "")), str(e.content.get("polarity"))
            )
            for e in neighbours
        )
        messages = prompt.render(
            environment=environment,
            candidate=_describe(h.trigger, h.guideline, h.polarity, h.rationale),
            existing=existing,
        )
        result = self.llm.complete_json(
            messages,
            PoolOpOut,
            namespace=namespace,
            purpose=prompt.id,
            context={"known_ids": [e.id for e in neighbours]},
        )
        return result.parsed, f"{prompt.id} ({result.model})"


T = TypeVar("T", bound=BaseModel)


def _ask_about_attempt(
    llm: LLMClient, src: Source, prompt_ref: tuple[str, str], out_model: type[T]
) -> tuple[Prompt, LLMResult[T]]:
    """Show one attempt (task, environment, outcome, its steps) to a prompt; the
    answer may cite only the steps shown."""
    traj = src.trajectory
    prompt = load_prompt(*prompt_ref)
    shown, steps_text = show_steps(src.steps, src.llm.max_prompt_steps)
    messages = prompt.render(
        task=traj.task,
        environment=traj.environment,
        outcome=render_outcome(traj.success, traj.reward, traj.failure_reason),
        steps=steps_text,
    )
    result = llm.complete_json(
        messages, out_model, namespace=traj.namespace, purpose=prompt.id, context={"step_indexes": shown}
    )
    return prompt, result


class HeuristicsReflector:
    """Job handler for `reflect.heuristics` (payload: trajectory_pk)."""

    def __init__(self, db: Database, embedder: Embedder, llm: LLMClient) -> None:
        self.db = db
        self.llm = llm
        self.pool = HeuristicPool(db, embedder, llm)

    def __call__(self, job: JobView) -> Write | None:
        src = load_source(self.db, job.payload["trajectory_pk"], "heuristics")
        if src is None or _already_reflected(self.db, src):
            return None
        prompt, result = _ask_about_attempt(self.llm, src, HEURISTICS_PROMPT, HeuristicsOut)
        candidates = [Candidate(h, None) for h in result.parsed.heuristics]
        return self.pool.plan(
            src, candidates, reflector=HEURISTICS_NAME, reflector_version=prompt.id, model=result.model
        )


class GoldenNegativeReflector:
    """Job handler for `reflect.golden_negative` (payload: trajectory_pk)."""

    def __init__(self, db: Database, embedder: Embedder, llm: LLMClient) -> None:
        self.db = db
        self.llm = llm
        self.pool = HeuristicPool(db, embedder, llm)

    def __call__(self, job: JobView) -> Write | None:
        src = load_source(self.db, job.payload["trajectory_pk"], "golden_negatives")
        if src is None or _already_reflected(self.db, src):
            return None
        traj = src.trajectory
        prompt, result = _ask_about_attempt(self.llm, src, GOLDEN_NEGATIVE_PROMPT, GoldenNegativeOut)
        out = result.parsed
        analysis = {
            "trajectory_id": traj.id,
            "task": traj.task,
            "critical_step": out.critical_step,
            "what_went_wrong": out.what_went_wrong,
            "corrected_action": out.corrected_action,
            "hint": out.hint,
        }
        candidates = [Candidate(h, [analysis]) for h in out.heuristics]
        return self.pool.plan(
            src, candidates, reflector=GOLDEN_NEGATIVE_NAME, reflector_version=prompt.id, model=result.model
        )


def _already_reflected(db: Database, src: Source) -> bool:
    """This attempt's heuristics were written already (a job run again after its
    results committed): no second LLM call."""
    with db.read() as session:
        return repository.cited_by_reflectors(
            session, src.trajectory.namespace, src.trajectory.pk, HEURISTIC_POOL
        )


HEURISTICS_JOB = declare(
    "reflect.heuristics",
    lane=Lane.SLOW,
    priority=Priority.LLM,
    dedup=Dedup.ONCE,
    description="reflect on one attempt with a known outcome into heuristics (LLM), once per trajectory",
)
GOLDEN_NEGATIVE_JOB = declare(
    "reflect.golden_negative",
    lane=Lane.SLOW,
    priority=Priority.LLM,
    dedup=Dedup.ONCE,
    description="analyse a failed expert attempt (metadata.expert = true) as a golden negative (LLM)",
)


def _golden_negative(traj: Trajectory, settings: NamespaceSettings) -> bool:
    return traj.success is False and is_expert(traj) and "golden_negatives" in settings.reflection.llm.reflectors


def queue_heuristics(session: Session, traj: Trajectory, settings: NamespaceSettings) -> None:
    """Any attempt with a known outcome, unless it is a golden negative (that job
    writes its heuristics)."""
    known = traj.success is not None or traj.reward is not None
    wanted = "heuristics" in settings.reflection.llm.reflectors
    if traj.step_count and known and wanted and not _golden_negative(traj, settings):
        HEURISTICS_JOB.enqueue(session, traj.namespace, {"trajectory_pk": traj.pk, "trajectory_id": traj.id}, traj.pk)


def queue_golden_negative(session: Session, traj: Trajectory, settings: NamespaceSettings) -> None:
    if traj.step_count and _golden_negative(traj, settings):
        GOLDEN_NEGATIVE_JOB.enqueue(
            session, traj.namespace, {"trajectory_pk": traj.pk, "trajectory_id": traj.id}, traj.pk
        )


register(
    Reflector(
        name=HEURISTICS_NAME,
        version="1",
        job=HEURISTICS_JOB,
        build=lambda deps: HeuristicsReflector(deps.db, deps.embedder, deps.llm),
        settings_section="llm",
        needs_llm=True,
        trigger=queue_heuristics,
    )
)
register(
    Reflector(
        name=GOLDEN_NEGATIVE_NAME,
        version="1",
        job=GOLDEN_NEGATIVE_JOB,
        build=lambda deps: GoldenNegativeReflector(deps.db, deps.embedder, deps.llm),
        settings_section="llm",
        needs_llm=True,
        trigger=queue_golden_negative,
    )
)
