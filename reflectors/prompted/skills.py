"""Skills from successful attempts (Agent Workflow Memory, Voyager, SEED hindsight
skills).

`reflect.skills` (every successful attempt, once): the skills prompt reads the
attempt, with the environment's skill library listed so it does not write one the
library has, and answers 0-4 skills — name, when to use, preconditions,
parameters, abstract steps, and the step range they were induced from.

A skill whose name is already in the library, or whose text's embedding is at or
above `dedup_similarity` to a library skill, is that skill again: its evidence is
merged (importance +1). Others are added as candidates. The library is the
environment's LLM-written skills that are not retired.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from domain.jobs import Dedup, Lane, Priority, declare
from domain.settings import NamespaceSettings
from reflectors import repository
from reflectors.embed import encode_texts
from reflectors.llm_client import LLMClient
from reflectors.llm_client.schemas import SkillItem, SkillsOut
from reflectors.prompted import pool
from reflectors.prompted.common import POOL_LIMIT, SKILLS_NAME, load_source, show_steps, stable_id
from reflectors.prompts import load_prompt
from reflectors.prompts.steps import render_outcome
from reflectors.registry import Reflector, register
from reflectors.worker import JobView, Write
from store import evidence as evidence_repo
from store.database import Database
from store.embedding.base import Embedder
from store.models import Trajectory

KIND = "skill"
PROMPT = ("skills", 1)
POOL = (SKILLS_NAME,)


def skill_id(namespace: str, environment: str | None, name: str) -> str:
    return stable_id("skill_", namespace, environment, name.lower())


def skill_text(s: SkillItem) -> str:
    lines = [f"Skill {s.name}: {s.when_to_use}"]
    if s.preconditions:
        lines.append("Preconditions: " + "; ".join(p.rstrip(" .;") for p in s.preconditions) + ".")
    if s.parameters:
        lines.append("Parameters: " + "; ".join(f"{{{p.name}}} {p.description}" for p in s.parameters))
    lines.append("Steps:")
    lines += [f"{i}. {step}" for i, step in enumerate(s.steps, start=1)]
    return "\n".join(lines)


class SkillsReflector:
    """Job handler for `reflect.skills` (payload: trajectory_pk)."""

    def __init__(self, db: Database, embedder: Embedder, llm: LLMClient) -> None:
        self.db = db
        self.embedder = embedder
        self.llm = llm

    def __call__(self, job: JobView) -> Write | None:
        src = load_source(self.db, job.payload["trajectory_pk"], "skills")
        if src is None or src.trajectory.success is not True:
            return None
        traj, cfg = src.trajectory, src.llm
        ns, env = traj.namespace, traj.environment
        with self.db.read() as session:
            if repository.cited_by_reflectors(session, ns, traj.pk, POOL):
                return None  # written already
            rows = repository.list_pool_with_vectors(
                session, ns, kind=KIND, environment=env, reflectors=POOL, model=self.embedder.name, limit=POOL_LIMIT
            )
        library = pool.WorkingPool.of(rows)
        by_name = {str(e.content.get("name")): e for e in library.entries}
        prompt = load_prompt(*PROMPT)
        shown, steps_text = show_steps(src.steps, cfg.max_prompt_steps)
        existing = "\n".join(f"{name}: {e.content.get('when_to_use', '')}" for name, e in sorted(by_name.items()))
        messages = prompt.render(
            task=traj.task,
            environment=env,
            outcome=render_outcome(traj.success, traj.reward, traj.failure_reason),
            existing_skills=existing or None,
            steps=steps_text,
        )
        result = self.llm.complete_json(
            messages,
            SkillsOut,
            namespace=ns,
            purpose=prompt.id,
            context={"step_indexes": shown, "known_skill_names": sorted(by_name)},
        )
        skills = result.parsed.skills
        vectors = encode_texts(self.embedder, [{"state": skill_text(s)} for s in skills])
        ops: list[pool.Op] = []
        seen = frozenset(e.id for e in library.entries)
        for s, vecs in zip(skills, vectors, strict=True):
            vector, text = vecs["state"], skill_text(s)
            start, end = s.step_range
            evidence = evidence_repo.EvidenceIn(traj.pk, start, end, success=True, value=1.0)
            id_ = skill_id(ns, env, s.name)
            same = by_name.get(s.name) or library.get(id_)
            if same is not None:
                ops.append(pool.Vote(same.id, evidence, "merge", f"the same skill name again, from attempt {traj.id}"))
                continue
            ranked = library.ranked(vector)
            if ranked and ranked[0][1] >= cfg.dedup_similarity:
                target, sim = ranked[0]
                note = f"near-duplicate {s.name!r} (cosine {sim:.3f}) from attempt {traj.id}"
                ops.append(pool.Vote(target.id, evidence, "merge", note))
                continue
            content: dict[str, Any] = {
                "name": s.name,
                "when_to_use": s.when_to_use,
                "preconditions": list(s.preconditions),
                "parameters": [p.model_dump() for p in s.parameters],
                "steps": list(s.steps),
                "importance": 1,
                "text": text,
            }
            made_by = (SKILLS_NAME, prompt.id, result.model)
            ops.append(pool.Add(pool.NewItem.candidate((ns, KIND, env), id_, content, made_by, vector, evidence)))
            entry = pool.PoolEntry(id_, 1, content, text, vector)
            library.entries.append(entry)
            by_name[s.name] = entry

        who = (KIND, POOL, f"reflector:{SKILLS_NAME}")
        return pool.writer(
            ops, who=who, traj=traj, environment=env, settings=cfg, model=self.embedder.name, seen_ids=seen
        )


JOB = declare(
    "reflect.skills",
    lane=Lane.SLOW,
    priority=Priority.LLM,
    dedup=Dedup.ONCE,
    description="distil a skill from a successful attempt (LLM), once per trajectory",
)


def queue_skill(session: Session, traj: Trajectory, settings: NamespaceSettings) -> None:
    if traj.step_count and traj.success is True and "skills" in settings.reflection.llm.reflectors:
        JOB.enqueue(session, traj.namespace, {"trajectory_pk": traj.pk, "trajectory_id": traj.id}, traj.pk)


register(
    Reflector(
        name=SKILLS_NAME,
        version="1",
        job=JOB,
        build=lambda deps: SkillsReflector(deps.db, deps.embedder, deps.llm),
        settings_section="llm",
        needs_llm=True,
        trigger=queue_skill,
    )
)
