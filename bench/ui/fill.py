"""A fast populator for the operator web UI benchmark: one database filled to the
size an operator's store reaches (by default 1,000,000 steps and 100,000
reflections in namespace "bench", plus a small namespace "other" so isolation
shows), in minutes, after migrating to head: what the server computes (ingest's
rows and hashes, the retrieval log, outcome credit) through its own functions, the
rest by bulk SQLAlchemy Core inserts.

    python -m bench.ui.fill --database-url sqlite:///ui.db [--steps 1000000] [--reflections 100000] [--seed 0]

or `fill(url, steps=..., reflections=...)` from a benchmark. Smaller sizes scale
everything (trajectories, retrievals, jobs, the "other" namespace) in proportion.
The database must not hold these namespaces yet; primary keys are given explicitly
(from the highest already stored), and PostgreSQL's sequences are moved past them.

What is written, deterministic from the seed (timestamps are relative to `now`):

- trajectories of 20 steps (50,000 at full size), closed, over the last 30 days, in
  groups of 8 sibling rollouts of one task, over 4 environments, 3 agents and 5
  policy versions (later ones succeed more: ~60 % overall); their steps are ingest
  shaped episodes of bench/common/agent_states.py (`make_trajectory_steps`, from a pool of
  episode templates, every step with its own state data), their rows and hashes
  made by ingest (service.trajectories.ingest) and written by the store's inserts;
- reflections in the shapes the reflectors write them (domain/reflections.py kinds:
  exemplar 80 %, heuristic 10 % (contrastive and LLM), skill 5 %, evidence_card 3 %,
  rubric 2 %), with their ids, texts and contents, 1-3 evidence rows on real
  trajectories and step ranges (evidence_* columns computed from them), 1-3
  history rows (create; sometimes an operator edit; approve / activate / retire /
  demote), one `state` vector (and `internal` for exemplars with an internal state)
  of the embedder's name, text hashes and lexical rows where the reflector writes
  them, and one upsert on the index change feed each;
- retrievals (200,000) with the query JSON the retrieval log writes, 5 served items
  each among the reflections active at that time, logged by the store's own
  `create_retrieval`, an outcome for about half recorded and credited by its
  `create_outcome` as an episode's close does (the top `credit.unnamed_top_k`
  items), so the utility and outcome counters are the server's own;
- jobs (10,000 done, 300 failed with a worker-style error, 200 queued), API keys and
  daily LLM token usage.

Vectors are random unit float32 vectors stored under the default embedder's name
and dimension (all-MiniLM-L6-v2, 384; `--model hashing-256 --dim 256` for a server
on the tests' model-free embedder): a fresh server builds its indexes from the
`embeddings` table on the first retrieve of a namespace (store/index_registry.py;
~13 s at full size on 2 cores), so nothing needs encoding and the change feed only
has to exist. To serve the fill unchanged, run the server with its worker off
(REFLEXA_WORKER__IN_PROCESS=false: else it runs the queued jobs) and a data
directory of its own per database (an index snapshot left there by another fill of
the same namespaces can be taken for this one's).

SQLite: the load runs with `synchronous=OFF` on its own connection: a fill that
crashes leaves a file to delete, not to use.
"""

from __future__ import annotations

import argparse
import hashlib
import math
import resource
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any

import numpy as np
from sqlalchemy import Connection, Table, bindparam, func, insert, select, text, update
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session

from bench.common.agent_states import FURNITURE, OBJECTS, PRODUCTS, ROOMS, SITES, make_trajectory_steps, task_of
from bench.common.output import progress
from domain.hashing import task_hash, text_hash
from domain.jobs import JOB_KINDS
from domain.settings import NamespaceSettings
from domain.state_text import task_query_text
from migrations import upgrade
from reflectors import contrastive, evidence_cards
from reflectors.exemplars import credit, exemplar_id, returns_to_go, step_rewards
from reflectors.llm_client.schemas import Criterion
from reflectors.prompted.heuristics import heuristic_id as llm_heuristic_id
from reflectors.prompted.heuristics import heuristic_text
from reflectors.prompted.rubrics import rubric_content, rubric_id
from reflectors.prompted.skills import skill_id, skill_text
from reflectors.registry import reflectors_available
from service.retrieval.credit import unnamed_max_rank
from service.retrieval.schemas import RetrieveRequest
from service.rubrics.written_checks import StepCountCheck, ToolCalledCheck
from service.trajectories import ingest
from service.trajectories.schemas import OutcomeCreate, State, StepCreate, TrajectoryCreate
from store import retrievals as retrievals_repo
from store import trajectories as trajectories_repo
from store.database import create_db_engine
from store.embedding import DEFAULT_MODEL_NAME
from store.lexical import keys_blob, text_keys
from store.models import (
    ApiKey,
    Embedding,
    IndexChange,
    Job,
    LexicalText,
    LLMTokenUsage,
    Namespace,
    Reflection,
    ReflectionEvidence,
    ReflectionServed,
    ReflectionVersion,
    Retrieval,
    RetrievalItem,
    RetrievalOutcome,
    Step,
    Trajectory,
)
from tests.factories import exemplar_draft, step_row, trajectory_row

STEPS_PER_TRAJECTORY = 20
GROUP_SIZE = 8
DAYS = 30
DIM = 384
CHUNK_ROWS = 10_000  # rows per executemany
TRAJECTORIES_PER_TX = 400  # 8,000 steps per transaction
REFLECTIONS_PER_TX = 5_000
RETRIEVALS_PER_TX = 5_000
ITEMS_PER_RETRIEVAL = 5
MAX_TEMPLATES = 2_000  # distinct episodes generated; a trajectory joins two of them, with its own state data

ENVIRONMENTS = ("webshop", "webarena", "alfworld", "textworld")
WEB = frozenset({"webshop", "webarena"})
AGENTS = ("react-agent", "reflexion-agent", "planner-agent")
POLICIES = ("policy-v1", "policy-v2", "policy-v3", "policy-v4", "policy-v5")
LLM_MODEL = "Qwen/Qwen2.5-7B-Instruct"
KIND_SHARES = (("exemplar", 0.80), ("heuristic", 0.10), ("skill", 0.05), ("evidence_card", 0.03), ("rubric", 0.02))
STATUS_SHARES = (("active", 0.85), ("candidate", 0.10), ("retired", 0.05))
FAILURE_REASONS = (
    "step limit reached",
    "bought the wrong item",
    "invalid action",
    "task object never found",
    "left the task page",
)
EDIT_NOTES = ("clarified the wording", "fixed the result text", "checked against the environment docs")
RETIRE_NOTES = ("outdated after the policy update", "duplicate of a better item", "misleading on the new site layout")
DEMOTE_NOTES = ("the evidence no longer supports it", "under review: low utility")
APPROVE_NOTES = ("looks right", "approved after spot check", None)
TABLES: tuple[type, ...] = (
    Namespace,
    ApiKey,
    Trajectory,
    Step,
    Reflection,
    ReflectionEvidence,
    ReflectionVersion,
    Embedding,
    LexicalText,
    IndexChange,
    Retrieval,
    RetrievalItem,
    ReflectionServed,
    RetrievalOutcome,
    Job,
    LLMTokenUsage,
)


@dataclass
class FillReport:
    database_url: str
    counts: dict[str, int]  # rows per table, whole database
    namespaces: dict[str, dict[str, int]]  # namespace -> {table: rows} for the main tables
    seconds: float
    phases: dict[str, float] = field(default_factory=dict)  # seconds per phase
    peak_rss_mb: float = 0.0
    model: str = DEFAULT_MODEL_NAME
    dim: int = DIM

    def summary(self) -> str:
        lines = [f"filled {self.database_url} in {self.seconds:.1f} s (peak RSS {self.peak_rss_mb:.0f} MB)"]
        lines += [f"  {name:<22} {n:>12,}" for name, n in self.counts.items()]
        lines += [f"  phase {name:<16} {s:>8.1f} s" for name, s in self.phases.items()]
        return "\n".join(lines)


@dataclass(frozen=True)
class Sizes:
    trajectories: int
    reflections: int
    retrievals: int
    jobs_done: int
    jobs_failed: int
    jobs_queued: int

    @property
    def steps(self) -> int:
        return self.trajectories * STEPS_PER_TRAJECTORY


