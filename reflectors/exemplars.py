"""The exemplar reflector (no LLM): every step of a closed trajectory becomes a
state → action → result exemplar (PRAXIS-style procedural recall), indexed by
its state and internal-state embeddings.

Identical (state, action) pairs merge into one exemplar; each source step is one
evidence row carrying its credit and return-to-go, so the merged statistics stay
exact as trajectories come and go. Each evidence row also keeps the hash of its
step's internal state, so the merged exemplar is an exact match under the internal
state of any occurrence, not only the first one its content shows.

Credit. A successful episode credits every step with success. A failed episode
debits only the steps flagged `caused_failure`; with none flagged, the last step
(the one that ended it) unless it is flagged `truncated`: an episode cut off by a
step limit failed for want of time, and its last action caused nothing. Other
steps of a failed episode get no credit either way: failure is not smeared over
every action.

Return-to-go. rtg_t = r_t + gamma * rtg_{t+1} over step rewards (missing = 0).
When no step carries a reward, the outcome's reward (else 1/0 for success) is the
reward of the last step, so sparse-reward episodes still rank their steps.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import orjson
from sqlalchemy.orm import Session

from domain.hashing import text_hash
from domain.jobs import TRAJECTORY_CLOSED
from domain.reflections import ReflectionDraft
from domain.settings import NamespaceSettings
from domain.state_text import internal_text, state_text
from reflectors.embed import encode_texts, text_hashes
from reflectors.registry import Reflector, Trigger, register
from reflectors.worker import JobView, TransientError, Write
from service.namespaces.stored import read_settings
from store import embeddings as embeddings_repo
from store import evidence as evidence_repo
from store import index_feed
from store import lexical as lexical_repo
from store import reflections as repo
from store.database import Database
from store.embedding.base import Embedder
from store.models import Trajectory
from store.trajectory_reader import StoredStep, read_step_records

NAME = "exemplar"
VERSION = "1"
KIND = "exemplar"
# Closed trajectories indexed together: one encoder call for their new texts. A
# 50-step episode has ~100 texts; bench.freshness measured ~7 s of encoding for 8
# of them with both cores busy, which a reader's job could wait behind; 4 halves it.
BATCH_JOBS = 4


def returns_to_go(rewards: list[float | None], gamma: float) -> list[float]:
    out = [0.0] * len(rewards)
    running = 0.0
    for t in range(len(rewards) - 1, -1, -1):
        running = (rewards[t] or 0.0) + gamma * running
        out[t] = running
    return out


def step_rewards(traj: Trajectory, steps: list[StoredStep]) -> list[float | None]:
    rewards = [s.reward for s in steps]
    if steps and all(r is None for r in rewards):
        terminal = traj.reward
        if terminal is None and traj.success is not None:
            terminal = 1.0 if traj.success else 0.0
        rewards[-1] = terminal
    return rewards


def credit(traj: Trajectory, steps: list[StoredStep]) -> list[bool | None]:
    flagged = [s.caused_failure for s in steps]
    if traj.success is True:
        return [not f for f in flagged]  # a flagged step is never credited
    out: list[bool | None] = [False if f else None for f in flagged]
    if traj.success is False and steps and not any(flagged) and not steps[-1].truncated:
        out[-1] = False
    return out


def exemplar_id(environment: str | None, observation: str, data: Any, action: Any) -> str:
    key = orjson.dumps([environment, observation, data, action], option=orjson.OPT_SORT_KEYS)
    return "ex_" + hashlib.sha256(key).hexdigest()[:32]


def _action_text(action: Any) -> str:
    return action if isinstance(action, str) else orjson.dumps(action, option=orjson.OPT_SORT_KEYS).decode()


@dataclass
class _Exemplar:
    id: str
    draft: ReflectionDraft
    state_text: str
    internal_text: str | None
    evidence: list[evidence_repo.EvidenceIn]

    @property
    def texts(self) -> dict[str, str]:
        """field -> the text its vector encodes."""
        return {"state": self.state_text} | ({"internal": self.internal_text} if self.internal_text else {})


def build_exemplars(traj: Trajectory, steps: list[StoredStep], settings: NamespaceSettings) -> list[_Exemplar]:
    rtg = returns_to_go(step_rewards(traj, steps), settings.gamma)
    credits = credit(traj, steps)
    by_id: dict[str, _Exemplar] = {}
    for step, value, credited in zip(steps, rtg, credits, strict=True):
        i_text = internal_text(step.internal_state, settings.state_text.max_chars)
        # Each occurrence keeps its own internal state's hash: a merged exemplar is an
        # exact match under any of them (the content keeps only the first).
        ev = evidence_repo.EvidenceIn(
            traj.pk, step.index, step.index, success=credited, value=value, internal_hash=i_text and text_hash(i_text)
        )
        eid = exemplar_id(traj.environment, step.observation, step.state_data, step.action)
        if eid in by_id:  # the same (state, action) twice in one episode
            by_id[eid].evidence.append(ev)
            continue
        content = {
            "observation": step.observation,
            "state_data": step.state_data,
            "internal_state": step.internal_state,
            "action": step.action,
            "result": step.result,
            "reward": step.reward,
        }
        text = f"State: {step.observation}\nAction: {_action_text(step.action)}"
        if step.result:
            text += f"\nResult: {step.result}"
        by_id[eid] = _Exemplar(
            id=eid,
            draft=ReflectionDraft(
                namespace=traj.namespace,
                id=eid,
                kind=KIND,
                status="active",  # grounded in what happened: no approval needed
                content=content,
                text=text,
                environment=traj.environment,
                task=traj.task,
                reflector=NAME,
                reflector_version=VERSION,
            ),
            state_text=state_text(
                settings.state_text, observation=step.observation, data=step.state_data, task=traj.task
            ),
            internal_text=i_text,
            evidence=[ev],
        )
    return list(by_id.values())


class ExemplarReflector:
    """Job handler for `trajectory.closed`: exemplars for every step, embedded and
    written with their evidence and index feed entries; then, in the same
    transaction, the triggers of the other reflectors this worker runs queue the
    reflection that builds on them (coalesced: many episodes closing at once make
    one recount per environment and one card per task)."""

    def __init__(self, db: Database, embedder: Embedder, triggers: Sequence[Trigger] = ()) -> None:
        self.db = db
        self.embedder = embedder
        self.triggers = list(triggers)

    def __call__(self, job: JobView) -> Write | None:
        return self.run_batch([job])[0]

    def run_batch(self, jobs: Sequence[JobView]) -> list[Write | None]:
        """Many closed trajectories at once: one read, one encoder call for every new
        exemplar's texts across them (a text some stored vector already encodes is
        reused, not encoded), then one write per job."""
        with self.db.read() as session:
            plans = [self._plan(session, job) for job in jobs]
        # Every plan's own texts: two jobs may draft the same exemplar id under other
        # internal states, and the one that creates it must store vectors of its texts.
        fresh = [e for plan in plans if plan is not None for e in plan.exemplars if e.id not in plan.known]
        vectors = self._embed(fresh)  # no transaction is open here
        return [None if plan is None else self._write(plan, vectors) for plan in plans]

    def _plan(self, session: Session, job: JobView) -> _Plan | None:
        traj = session.get(Trajectory, job.payload["trajectory_pk"])
        if traj is None:  # deleted since: nothing to derive
            return None
        settings = read_settings(session, traj.namespace)
        steps = read_step_records(session, traj.namespace, None, [traj.pk], StoredStep)[traj.pk]
        exemplars = build_exemplars(traj, steps, settings)
        known = set(repo.read_reflections_by_ids(session, traj.namespace, [e.id for e in exemplars]))
        return _Plan(traj, settings, exemplars, known)

    def _write(self, plan: _Plan, vectors: dict[str, np.ndarray]) -> Write:
        traj, settings, exemplars = plan.trajectory, plan.settings, plan.exemplars
        namespace = traj.namespace

        def write(session: Session) -> None:
            index_feed.lock_feed(session, namespace)
            stored = repo.read_reflections_by_ids(session, namespace, [e.id for e in exemplars])
            changes: list[tuple[str, int, str]] = []
            touched: list[int] = []
            for ex in exemplars:
                row = stored.get(ex.id)
                if row is None:
                    hashes = text_hashes(ex.texts)
                    if any(h not in vectors for h in hashes.values()):  # it vanished after we looked
                        raise TransientError(f"exemplar {ex.id} changed while the job ran")  # embed on the next attempt
                    row = repo.create_reflection(session, ex.draft.values(), actor=f"reflector:{NAME}")
                    embeddings_repo.update_embeddings(
                        session,
                        reflection_pk=row.pk,
                        namespace=namespace,
                        kind=KIND,
                        model=self.embedder.name,
                        vectors={field: vectors[h] for field, h in hashes.items()},
                        text_hashes=hashes,
                    )
                    lexical_repo.update_lexical_text(
                        session, reflection_pk=row.pk, namespace=namespace, kind=KIND, text_=ex.state_text
                    )
                    changes.append((KIND, row.pk, "upsert"))
                evidence_repo.create_evidence(session, row.pk, ex.evidence)
                touched.append(row.pk)
            evidence_repo.update_evidence_stats(session, touched)
            index_feed.create_changes(session, namespace, changes)
            for trigger in self.triggers:
                trigger(session, traj, settings)

        return write

    def _embed(self, exemplars: list[_Exemplar]) -> dict[str, np.ndarray]:
        """text hash -> its vector, for every text of these exemplars."""
        per_row = [e.texts for e in exemplars]
        encoded = encode_texts(self.embedder, per_row, self.db)
        return {
            text_hash(text): vecs[field]
            for e, vecs in zip(exemplars, encoded, strict=True)
            for field, text in e.texts.items()
        }


@dataclass
class _Plan:
    """What one job read: its trajectory, settings, exemplars, and which exist."""

    trajectory: Trajectory
    settings: NamespaceSettings
    exemplars: list[_Exemplar]
    known: set[str]


register(
    Reflector(
        name=NAME,
        version=VERSION,
        job=TRAJECTORY_CLOSED,
        build=lambda deps: ExemplarReflector(deps.db, deps.embedder, deps.triggers),
        batch_size=BATCH_JOBS,
    )
)