def sizes_for(steps: int, reflections: int) -> Sizes:
    """The namespace's sizes: everything in proportion to its steps (1M steps: 200k
    retrievals, 10k done jobs, 300 failed, 200 queued)."""
    trajectories = max(GROUP_SIZE, steps // STEPS_PER_TRAJECTORY)
    n_steps = trajectories * STEPS_PER_TRAJECTORY
    return Sizes(
        trajectories=trajectories,
        reflections=max(20, reflections),
        retrievals=max(10, n_steps // 5),
        jobs_done=max(5, n_steps // 100),
        jobs_failed=max(2, n_steps * 3 // 10_000),
        jobs_queued=max(2, n_steps // 5_000),
    )


def other_sizes(steps: int, reflections: int) -> Sizes:
    """The small namespace: ~1k steps and ~200 reflections at full size."""
    return sizes_for(max(GROUP_SIZE * STEPS_PER_TRAJECTORY, steps // 1_000), max(20, reflections // 500))


# -- helpers ----------------------------------------------------------------------------


def _ts(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, UTC)


def _hex(rng: np.random.Generator, nbytes: int) -> str:
    return rng.bytes(nbytes).hex()


def _insert(conn: Connection, table: Table, rows: list[dict[str, Any]]) -> None:
    for start in range(0, len(rows), CHUNK_ROWS):
        conn.execute(insert(table), rows[start : start + CHUNK_ROWS])


def _unit_vectors(rng: np.random.Generator, n: int, dim: int) -> np.ndarray:
    v = rng.standard_normal((n, dim), dtype=np.float32)
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    return v.astype("<f4", copy=False)


def _pick(rng: np.random.Generator, shares: Sequence[tuple[str, float]]) -> str:
    """A name drawn with the given weights."""
    x = rng.random() * sum(w for _, w in shares)
    for name, w in shares:
        x -= w
        if x < 0:
            return name
    return shares[-1][0]


def _sample(rng: np.random.Generator, pool: np.ndarray, k: int) -> list[int]:
    """k distinct elements of a large pool (numpy's choice without replacement
    permutes the whole pool on every call)."""
    if k >= len(pool):
        return [int(x) for x in rng.permutation(pool)]
    seen: dict[int, None] = {}
    while len(seen) < k:
        seen.setdefault(int(rng.integers(0, len(pool))))
    return [int(pool[i]) for i in seen]


def _redact(url: str) -> str:
    return make_url(url).render_as_string(hide_password=True)


def _slug(words: str) -> str:
    return "_".join("".join(ch if ch.isalnum() else " " for ch in words.lower()).split())


# -- the plan of one namespace ----------------------------------------------------------


@dataclass(frozen=True)
class _Author:
    """A reflector as its reflections record it: the kind it writes, its name and
    version, its model (LLM reflectors), the status its reflections start in."""

    kind: str
    reflector: str
    version: str
    model: str | None
    create_status: str


EXEMPLARS = _Author("exemplar", "exemplar", "1", None, "active")
CONTRASTIVE = _Author("heuristic", contrastive.NAME, contrastive.VERSION, None, "active")
LLM_HEURISTICS = _Author("heuristic", "llm_heuristics", "heuristics_single.v1", LLM_MODEL, "candidate")
GOLDEN_NEGATIVES = _Author("heuristic", "llm_golden_negative", "golden_negative.v1", LLM_MODEL, "candidate")
SKILLS = _Author("skill", "llm_skills", "skills.v1", LLM_MODEL, "candidate")
CARDS = _Author("evidence_card", evidence_cards.NAME, evidence_cards.VERSION, None, "active")
RUBRICS = _Author("rubric", "llm_rubrics", "rubrics.v1", LLM_MODEL, "candidate")
AUTHORS = (EXEMPLARS, CONTRASTIVE, LLM_HEURISTICS, GOLDEN_NEGATIVES, SKILLS, CARDS, RUBRICS)


# A planned reflection's evidence rows: (trajectory index, step_start, step_end, success, value).
_Evidence = list[tuple[int, int | None, int | None, bool | None, float | None]]


@dataclass
class _Refl:
    """A planned reflection: enough to place it in time and to build its row later."""

    author: _Author
    created: float
    environment: str | None
    task: str | None
    id: str
    build: tuple[Any, ...]  # what its content is made from (kind specific)
    evidence: _Evidence
    status: str = "active"
    edited: bool = False
    edit_at: float = 0.0
    status_at: float = 0.0
    status_action: str | None = None
    status_actor: str = ""
    status_note: str | None = None
    source_key: str | None = None
    pk: int = 0

    @property
    def kind(self) -> str:
        return self.author.kind

    @property
    def reflector(self) -> str:
        return self.author.reflector

    @property
    def create_status(self) -> str:
        return self.author.create_status


class _Plan:
    """Everything about one namespace decided up front (numpy arrays for the
    trajectories, small records for the reflections), so that rows can point at each
    other (served items at reflections, evidence at trajectories) before any is written."""

    def __init__(self, namespace: str, sizes: Sizes, seed: int, ns_index: int, now: float) -> None:
        self.ns = namespace
        self.sizes = sizes
        self.now = now
        self.settings = NamespaceSettings()
        self.rng = np.random.default_rng([seed, ns_index, 1])
        self.seed = seed
        self.ns_index = ns_index
        self.keys = {
            role: "key_" + _hex(self.rng, 8) for role in ("agent", "operator", "trainer")
        }  # ids of this namespace's API keys
        self.vector_rng = np.random.default_rng([seed, ns_index, 2])  # apart: vectors never shift the plan
        self.traj_pk_base = 0  # trajectory t has pk traj_pk_base + t
        self.edited_pks: list[int] = []
        self._rtg: dict[int, list[float]] = {}
        self._plan_trajectories()

    # trajectories ------------------------------------------------------------------

    def _plan_trajectories(self) -> None:
        n, rng = self.sizes.trajectories, self.rng
        self.n = n
        start = self.now - DAYS * 86_400
        # Sorted creation times: pk order is time order, as a live store has it.
        self.created = np.sort(rng.uniform(start, self.now - 3_600, n))
        self.dt = rng.uniform(2.0, 30.0, n)  # seconds per step
        self.closed = self.created + self.dt * (STEPS_PER_TRAJECTORY + 1)
        n_groups = math.ceil(n / GROUP_SIZE)
        self.group = np.arange(n) // GROUP_SIZE
        # Tasks, each of one environment (the web ones a bit more common), each rolled
        # out by about two groups over the month (a later policy tries it again).
        n_tasks = max(1, math.ceil(n_groups / 2))
        self.task_env = rng.choice(len(ENVIRONMENTS), n_tasks, p=[0.35, 0.2, 0.3, 0.15])
        self.tasks: list[str] = []
        seen: set[str] = set()
        counters = [0, 0]  # next task_of seed per family (even: web, odd: room)
        base = (self.seed * 7_919 + self.ns_index * 104_729) * 2
        for i in range(n_tasks):
            fam = 0 if ENVIRONMENTS[self.task_env[i]] in WEB else 1
            for _ in range(100):  # the room family has only ~2,300 distinct tasks: then one repeats
                task = task_of(base + 2 * counters[fam] + fam)
                counters[fam] += 1
                if task not in seen:
                    break
            seen.add(task)
            self.tasks.append(task)
        self.task_hashes = [task_hash(t) for t in self.tasks]
        self.group_taskidx = rng.permutation(np.arange(n_groups) % n_tasks)
        self.group_env = self.task_env[self.group_taskidx]
        self.group_task = [self.tasks[i] for i in self.group_taskidx]
        self.group_task_hash = [self.task_hashes[i] for i in self.group_taskidx]
        self.task_groups: dict[int, list[int]] = {}
        for g, i in enumerate(self.group_taskidx.tolist()):
            self.task_groups.setdefault(i, []).append(g)
        self.agent = rng.integers(0, len(AGENTS), n)
        frac = (self.created - start) / (DAYS * 86_400)
        self.policy = np.clip(np.floor(frac * len(POLICIES) + rng.normal(0, 0.3, n)), 0, len(POLICIES) - 1).astype(
            np.int64
        )
        p_success = 0.48 + 0.06 * self.policy + np.array([0.0, 0.03, -0.03])[self.agent]
        self.success = rng.random(n) < p_success
        self.reward = np.where(
            self.success, np.round(rng.uniform(0.7, 1.0, n), 3), np.round(rng.uniform(0.0, 0.3, n), 3)
        )
        self.failure_reason = rng.integers(0, len(FAILURE_REASONS), n)
        self.expert = np.zeros(n, dtype=bool)  # failed expert attempts: golden-negative sources
        self.temperature = np.round(rng.choice([0.2, 0.7, 1.0], n), 1)
        # Episode templates: even template seeds are web episodes, odd ones text games.
        n_templates = min(n, MAX_TEMPLATES)
        per_family = max(1, n_templates // 2)
        self.templates: dict[int, list[dict[str, Any]]] = {}
        tseed = (self.seed * 1_000_003 + self.ns_index * 50_021) * 2
        self.tpl = np.empty(n, dtype=np.int64)
        web = np.isin(self.group_env[self.group], [ENVIRONMENTS.index(e) for e in WEB])
        family = np.where(web, 0, 1)
        self.tpl[:] = tseed + 2 * rng.integers(0, per_family, n) + family
        self.tpl2 = tseed + 2 * rng.integers(0, per_family, n) + family
        self.seam = rng.integers(5, 16, n)
        self.score = rng.integers(0, 101, (n, STEPS_PER_TRAJECTORY))
        self.no_internal = rng.random((n, STEPS_PER_TRAJECTORY)) < 0.15
        self.env_trajectories = {e: np.flatnonzero(self.group_env[self.group] == i) for i, e in enumerate(ENVIRONMENTS)}

    def env(self, t: int) -> str:
        return ENVIRONMENTS[int(self.group_env[self.group[t]])]

    def task(self, t: int) -> str:
        return self.group_task[int(self.group[t])]

    def traj_id(self, t: int) -> str:
        return f"ep_{int(self.group[t]):06d}_{t % GROUP_SIZE}"

    def template(self, seed: int) -> list[dict[str, Any]]:
        steps = self.templates.get(seed)
        if steps is None:
            steps = self.templates[seed] = make_trajectory_steps(seed, STEPS_PER_TRAJECTORY)
        return steps

    def step(self, t: int, j: int) -> dict[str, Any]:
        """Step j of trajectory t: the state of one of its two template episodes (a
        seam where the agent moves on to a new state) with this rollout's own data."""
        s = self.template(int(self.tpl[t] if j < self.seam[t] else self.tpl2[t]))[j]
        last = j == STEPS_PER_TRAJECTORY - 1
        return {
            "observation": s["state"]["observation"],
            "state_data": {**s["state"]["data"], "score": int(self.score[t, j])},
            "internal_state": None if self.no_internal[t, j] else s["internal_state"],
            "action": s["action"],
            "result": s["result"],
            "reward": float(self.reward[t]) if last else float(s["reward"]),
            "done": last,
        }

    def step_request(self, t: int, j: int) -> StepCreate:
        """Step j of trajectory t as the request that logs it."""
        c = self.step(t, j)
        return StepCreate(
            state=State(observation=c["observation"], data=c["state_data"]),
            internal_state=c["internal_state"],
            action=c["action"],
            result=c["result"],
            reward=c["reward"],
            done=c["done"],
        )

    def step_credit(self, t: int, j: int) -> tuple[bool | None, float]:
        """(credit, return-to-go) of one step, computed by the exemplar reflector's own
        functions (reflectors.exemplars: credit, step_rewards, returns_to_go)."""
        per_step = self._rtg.get(t)
        if per_step is None:
            traj, steps = self._run(t)
            values = returns_to_go(step_rewards(traj, steps), self.settings.gamma)  # type: ignore[arg-type]
            per_step = self._rtg[t] = list(zip(credit(traj, steps), values, strict=True))  # type: ignore[arg-type]
        return per_step[j]

    def outcome(self, t: int) -> tuple[bool, float, str | None]:
        ok = bool(self.success[t])
        return ok, float(self.reward[t]), None if ok else FAILURE_REASONS[int(self.failure_reason[t])]

    # reflections ----------------------------------------------------------------

    def plan_reflections(self) -> None:
        rng, n_total = self.rng, self.sizes.reflections
        n_tasks = len(self.tasks)
        counts = {kind: int(n_total * share) for kind, share in KIND_SHARES}
        counts["evidence_card"] = min(counts["evidence_card"], n_tasks)
        counts["rubric"] = min(counts["rubric"], n_tasks)
        counts["exemplar"] = n_total - sum(v for k, v in counts.items() if k != "exemplar")
        if counts["exemplar"] > self.n * STEPS_PER_TRAJECTORY // 2:
            spare = counts["exemplar"] - self.n * STEPS_PER_TRAJECTORY // 2
            counts["exemplar"] -= spare
            counts["heuristic"] += spare
        self.ids: set[str] = set()
        out: list[_Refl] = []
        out += self._exemplars(counts["exemplar"])
        n_contrastive = counts["heuristic"] * 2 // 5
        n_golden = counts["heuristic"] // 10
        out += self._contrastive(n_contrastive)
        out += self._llm_heuristics(counts["heuristic"] - n_contrastive - n_golden, golden=False)
        out += self._llm_heuristics(n_golden, golden=True)
        out += self._skills(counts["skill"])
        out += self._cards(rng.permutation(n_tasks)[: counts["evidence_card"]])
        out += self._rubrics(rng.permutation(n_tasks)[: counts["rubric"]])
        for r in out:
            self._history(r)
        out.sort(key=lambda r: r.created)
        self.reflections = out
        self.created_refl = np.array([r.created for r in out])
        self.active = np.array([r.status == "active" for r in out])

    def _new_id(self, id_: str) -> bool:
        if id_ in self.ids:
            return False
        self.ids.add(id_)
        return True

    def _latency(self, after: float, low: float, high: float) -> float:
        return min(self.now - 60.0, after + float(self.rng.uniform(low, high)))

    def _environment_reflection(
        self, author: _Author, env: str, id_: str, build: tuple[Any, ...], evidence: _Evidence, latency: tuple[int, int]
    ) -> _Refl:
        """A reflection on an environment (no task), written `latency` (low, high seconds)
        after the last trajectory of its evidence closed."""
        latest = max(self.closed[e[0]] for e in evidence)
        return _Refl(
            author=author,
            created=self._latency(latest, *latency),
            environment=env,
            task=None,
            id=id_,
            build=build,
            evidence=evidence,
        )

    def _exemplars(self, n: int) -> list[_Refl]:
        rng, out = self.rng, []
        flat = rng.permutation(self.n * STEPS_PER_TRAJECTORY)
        used = 0
        for f in flat:
            if len(out) >= n:
                break
            used += 1
            t, j = divmod(int(f), STEPS_PER_TRAJECTORY)
            s, env = self.step(t, j), self.env(t)
            id_ = exemplar_id(env, s["observation"], s["state_data"], s["action"])
            if not self._new_id(id_):
                continue  # the same (state, action) again: the reflector would merge it
            credit, value = self.step_credit(t, j)
            evidence: _Evidence = [(t, j, j, credit, value)]
            extra = int(rng.choice(3, p=[0.72, 0.2, 0.08]))
            pool = self.env_trajectories[env]
            for t2 in _sample(rng, pool, extra):
                if t2 == t:
                    continue
                j2 = int(rng.integers(0, STEPS_PER_TRAJECTORY))
                c2, v2 = self.step_credit(t2, j2)
                evidence.append((t2, j2, j2, c2, v2))
            out.append(
                _Refl(
                    author=EXEMPLARS,
                    created=self._latency(self.closed[t], 2, 90),
                    environment=env,
                    task=self.task(t),
                    id=id_,
                    build=(t, j),
                    evidence=evidence,
                )
            )
        return out

    def _step_evidence(self, env: str, k: int) -> _Evidence:
        pool = self.env_trajectories[env]
        out = []
        for t in _sample(self.rng, pool, k):
            j = int(self.rng.integers(0, STEPS_PER_TRAJECTORY))
            credit, value = self.step_credit(t, j)
            out.append((t, j, j, credit, value))
        return out

    def _envs_with_trajectories(self) -> list[str]:
        return [e for e in ENVIRONMENTS if len(self.env_trajectories[e])]

    def _contrastive(self, n: int) -> list[_Refl]:
        rng, out, envs = self.rng, [], self._envs_with_trajectories()
        while len(out) < n:
            env = envs[int(rng.integers(0, len(envs)))]
            evidence = self._step_evidence(env, int(rng.integers(1, 4)))
            t, j = evidence[0][0], int(evidence[0][1] or 0)
            s = self.step(t, j)
            leader = exemplar_id(env, s["observation"], s["state_data"], s["action"])
            polarity = "avoid" if rng.random() < 0.55 else "prefer"
            action = evidence_cards.action_key(s["action"])
            id_ = contrastive.heuristic_id(self.ns, env, leader, action, polarity)
            if not self._new_id(id_):
                continue
            attempts = int(rng.integers(5, 40))
            hits = int(np.clip(np.round(attempts * rng.uniform(0.6, 0.95)), 1, attempts))
            successes, failures = (attempts - hits, hits) if polarity == "avoid" else (hits, attempts - hits)
            build = (t, j, polarity, action, successes, failures, int(rng.integers(2, 30)))
            out.append(self._environment_reflection(CONTRASTIVE, env, id_, build, evidence, latency=(30, 900)))
        return out

    def _heuristic_words(self, env: str, t: int) -> tuple[str, str, str, str]:
        rng = self.rng

        def pick(xs: Sequence[str]) -> str:
            return str(xs[int(rng.integers(0, len(xs)))])

        n = int(rng.integers(2, 60))
        if env in WEB:
            product, site = pick(PRODUCTS), pick(sorted(SITES))
            section = pick(SITES[site])
            trigger = pick(
                [
                    f"the search results for a {product} span more than {n} items and several pages",
                    f"a product page for a {product} lists size or colour options that are not selected yet",
                    f"the {section} page of {site} shows a table of {n} or more rows",
                    f"the cart holds a {product} whose price is above the task budget",
                ]
            )
            do = pick(
                [
                    "sort or filter by price before opening any product page",
                    "select every required option before clicking [Buy Now]",
                    "use the search box of the page instead of paging through the list",
                    "open the reviews and check the rating against the task first",
                ]
            )
            avoid = pick(
                [
                    "clicking [Buy Now] before the options match the task",
                    "going back to the search page after every product",
                    "typing the full task text into the search box",
                    "leaving the current section to browse unrelated pages",
                ]
            )
        else:
            room, obj, furniture = pick(ROOMS), pick(OBJECTS), pick(FURNITURE)
            trigger = pick(
                [
                    f"you are in the {room}, the task needs a {obj} and the {furniture} is still closed",
                    f"you carry a {obj} and the target receptacle is a {furniture} in another room",
                    f"the {room} has been searched {n % 5 + 2} times without finding the {obj}",
                    f"the task asks for a hot or cool {obj} and it is not yet in the microwave or fridge",
                ]
            )
            do = pick(
                [
                    f"open the {furniture} and examine it before moving to another room",
                    "go to the appliance first, then come back for the object",
                    "check every countertop and drawer of the room once, in order",
                    "put the object down only in the receptacle the task names",
                ]
            )
            avoid = pick(
                [
                    "repeating 'look' when nothing in the room has changed",
                    f"taking a second {obj} when the task asks for one",
                    "leaving the room before every closed receptacle was opened",
                    "putting the object in the first receptacle you see",
                ]
            )
        return trigger, do, avoid, self.traj_id(t)

    def _llm_heuristics(self, n: int, *, golden: bool) -> list[_Refl]:
        rng, out = self.rng, []
        failed = np.flatnonzero(~self.success)
        sources = failed if golden and len(failed) else np.arange(self.n)
        attempts = 0
        while len(out) < n and attempts < 50 * n + 100:
            attempts += 1
            t = int(sources[int(rng.integers(0, len(sources)))])
            env = self.env(t)
            trigger, do, avoid, tid = self._heuristic_words(env, t)
            polarity = "avoid" if (golden or rng.random() < 0.45) else "do"
            guideline = f"Avoid {avoid}." if polarity == "avoid" else f"{do[0].upper()}{do[1:]}."
            trigger = trigger[0].upper() + trigger[1:]
            id_ = llm_heuristic_id(self.ns, env, trigger, guideline)
            if not self._new_id(id_):
                continue
            if golden:
                self.expert[t] = True
            start = int(rng.integers(0, STEPS_PER_TRAJECTORY - 3))
            end = start + int(rng.integers(1, 4))
            evidence: _Evidence = [(t, start, end, bool(self.success[t]), 1.0)]
            votes = int(rng.choice(3, p=[0.5, 0.25, 0.25]))
            for t2 in _sample(rng, self.env_trajectories[env], votes):
                if t2 != t:
                    s2 = int(rng.integers(0, STEPS_PER_TRAJECTORY - 1))
                    evidence.append((t2, s2, s2 + 1, bool(self.success[t2]), 1.0))
            author = GOLDEN_NEGATIVES if golden else LLM_HEURISTICS
            build = (t, trigger, guideline, polarity, tid, start, golden)
            out.append(self._environment_reflection(author, env, id_, build, evidence, latency=(20, 1_800)))
        return out

    def _skills(self, n: int) -> list[_Refl]:
        rng, out = self.rng, []
        won = np.flatnonzero(self.success)
        if not len(won):
            won = np.arange(self.n)
        tries = 0
        while len(out) < n and tries < 50 * n + 100:
            tries += 1
            t = int(won[int(rng.integers(0, len(won)))])
            env = self.env(t)
            if env in WEB:
                thing = str(PRODUCTS[int(rng.integers(0, len(PRODUCTS)))])
                verb = str(rng.choice(["find_cheapest", "filter_and_open", "compare_ratings_of", "checkout"]))
            else:
                thing = str(OBJECTS[int(rng.integers(0, len(OBJECTS)))])
                verb = str(rng.choice(["fetch", "heat", "cool", "clean", "place", "search_for"]))
            name = f"{verb}_{_slug(thing)}"
            if rng.random() < 0.5:
                name += "_" + _slug(str(rng.choice(ROOMS if env not in WEB else sorted(SITES))))
            id_ = skill_id(self.ns, env, name)
            if not self._new_id(id_):
                continue
            start = int(rng.integers(0, STEPS_PER_TRAJECTORY - 4))
            end = start + int(rng.integers(2, 5))
            evidence: _Evidence = [(t, start, end, True, 1.0)]
            votes = int(rng.choice(3, p=[0.5, 0.3, 0.2]))
            for t2 in _sample(rng, won, votes):
                if t2 != t:
                    evidence.append((t2, start, end, True, 1.0))
            build = (t, name, thing, env in WEB, start)
            out.append(self._environment_reflection(SKILLS, env, id_, build, evidence, latency=(20, 1_800)))
        return out

    def _task_runs(self, task: int, latest_only: bool) -> list[int]:
        """1-3 rollouts of a task: of its latest group (an evidence card follows the
        policy), or of any of its groups (a rubric's attempts)."""
        groups = self.task_groups[task][-1:] if latest_only else self.task_groups[task]
        members = np.concatenate([np.arange(g * GROUP_SIZE, min(self.n, (g + 1) * GROUP_SIZE)) for g in groups])
        return sorted(_sample(self.rng, members, int(self.rng.integers(1, 4))))

    def _cards(self, tasks: np.ndarray) -> list[_Refl]:
        out = []
        for i in tasks.tolist():
            runs = self._task_runs(i, latest_only=True)
            th = self.task_hashes[i]
            id_ = evidence_cards.card_id(self.ns, th)
            if not self._new_id(id_):
                continue  # a repeated task text
            out.append(
                _Refl(
                    author=CARDS,
                    created=self._latency(max(self.closed[t] for t in runs), 5, 300),
                    environment=ENVIRONMENTS[int(self.task_env[i])],
                    task=self.tasks[i],
                    id=id_,
                    build=(i, runs),
                    evidence=[(t, None, None, bool(self.success[t]), float(self.reward[t])) for t in runs],
                    source_key=f"evidence_card:{th}",
                )
            )
        return out

    def _rubrics(self, tasks: np.ndarray) -> list[_Refl]:
        out = []
        for i in tasks.tolist():
            runs = self._task_runs(i, latest_only=False)
            th = self.task_hashes[i]
            id_ = rubric_id(self.ns, th)
            if not self._new_id(id_):
                continue
            out.append(
                _Refl(
                    author=RUBRICS,
                    created=self._latency(max(self.closed[t] for t in runs), 30, 3_600),
                    environment=ENVIRONMENTS[int(self.task_env[i])],
                    task=self.tasks[i],
                    id=id_,
                    build=(i, runs),
                    evidence=[
                        (t, 0, STEPS_PER_TRAJECTORY - 1, bool(self.success[t]), float(self.reward[t])) for t in runs
                    ],
                    source_key=f"rubric:{th}",
                )
            )
        return out

    def _history(self, r: _Refl) -> None:
        """Final status, an operator edit sometimes, and the status change that led
        there (who, when, why), as the API and the reflectors record them."""
        rng = self.rng
        r.status = _pick(rng, STATUS_SHARES)
        r.edited = rng.random() < 0.1
        operator = f"key:{self.keys['operator']}"
        r.edit_at = self._latency(r.created, 3_600, 5 * 86_400) if r.edited else r.created
        r.status_at = self._latency(max(r.created, r.edit_at), 600, 3 * 86_400)
        pool_item = r.author in (LLM_HEURISTICS, GOLDEN_NEGATIVES, SKILLS)
        if r.create_status == r.status:
            r.status_action = None
        elif r.status == "retired":
            r.status_action, r.status_actor, r.status_note = "retire", operator, str(rng.choice(RETIRE_NOTES))
        elif r.status == "active":  # a candidate made active
            needed = self.settings.reflection.llm.activation_importance
            if pool_item and len(r.evidence) >= needed:
                r.status_action, r.status_actor = "activate", f"reflector:{r.reflector}"
                r.status_note = f"importance reached {len(r.evidence)} (activation_importance {needed})"
            else:
                note = APPROVE_NOTES[int(rng.integers(0, len(APPROVE_NOTES)))]
                r.status_action, r.status_actor, r.status_note = "approve", operator, note
        else:  # active -> candidate
            actor = f"reflector:{r.reflector}" if r.reflector == contrastive.NAME else operator
            r.status_action, r.status_actor, r.status_note = "status", actor, str(rng.choice(DEMOTE_NOTES))
        if r.status_action is None:
            r.status_at = r.edit_at

    # contents -----------------------------------------------------------------

    def content(self, r: _Refl) -> tuple[dict[str, Any], str, dict[str, str], bool]:
        """(content, text, field -> embedded text, whether the texts go to the text
        hashes and the lexical index) as the reflector of this kind writes them."""
        max_chars = self.settings.state_text.max_chars
        if r.kind == "exemplar":
            t, j = r.build
            traj, steps = self._run(t)
            draft, texts = exemplar_draft(self.ns, steps[j], trajectory=traj, settings=self.settings)
            return draft.content, draft.text, texts, True
        if r.reflector == contrastive.NAME:
            t, j, polarity, action, successes, failures, size = r.build
            n = successes + failures
            rate = failures if polarity == "avoid" else successes
            finding = SimpleNamespace(
                polarity=polarity,
                action=action,
                successes=successes,
                failures=failures,
                confidence=contrastive.wilson_lower(rate, n),
                leader=SimpleNamespace(content={"observation": self.step(t, j)["observation"]}),
                neighbourhood_size=size,
            )
            content = contrastive.render(finding)  # type: ignore[arg-type]
            return content, content["text"], {"state": content["text"]}, False  # a centroid: no text
        if r.kind == "heuristic":
            t, trigger, guideline, polarity, tid, start, golden = r.build
            outcome = "succeeded" if self.success[t] else "failed"
            content = {
                "trigger": trigger,
                "guideline": guideline,
                "rationale": f"In attempt {tid} the agent's choice at step {start} decided it: the attempt {outcome}.",
                "polarity": polarity,
                "importance": len(r.evidence),
                "text": heuristic_text(trigger, guideline),
            }
            if golden:
                key = evidence_cards.action_key(self.step(t, start)["action"])
                content["golden_negatives"] = [
                    {
                        "trajectory_id": tid,
                        "task": self.task(t),
                        "critical_step": start,
                        "what_went_wrong": f"At step {start} the agent chose '{key}' although the state "
                        "showed the task was not ready for it.",
                        "corrected_action": f"{guideline} Then continue with the task.",
                        "hint": "Check what the task still needs before acting.",
                    }
                ]
            return content, content["text"], {"state": content["text"]}, False  # pool items: vectors only
        if r.kind == "skill":
            t, name, thing, web, start = r.build
            steps = (
                [f"search for '{{query}}' ({thing})", "sort the results by price", "open the first match", "buy it"]
                if web
                else ["go to the room with the {receptacle}", "open the {receptacle}", f"take the {thing}"]
            )
            skill = SimpleNamespace(
                name=name,
                when_to_use=f"the task needs a {thing} and it is not in hand yet",
                preconditions=["the agent is on a page or in a room it can act from"],
                parameters=[SimpleNamespace(name="query" if web else "receptacle", description="where to look for it")],
                steps=steps,
            )
            body = skill_text(skill)  # type: ignore[arg-type]
            content = {
                "name": name,
                "when_to_use": skill.when_to_use,
                "preconditions": list(skill.preconditions),
                "parameters": [{"name": p.name, "description": p.description} for p in skill.parameters],
                "steps": steps,
                "importance": len(r.evidence),
                "text": body,
            }
            return content, body, {"state": body}, False
        i, runs = r.build
        task = self.tasks[i]
        if r.kind == "evidence_card":
            content = evidence_cards.build_card(task, [self._run(t) for t in runs])  # type: ignore[arg-type]
            return content, content["text"], {"state": task_query_text(task)[:max_chars]}, True
        criteria = [
            Criterion(
                text="The agent completes the task within the step limit.",
                weight=0.4,
                rationale="Failed attempts ran out of steps.",
                check=StepCountCheck(type="step_count", min_steps=None, max_steps=STEPS_PER_TRAJECTORY),
            ),
            Criterion(
                text="The final action matches what the task asks for.",
                weight=0.4,
                rationale="Successful attempts ended on the asked action.",
                check=None,
            ),
            Criterion(
                text="No action is repeated without effect.",
                weight=0.2,
                rationale="Loops preceded most failures.",
                check=ToolCalledCheck(type="tool_called", tool="scroll", min_times=0, max_times=5),
            ),
        ]
        labelled = [(chr(ord("A") + i), self._run(t)[0]) for i, t in enumerate(runs)]
        content = rubric_content(task, criteria, labelled)  # type: ignore[arg-type]
        return content, content["text"], {"state": task_query_text(task)[:max_chars]}, True

    def _run(self, t: int) -> tuple[Any, list[Any]]:
        """Trajectory t and its steps with the columns the reflectors' own builders read
        (reflectors.exemplars, evidence_cards.build_card, rubric_content)."""
        ok, reward, reason = self.outcome(t)
        traj = trajectory_row(
            self.ns,
            pk=self.traj_pk(t),
            id=self.traj_id(t),
            environment=self.env(t),
            task=self.task(t),
            success=ok,
            reward=reward,
            failure_reason=reason,
            group_id=f"grp_{int(self.group[t]):06d}",
        )
        return traj, [step_row(j, **self.step(t, j)) for j in range(STEPS_PER_TRAJECTORY)]

    def traj_pk(self, t: int) -> int:
        return self.traj_pk_base + t

    # retrievals -------------------------------------------------------------------

    def plan_retrievals(self) -> None:
        """Which trajectory step asked, what was served (among the reflections active
        by then, older ones served more; with an outcome, the ones that suit it
        ranked first) and which got an outcome (the store credits it when written)."""
        rng, m = self.rng, self.sizes.retrievals
        order = np.flatnonzero(self.active)  # plan indices, in time order
        times = self.created_refl[order]
        if len(order) < ITEMS_PER_RETRIEVAL:
            raise ValueError(f"{self.ns}: {len(order)} active reflections; retrievals need {ITEMS_PER_RETRIEVAL}")
        enough = times[ITEMS_PER_RETRIEVAL * 2 - 1] if len(order) >= ITEMS_PER_RETRIEVAL * 2 else times[-1]
        late = np.flatnonzero(self.created + STEPS_PER_TRAJECTORY * self.dt > enough)
        late = late if len(late) else np.arange(self.n)
        t = np.sort(rng.choice(late, m))
        j = rng.integers(0, STEPS_PER_TRAJECTORY, m)
        when = self.created[t] + self.dt[t] * (j + 0.5)
        n_elig = np.maximum(np.searchsorted(times, when), ITEMS_PER_RETRIEVAL)
        when = np.maximum(when, times[n_elig - 1] + 1.0)
        cand = np.floor(n_elig[:, None] * rng.random((m, 10)) ** 1.5).astype(np.int64)
        has_outcome = rng.random(m) < 0.5
        ok = self.success[t]
        quality = rng.beta(2, 2, len(order))
        q = quality[cand]
        key = np.where(ok[:, None], q, 1 - q) + rng.normal(0, 0.25, q.shape)
        key = np.where(has_outcome[:, None], key, -np.arange(10)[None, :])  # no outcome: first five
        chosen = np.take_along_axis(cand, np.argsort(-key, axis=1)[:, :ITEMS_PER_RETRIEVAL], axis=1)
        srt = np.sort(chosen, axis=1)
        for row in np.flatnonzero((srt[:, 1:] == srt[:, :-1]).any(axis=1)):
            picked = list(dict.fromkeys(chosen[row].tolist()))
            while len(picked) < ITEMS_PER_RETRIEVAL:
                c = int(rng.integers(0, n_elig[row]))
                if c not in picked:
                    picked.append(c)
            chosen[row] = picked[:ITEMS_PER_RETRIEVAL]
        items = order[chosen]  # plan indices of the served reflections, by rank
        sim0 = rng.uniform(0.55, 0.95, (m, 1))
        sims = np.round(sim0 - np.cumsum(rng.uniform(0, 0.04, (m, ITEMS_PER_RETRIEVAL)), axis=1) + 0.02, 4)
        scores = np.round(0.8 * sims + 0.1 - 0.002 * np.arange(ITEMS_PER_RETRIEVAL), 4)
        self.ret_t, self.ret_j, self.ret_when, self.ret_items = t, j, when, items
        self.ret_sims, self.ret_scores, self.ret_outcome = sims, scores, has_outcome
        self.ret_ids = [_hex(rng, 16) for _ in range(m)]
        self.ret_task = rng.random(m) < 0.3
        self.ret_latency = np.round(rng.lognormal(math.log(14.0), 0.5, m), 2)


def edited(kind: str, content: dict[str, Any], note: str) -> tuple[dict[str, Any], str]:
    """An operator's edit (a new version): the result of an exemplar corrected (its text
    rebuilt by the exemplar reflector), or a note added to the text of any other kind."""
    if kind == "exemplar":
        result = f"{content['result'] or ''} (checked by an operator)".strip()
        draft, _ = exemplar_draft("", step_row(0, **{k: content[k] for k in EXEMPLAR_FIELDS}, result=result))
        return draft.content, draft.text
    new = {**content, "text": f"{content['text']}\nOperator note: {note}."}
    return new, new["text"]


EXEMPLAR_FIELDS = ("observation", "state_data", "internal_state", "action", "reward")


# -- writing ------------------------------------------------------------------------------

# Integer keys given explicitly (so that rows can point at each other without reading
# keys back): table -> its key column.
KEY_COLUMNS = {
    "trajectories": "pk",
    "steps": "pk",
    "reflections": "pk",
    "reflection_evidence": "pk",
    "reflection_versions": "pk",
    "embeddings": "pk",
    "index_changes": "seq",
    "jobs": "id",
}


class _Keys:
    """The next free key of each table: past the highest stored and past what the
    engine's counter (sqlite_sequence, the PostgreSQL sequence) has handed out, so
    no key is ever reused."""

    def __init__(self, conn: Connection) -> None:
        self.next: dict[str, int] = {}
        pg = conn.dialect.name == "postgresql"
        for table, column in KEY_COLUMNS.items():
            top = conn.scalar(text(f"SELECT MAX({column}) FROM {table}")) or 0
            if pg:
                issued = conn.scalar(
                    text(f"SELECT pg_sequence_last_value(pg_get_serial_sequence('{table}', '{column}'))")
                )
            else:
                issued = conn.scalar(text("SELECT seq FROM sqlite_sequence WHERE name = :t"), {"t": table})
            self.next[table] = max(int(top), int(issued or 0)) + 1

    def take(self, table: str, n: int) -> int:
        first = self.next[table]
        self.next[table] += n
        return first


def _columns(table: Table, row: dict[str, Any]) -> dict[str, Any]:
    """The row without the keys of columns this schema does not have (the schema
    moves; optional columns are only written where they exist)."""
    return {k: v for k, v in row.items() if k in table.c}


class _Writer:
    def __init__(self, conn: Connection, keys: _Keys, model: str, dim: int, log: Callable[[str], None]) -> None:
        self.conn = conn
        self.keys = keys
        self.model = model
        self.dim = dim
        self.log = log
        self.query_template = RetrieveRequest(state=State(observation="x"), k=ITEMS_PER_RETRIEVAL).model_dump(
            mode="json", exclude={"consistency_token", "wait_timeout_ms", "render"}
        )

    @contextmanager
    def session(self) -> Iterator[Session]:
        """One transaction on the fill's connection, for the store's own writes."""
        with self.conn.begin(), Session(bind=self.conn) as session:
            yield session
            session.flush()

    def namespace(self, plan: _Plan) -> None:
        created = _ts(plan.now - (DAYS + 1) * 86_400)
        with self.conn.begin():
            self.conn.execute(
                insert(Namespace.__table__),
                [
                    {
                        "name": plan.ns,
                        "settings": {},
                        "created_at": created,
                        "frozen": False,
                        "frozen_at": None,
                    }
                ],
            )
            scopes = {"agent": [plan.ns], "operator": [plan.ns], "trainer": [plan.ns]}
            rows = [
                {
                    "id": key_id,
                    "key_hash": hashlib.sha256(plan.rng.bytes(32)).hexdigest(),
                    "role": role,
                    "namespaces": scopes[role],
                    "description": f"{role} key of {plan.ns}",
                    "created_at": created,
                    "revoked_at": None,
                }
                for role, key_id in plan.keys.items()
            ]
            self.conn.execute(insert(ApiKey.__table__), [_columns(ApiKey.__table__, r) for r in rows])

    def trajectories(self, plan: _Plan) -> None:
        """Each trajectory as the API stores one created empty, then given its steps,
        then closed: ingest's own rows and hashes (service.trajectories.ingest) through
        the store's inserts, with the plan's keys and times."""
        started = time.perf_counter()
        step_base = self.keys.take("steps", plan.n * STEPS_PER_TRAJECTORY)
        for start in range(0, plan.n, TRAJECTORIES_PER_TX):
            trajs, steps = [], []
            for t in range(start, min(plan.n, start + TRAJECTORIES_PER_TX)):
                ok, reward, reason = plan.outcome(t)
                g = int(plan.group[t])
                meta: dict[str, Any] = {"seed": t, "temperature": float(plan.temperature[t]), "max_steps": 20}
                if plan.expert[t]:
                    meta["expert"] = True
                create = TrajectoryCreate(
                    id=plan.traj_id(t),
                    task=plan.group_task[g],
                    environment=plan.env(t),
                    agent=AGENTS[int(plan.agent[t])],
                    policy_version=POLICIES[int(plan.policy[t])],
                    group_id=f"grp_{g:06d}",
                    metadata=meta,
                )
                row = ingest.trajectory_row(plan.ns, create, ingest.request_hash(create), plan.keys["agent"])
                closed = _ts(plan.closed[t])
                row |= ingest.outcome_values(OutcomeCreate(success=ok, reward=reward, failure_reason=reason))
                row |= {
                    "pk": plan.traj_pk(t),
                    "status": "closed",
                    "step_count": STEPS_PER_TRAJECTORY,
                    "created_at": _ts(plan.created[t]),
                    "updated_at": closed,
                    "closed_at": closed,
                }
                trajs.append(row)
                base, dt = float(plan.created[t]), float(plan.dt[t])
                for j in range(STEPS_PER_TRAJECTORY):
                    step = plan.step_request(t, j)
                    steps.append(
                        ingest.step_row(row["pk"], j, step, ingest.step_hash(step))
                        | {"pk": step_base + t * STEPS_PER_TRAJECTORY + j, "created_at": _ts(base + dt * (j + 1))}
                    )
            with self.session() as session:
                trajectories_repo.create_trajectories(session, trajs)
                trajectories_repo.create_steps(session, steps)
            done = min(plan.n, start + TRAJECTORIES_PER_TX)
            if done % (TRAJECTORIES_PER_TX * 25) == 0 or done == plan.n:
                self.log(
                    f"  {plan.ns}: {done:,} / {plan.n:,} trajectories, {done * STEPS_PER_TRAJECTORY:,} steps "
                    f"({time.perf_counter() - started:.0f} s)"
                )

    def reflections(self, plan: _Plan) -> None:
        started = time.perf_counter()
        max_chars = plan.settings.state_text.max_chars
        tables = {
            m.__tablename__: m.__table__
            for m in (Reflection, ReflectionEvidence, ReflectionVersion, Embedding, LexicalText, IndexChange)
        }
        for start in range(0, len(plan.reflections), REFLECTIONS_PER_TX):
            chunk = plan.reflections[start : start + REFLECTIONS_PER_TX]
            rows: dict[str, list[dict[str, Any]]] = {name: [] for name in tables}
            embedded: list[tuple[_Refl, str, str | None, float]] = []  # (reflection, field, text hash, when)
            for r in chunk:
                content, text_, texts, hashed = plan.content(r)
                final, final_text = content, text_
                operator = f"key:{plan.keys['operator']}"
                versions = [(1, "create", r.create_status, content, f"reflector:{r.reflector}", None, r.created)]
                if r.edited:
                    note = str(plan.rng.choice(EDIT_NOTES))
                    final, final_text = edited(r.kind, content, note)
                    versions.append((2, "edit", r.create_status, final, operator, note, r.edit_at))
                    if r.kind in ("heuristic", "skill"):  # the re-embed job encodes its new text
                        texts, hashed = {"state": final_text[:max_chars]}, True
                version = 2 if r.edited else 1
                if r.status_action is not None:
                    versions.append(
                        (version, r.status_action, r.status, final, r.status_actor, r.status_note, r.status_at)
                    )
                ev_first = self.keys.take("reflection_evidence", len(r.evidence))
                values = []
                for k, (t, s0, s1, ok, value) in enumerate(r.evidence):
                    rows["reflection_evidence"].append(
                        {
                            "pk": ev_first + k,
                            "reflection_pk": r.pk,
                            "trajectory_pk": plan.traj_pk(t),
                            "step_start": s0,
                            "step_end": s1,
                            "success": ok,
                            "value": value,
                        }
                    )
                    if value is not None:
                        values.append(value)
                latest_evidence = max(float(plan.closed[e[0]]) for e in r.evidence)
                updated = min(plan.now - 60.0, max(r.created, r.edit_at, r.status_at, latest_evidence))
                rows["reflections"].append(
                    _columns(
                        tables["reflections"],
                        {
                            "pk": r.pk,
                            "namespace": plan.ns,
                            "id": r.id,
                            "kind": r.kind,
                            "status": r.status,
                            "version": version,
                            "content": final,
                            "text": final_text,
                            "environment": r.environment,
                            "task": r.task,
                            "reflector": r.reflector,
                            "reflector_version": r.author.version,
                            "model": r.author.model,
                            "evidence_count": len(r.evidence),
                            "evidence_successes": sum(e[3] is True for e in r.evidence),
                            "evidence_failures": sum(e[3] is False for e in r.evidence),
                            "evidence_value": sum(values) / len(values) if values else None,
                            "source_key": r.source_key or f"{r.kind}:{r.id}",
                            "reviewed_uses": None,
                            "created_at": _ts(r.created),
                            "updated_at": _ts(updated),
                        },
                    )
                )
                v_first = self.keys.take("reflection_versions", len(versions))
                for k, (ver, action, status, c, actor, note, at) in enumerate(versions):
                    rows["reflection_versions"].append(
                        {
                            "pk": v_first + k,
                            "reflection_pk": r.pk,
                            "version": ver,
                            "action": action,
                            "status": status,
                            "content": c,
                            "actor": actor,
                            "note": note,
                            "created_at": _ts(at),
                        }
                    )
                when = r.edit_at if r.edited else r.created
                for fld, txt in texts.items():
                    embedded.append((r, fld, text_hash(txt) if hashed else None, when))
                if hashed and "state" in texts:
                    rows["lexical_texts"].append(
                        {
                            "reflection_pk": r.pk,
                            "namespace": plan.ns,
                            "kind": r.kind,
                            "text": texts["state"],
                            "keys": keys_blob(text_keys(texts["state"])),
                        }
                    )
            vecs = _unit_vectors(plan.vector_rng, len(embedded), self.dim)
            e_first = self.keys.take("embeddings", len(embedded))
            for k, (r, fld, digest, when) in enumerate(embedded):
                rows["embeddings"].append(
                    {
                        "pk": e_first + k,
                        "reflection_pk": r.pk,
                        "namespace": plan.ns,
                        "kind": r.kind,
                        "field": fld,
                        "model": self.model,
                        "dim": self.dim,
                        "vector": vecs[k].tobytes(),
                        "text_hash": digest,
                        "created_at": _ts(when),
                    }
                )
            c_first = self.keys.take("index_changes", len(chunk))
            for k, r in enumerate(chunk):
                rows["index_changes"].append(
                    {
                        "seq": c_first + k,
                        "namespace": plan.ns,
                        "kind": r.kind,
                        "reflection_pk": r.pk,
                        "op": "upsert",
                        "created_at": _ts(r.edit_at if r.edited else r.created),
                    }
                )
            with self.conn.begin():
                for name, table in tables.items():  # parents first
                    _insert(self.conn, table, rows[name])
            done = start + len(chunk)
            if done % (REFLECTIONS_PER_TX * 5) == 0 or done == len(plan.reflections):
                self.log(
                    f"  {plan.ns}: {done:,} / {len(plan.reflections):,} reflections "
                    f"({time.perf_counter() - started:.0f} s)"
                )

    def retrievals(self, plan: _Plan) -> None:
        """Each retrieval logged as a retrieve logs it (its items and the served
        rollup), about half given the outcome of their episode's close as the server
        credits it (the top `credit.unnamed_top_k` items earn it; the namespace's
        counters too), then dated back to the plan's times."""
        started = time.perf_counter()
        m = len(plan.ret_t)
        pks = [r.pk for r in plan.reflections]
        dated = update(Retrieval.__table__).where(Retrieval.id == bindparam("rid")).values(created_at=bindparam("at"))
        outcome_dated = (
            update(RetrievalOutcome.__table__)
            .where(RetrievalOutcome.retrieval_id == bindparam("rid"))
            .values(created_at=bindparam("at"))
        )
        for start in range(0, m, RETRIEVALS_PER_TX):
            logged, closed = [], []
            with self.session() as session:
                max_rank = unnamed_max_rank(session, plan.ns)
                for n in range(start, min(m, start + RETRIEVALS_PER_TX)):
                    t, j = int(plan.ret_t[n]), int(plan.ret_j[n])
                    s = plan.step(t, j)
                    rid = "r_" + plan.ret_ids[n]
                    tid = plan.traj_id(t)
                    query = {
                        **self.query_template,
                        "state": {"observation": s["observation"], "data": None},
                        "internal_state": s["internal_state"],
                        "task": plan.task(t) if plan.ret_task[n] else None,
                        "trajectory_id": tid,
                    }
                    items = [
                        (pks[i], rank, float(plan.ret_scores[n, rank]), float(plan.ret_sims[n, rank]))
                        for rank, i in enumerate(plan.ret_items[n].tolist())
                    ]
                    retrievals_repo.create_retrieval(
                        session,
                        id=rid,
                        namespace=plan.ns,
                        query=query,
                        trajectory_id=tid,
                        items=items,
                        latency_ms=float(plan.ret_latency[n]),
                    )
                    logged.append({"rid": rid, "at": _ts(plan.ret_when[n])})
                    if plan.ret_outcome[n]:
                        closed.append((rid, t))
                for rid, t in closed:
                    ok, reward, _ = plan.outcome(t)
                    retrievals_repo.create_outcome(
                        session,
                        plan.ns,
                        rid,
                        success=ok,
                        reward=reward,
                        trajectory_id=plan.traj_id(t),
                        details=None,
                        max_rank=max_rank,
                    )
                session.flush()
                self.conn.execute(dated, logged)
                if closed:
                    self.conn.execute(outcome_dated, [{"rid": rid, "at": _ts(plan.closed[t])} for rid, t in closed])
            done = min(m, start + RETRIEVALS_PER_TX)
            if done % (RETRIEVALS_PER_TX * 10) == 0 or done == m:
                self.log(f"  {plan.ns}: {done:,} / {m:,} retrievals ({time.perf_counter() - started:.0f} s)")

    def jobs(self, plan: _Plan) -> None:
        rows = _jobs(plan)
        rows.sort(key=lambda r: r["created_at"])
        first = self.keys.take("jobs", len(rows))
        for k, row in enumerate(rows):
            row["id"] = first + k
        usage = _token_usage(plan)
        with self.conn.begin():
            _insert(self.conn, Job.__table__, rows)
            _insert(self.conn, LLMTokenUsage.__table__, usage)


# -- jobs -----------------------------------------------------------------------------------

DONE_KINDS = (
    ("trajectory.closed", 0.55),
    ("reflect.heuristics", 0.12),
    ("reflect.evidence_card", 0.10),
    ("reflect.contrastive", 0.08),
    ("reflect.skills", 0.06),
    ("reflect.rubrics", 0.04),
    ("reflection.embed", 0.04),
    ("reflect.golden_negative", 0.01),
)
FAILED_KINDS = (
    ("reflect.heuristics", 0.35),
    ("reflect.skills", 0.2),
    ("reflect.rubrics", 0.15),
    ("reflect.contrastive", 0.1),
    ("trajectory.closed", 0.1),
    ("reflect.golden_negative", 0.05),
    ("reflection.embed", 0.05),
)
QUEUED_KINDS = (
    ("trajectory.closed", 0.4),
    ("reflect.heuristics", 0.3),
    ("reflect.skills", 0.1),
    ("reflect.evidence_card", 0.1),
    ("reflect.rubrics", 0.05),
    ("reflect.contrastive", 0.05),
)
_SRV = "/opt/reflexa"
_SETTLE_TB = (
    f'  File "{_SRV}/reflectors/worker.py", line 268, in _settle\n    write = compute()\n'
    f'  File "{_SRV}/reflectors/worker.py", line 247, in <lambda>\n'
    "    self._settle(job, holder, lambda: self.handlers[job.kind](job))\n"
)
ERRORS: dict[str, tuple[str, ...]] = {
    "llm": (
        "reflectors.llm_client.errors.LLMOutputError: LLM output for '{purpose}' unusable after 2 attempts\n"
        "attempt 1: 1 validation error for {schema}\n"
        "heuristics.0.evidence_steps\n"
        "  Value error, step {step} is not one of the steps shown [type=value_error, input_value=[{step}], "
        "input_type=list]\n"
        'raw answer: {{"heuristics": [{{"trigger": "the page lists results", "guideline": "open the first", '
        '"evidence_steps": [{step}]}}]}}\n'
        "attempt 2: Invalid JSON: EOF while parsing a string at line 1 column 812 [type=json_invalid]\n"
        'raw answer: {{"heuristics": [{{"trigger": "When the search results span several pages, sort by\n'
        + _SETTLE_TB
        + f'  File "{_SRV}/reflectors/prompted/heuristics.py", line 246, in __call__\n'
        "    prompt, result = _ask_about_attempt(self.llm, src, HEURISTICS_PROMPT, HeuristicsOut)\n"
        f'  File "{_SRV}/reflectors/llm_client/client.py", line 214, in complete_json\n'
        "    raise LLMOutputError(purpose, raw_answers, errors)\n",
        "reflectors.llm_client.errors.LLMRequestError: 400 from http://llm.internal:8000/v1/chat/completions: "
        "This model's maximum context length is 32768 tokens. However, you requested 35112 tokens "
        "(33064 in the messages, 2048 in the completion). (trajectory {pk})\n"
        + _SETTLE_TB
        + f'  File "{_SRV}/reflectors/llm_client/client.py", line 187, in _post\n'
        '    raise LLMRequestError(f"{{response.status_code}} from {{url}}: {{detail}}")\n',
        "reflectors.llm_client.errors.LLMUnavailable: 503 Service Unavailable from "
        "http://llm.internal:8000/v1/chat/completions after 2 retries (upstream connect error or disconnect/reset "
        "before headers)\n" + _SETTLE_TB + f'  File "{_SRV}/reflectors/llm_client/client.py", line 176, in _post\n'
        "    raise LLMUnavailable(message, retry_after=retry_after)\n",
    ),
    "index": (
        "store.embedding.base.EmbeddingError: ONNX Runtime failed to encode a batch of 64 texts: "
        "[ONNXRuntimeError] : 6 : RUNTIME_EXCEPTION : Non-zero status code returned while running MatMul node. "
        "Name:'/encoder/layer.3/attention/self/query/MatMul' Status Message: bad allocation\n"
        + _SETTLE_TB
        + f'  File "{_SRV}/reflectors/exemplars.py", line 172, in run_batch\n'
        "    vectors = self._embed(list(fresh.values()))  # no transaction is open here\n"
        f'  File "{_SRV}/store/embedding/onnx.py", line 141, in encode\n'
        "    outputs = self.session.run(None, feeds)\n",
        "sqlalchemy.exc.IntegrityError: (sqlite3.IntegrityError) UNIQUE constraint failed: "
        "reflection_evidence.reflection_pk, reflection_evidence.trajectory_pk, reflection_evidence.step_start\n"
        "[SQL: INSERT INTO reflection_evidence (reflection_pk, trajectory_pk, step_start, step_end, success, value) "
        "VALUES (?, ?, ?, ?, ?, ?)]\n"
        "(Background on this error at: https://sqlalche.me/e/20/gkpj)\n"
        + _SETTLE_TB
        + f'  File "{_SRV}/store/evidence.py", line 64, in create_evidence\n'
        "    return len(session.execute(stmt).all())\n",
        "KeyError: 'observation'\n" + _SETTLE_TB + f'  File "{_SRV}/reflectors/contrastive.py", line 191, in __call__\n'
        "    content = render(f)\n"
        f'  File "{_SRV}/reflectors/contrastive.py", line 144, in render\n'
        '    observation = " ".join(str(f.leader.content["observation"]).split())\n',
    ),
}
RETRYING = (
    "reflectors.llm_client.errors.LLMUnavailable: 429 Too Many Requests from "
    "http://llm.internal:8000/v1/chat/completions (retry after 30 s)",
    "sqlalchemy.exc.OperationalError: (sqlite3.OperationalError) database is locked",
)
WORKERS = ("reflexa-worker-0:4127:{slot}", "reflexa-worker-1:4133:{slot}", "reflexa-api-0:88:{slot}")


def _job_target(plan: _Plan, kind: str) -> tuple[dict[str, Any], tuple[Any, ...]] | None:
    """A payload and dedup key parts for one job of this kind, as its enqueuer writes them."""
    rng = plan.rng
    if kind in ("trajectory.closed", "reflect.heuristics", "reflect.skills", "reflect.golden_negative"):
        pool = np.flatnonzero(~plan.success) if kind == "reflect.golden_negative" else None
        t = int(rng.integers(0, plan.n)) if pool is None or not len(pool) else int(rng.choice(pool))
        return {"trajectory_pk": plan.traj_pk(t), "trajectory_id": plan.traj_id(t)}, (plan.traj_pk(t),)
    if kind == "reflect.contrastive":
        env = ENVIRONMENTS[int(rng.integers(0, len(ENVIRONMENTS)))]
        return {"environment": env}, (plan.ns, env)
    if kind in ("reflect.evidence_card", "reflect.rubrics"):
        i = int(rng.integers(0, len(plan.tasks)))
        th = plan.task_hashes[i]
        return {"task": plan.tasks[i], "task_hash": th}, (plan.ns, th)
    if kind == "reflection.embed":
        edited_ = plan.edited_pks
        if not edited_:
            return None
        pk = edited_[int(rng.integers(0, len(edited_)))]
        return {"reflection_pk": pk, "version": 2}, (pk, 2)
    raise ValueError(kind)


def _jobs(plan: _Plan) -> list[dict[str, Any]]:
    rng, sizes = plan.rng, plan.sizes
    once_keys: set[str] = set()
    queued_keys: set[str] = set()
    rows: list[dict[str, Any]] = []
    start = plan.now - DAYS * 86_400
    for status, count, shares in (
        ("done", sizes.jobs_done, DONE_KINDS),
        ("failed", sizes.jobs_failed, FAILED_KINDS),
        ("queued", sizes.jobs_queued, QUEUED_KINDS),
    ):
        made = tries = 0
        while made < count and tries < 20 * count + 100:
            tries += 1
            kind = _pick(rng, shares)
            job = JOB_KINDS[kind]
            target = _job_target(plan, kind)
            if target is None:
                continue
            payload, parts = target
            key = job.dedup_key(*parts)
            once = job.dedup.value == "once"
            if (once and key in once_keys) or (status == "queued" and key in queued_keys):
                continue
            if once:
                once_keys.add(key)
            if status == "queued":
                queued_keys.add(key)
            worker = str(rng.choice(WORKERS)).format(slot=int(rng.integers(10_000, 99_999)))
            row: dict[str, Any] = {
                "namespace": plan.ns,
                "kind": kind,
                "payload": payload,
                "dedup_key": key,
                "status": status,
                "priority": int(job.priority),
                "max_attempts": 5,
                "lease_expires_at": None,
            }
            if status == "queued":
                created = plan.now - float(rng.uniform(0, 7_200))
                retrying = rng.random() < 0.15
                row |= {
                    "attempts": int(rng.integers(1, 4)) if retrying else 0,
                    "run_after": _ts(created + (float(rng.uniform(60, 900)) if retrying else 0.0)),
                    "locked_by": None,
                    "last_error": str(rng.choice(RETRYING)) if retrying else None,
                    "created_at": _ts(created),
                    "updated_at": _ts(created),
                    "finished_at": None,
                }
            else:
                created = float(rng.uniform(start, plan.now - 7_200))
                took = float(rng.lognormal(math.log(1.5 if kind == "trajectory.closed" else 12.0), 0.8))
                if status == "done":
                    row |= {"attempts": 1 if rng.random() < 0.95 else 2, "locked_by": worker, "last_error": None}
                else:
                    index_kinds = ("trajectory.closed", "reflect.contrastive", "reflection.embed")
                    family = "index" if kind in index_kinds else "llm"
                    template = str(rng.choice(ERRORS[family]))
                    purpose = {"reflect.skills": "skills.v1", "reflect.rubrics": "rubrics.v1"}.get(
                        kind, "heuristics_single.v1"
                    )
                    error = template.format(
                        purpose=purpose,
                        schema=purpose.split(".")[0].title().replace("_", "") + "Out",
                        step=int(rng.integers(20, 40)),
                        pk=payload.get("trajectory_pk", "-"),
                    )
                    row |= {"attempts": 5, "locked_by": None, "last_error": error}
                    took += 5 * 60.0  # its retries' backoff
                finished = min(plan.now - 60.0, created + took)
                row |= {
                    "run_after": _ts(created),
                    "created_at": _ts(created),
                    "updated_at": _ts(finished),
                    "finished_at": _ts(finished),
                }
            rows.append(row)
            made += 1
    return rows


def _token_usage(plan: _Plan) -> list[dict[str, Any]]:
    """Daily LLM tokens and calls, in proportion to the namespace's LLM-made reflections."""
    llm = sum(r.author.model is not None for r in plan.reflections)
    per_day = max(1, llm // DAYS)
    today = _ts(plan.now).date()
    return [
        {
            "namespace": plan.ns,
            "day": today - timedelta(days=d),
            "calls": int(per_day * plan.rng.uniform(0.6, 1.4)) + 1,
            "tokens": int(per_day * plan.rng.uniform(0.6, 1.4) * 3_800) + 1_000,
        }
        for d in range(DAYS)
    ]


# -- the fill --------------------------------------------------------------------------------


def _tune(conn: Connection) -> None:
    """Bulk-load settings of this connection only (what a crash loses is a fill)."""
    if conn.dialect.name == "sqlite":
        cur = conn.connection.dbapi_connection.cursor()  # outside any transaction
        cur.execute("PRAGMA synchronous=OFF")
        cur.execute("PRAGMA cache_size=-262144")  # 256 MiB
        cur.close()
    else:
        with conn.begin():
            conn.exec_driver_sql("SET synchronous_commit TO off")


def _finish(conn: Connection) -> None:
    if conn.dialect.name == "postgresql":
        with conn.begin():
            for table, column in KEY_COLUMNS.items():
                conn.execute(
                    text(
                        f"SELECT setval(pg_get_serial_sequence('{table}', '{column}'), "
                        f"(SELECT COALESCE(MAX({column}), 1) FROM {table}), (SELECT COUNT(*) > 0 FROM {table}))"
                    )
                )
            conn.exec_driver_sql("ANALYZE")  # planner statistics now, not when autovacuum gets to it
    else:
        cur = conn.connection.dbapi_connection.cursor()
        cur.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        cur.close()


def _counts(conn: Connection, namespaces: Sequence[str]) -> tuple[dict[str, int], dict[str, dict[str, int]]]:
    with conn.begin():
        totals = {m.__tablename__: int(conn.scalar(select(func.count()).select_from(m.__table__)) or 0) for m in TABLES}
        per: dict[str, dict[str, int]] = {}
        for ns in namespaces:
            per[ns] = {
                "trajectories": conn.scalar(select(func.count()).where(Trajectory.namespace == ns)) or 0,
                "steps": conn.scalar(
                    select(func.count())
                    .select_from(Step)
                    .join(Trajectory, Trajectory.pk == Step.trajectory_pk)
                    .where(Trajectory.namespace == ns)
                )
                or 0,
                "reflections": conn.scalar(select(func.count()).where(Reflection.namespace == ns)) or 0,
                "retrievals": conn.scalar(select(func.count()).where(Retrieval.namespace == ns)) or 0,
                "jobs": conn.scalar(select(func.count()).where(Job.namespace == ns)) or 0,
            }
    return totals, per


def _check_registry() -> None:
    """The reflector names written here are the registry's (a rename shows up here)."""
    known = {r.name for r in reflectors_available(llm=True)}
    missing = {a.reflector for a in AUTHORS} - known
    if missing:
        raise RuntimeError(f"reflectors {sorted(missing)} are not in reflectors/registry.py any more")


def fill(
    database_url: str,
    *,
    steps: int,
    reflections: int,
    seed: int = 0,
    model: str = DEFAULT_MODEL_NAME,
    dim: int = DIM,
    now: datetime | None = None,
    log: Callable[[str], None] = progress,
) -> FillReport:
    """Migrate the database to head and fill namespaces "bench" (`steps` steps,
    `reflections` reflections) and "other" (a thousandth of the steps, a
    five-hundredth of the reflections). `model`/`dim`: the embedder the server
    will run (its name is what the index loads by; "hashing-256" for the tests'
    model-free embedder). Refuses a database that already has either namespace."""
    started = time.perf_counter()
    phases: dict[str, float] = {}
    now_ts = (now or datetime.now(UTC)).timestamp()
    _check_registry()
    mark = time.perf_counter()
    upgrade(database_url)
    phases["migrate"] = time.perf_counter() - mark
    plans = [("bench", sizes_for(steps, reflections)), ("other", other_sizes(steps, reflections))]
    engine = create_db_engine(database_url)
    try:
        with engine.connect() as conn:
            _tune(conn)
            with conn.begin():
                taken = conn.scalars(select(Namespace.name).where(Namespace.name.in_([n for n, _ in plans]))).all()
                keys = _Keys(conn)
            if taken:
                raise ValueError(f"namespace(s) {', '.join(taken)} already exist in {_redact(database_url)}")
            writer = _Writer(conn, keys, model, dim, log)
            for index, (ns, sizes) in enumerate(plans):
                mark = time.perf_counter()
                plan = _Plan(ns, sizes, seed, index, now_ts)
                plan.traj_pk_base = keys.take("trajectories", plan.n)
                plan.plan_reflections()
                first = keys.take("reflections", len(plan.reflections))
                for k, r in enumerate(plan.reflections):
                    r.pk = first + k
                plan.edited_pks = [r.pk for r in plan.reflections if r.edited]
                plan.plan_retrievals()
                phases[f"{ns}.plan"] = time.perf_counter() - mark
                log(
                    f"{ns}: {plan.n:,} trajectories, {len(plan.reflections):,} reflections, "
                    f"{len(plan.ret_t):,} retrievals planned ({phases[f'{ns}.plan']:.1f} s)"
                )
                for name, step in (
                    ("namespace", writer.namespace),
                    ("trajectories", writer.trajectories),
                    ("reflections", writer.reflections),
                    ("retrievals", writer.retrievals),
                    ("jobs", writer.jobs),
                ):
                    mark = time.perf_counter()
                    step(plan)
                    phases[f"{ns}.{name}"] = time.perf_counter() - mark
            mark = time.perf_counter()
            _finish(conn)
            phases["finish"] = time.perf_counter() - mark
            counts, per_ns = _counts(conn, [n for n, _ in plans])
    finally:
        engine.dispose()
    return FillReport(
        database_url=_redact(database_url),
        counts=counts,
        namespaces=per_ns,
        seconds=time.perf_counter() - started,
        phases={k: round(v, 2) for k, v in phases.items()},
        peak_rss_mb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        model=model,
        dim=dim,
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.ui.fill",
        description="Fill a database for the operator UI benchmark (namespaces 'bench' and 'other').",
    )
    parser.add_argument("--database-url", required=True, help="sqlite:///file.db or postgresql+psycopg://…")
    parser.add_argument("--steps", type=int, default=1_000_000, help="steps in 'bench' (20 per trajectory)")
    parser.add_argument("--reflections", type=int, default=100_000, help="reflections in 'bench'")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--model", default=DEFAULT_MODEL_NAME, help="embedder name the vectors are stored under")
    parser.add_argument("--dim", type=int, default=DIM, help="vector dimension of that embedder")
    args = parser.parse_args(argv)
    report = fill(
        args.database_url,
        steps=args.steps,
        reflections=args.reflections,
        seed=args.seed,
        model=args.model,
        dim=args.dim,
    )
    print(report.summary())
    for ns, counts in report.namespaces.items():
        print(f"  {ns}: " + ", ".join(f"{k} {v:,}" for k, v in counts.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
