"""Contrastive heuristics, no LLM: across trajectories of one environment, which
(state neighbourhood, action) pairs go with success or failure, as readable
heuristics with counts and confidence — "In states like …, avoid 'x': 9 of 11
attempts failed".

1. Neighbourhoods: the environment's exemplars (most-seen first) are grouped by
   leader clustering on their state vectors (cosine >= `similarity`).
2. In each neighbourhood, the credited successes and failures of each action are
   summed over its exemplars (credit as in reflectors/exemplars.py: failure goes to
   the step that caused it).
3. An action becomes an "avoid" heuristic when the Wilson lower bound of its failure
   rate reaches `min_confidence` with at least `min_support` attempts; a "prefer"
   heuristic when the bound of its success rate does, and it beats the other
   actions of the neighbourhood by `min_lift`.
4. A heuristic is matched by its neighbourhood's centroid, so a retrieval in such a
   state finds it. Near-duplicates (same action and polarity, centroid cosine >=
   `similarity`) are the same heuristic, revised in place with a new version; one
   the evidence no longer supports drops to candidate (not served) until it does.
"""

from __future__ import annotations

import hashlib
import math
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

import numpy as np
from sqlalchemy.orm import Session

from domain.evidence_cards import action_key
from domain.jobs import Dedup, Lane, Priority, declare
from domain.reflections import ReflectionDraft
from domain.settings import NamespaceSettings
from reflectors import repository
from reflectors.derived import Derived, upsert_derived
from reflectors.registry import Reflector, register
from reflectors.worker import JobView, Write
from service.namespaces.stored import read_settings
from store import embeddings as embeddings_repo
from store import evidence as evidence_repo
from store import reflections as repo
from store.database import Database
from store.embedding.base import Embedder
from store.models import Reflection, Trajectory

NAME = "contrastive"
VERSION = "1"
KIND = "heuristic"
JOB = declare(
    "reflect.contrastive",
    lane=Lane.FAST,
    priority=Priority.OFFLINE,
    dedup=Dedup.COALESCE,
    description="recount an environment's contrastive heuristics from its exemplars",
)
MAX_EXEMPLARS = 20_000
MAX_EVIDENCE = 50


@dataclass(frozen=True)
class ContrastiveConfig:
    similarity: float = 0.85
    min_support: int = 5
    min_confidence: float = 0.5
    min_lift: float = 0.2


def wilson_lower(k: int, n: int, z: float = 1.96) -> float:
    """Lower bound of the 95% Wilson interval of k successes in n trials."""
    if n == 0:
        return 0.0
    p = k / n
    centre = p + z * z / (2 * n)
    margin = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return (centre - margin) / (1 + z * z / n)


def neighbourhoods(vectors: np.ndarray, similarity: float) -> list[list[int]]:
    """Leader clustering: each vector joins the most similar leader at or above
    `similarity`, else leads a new neighbourhood. Order matters: callers pass the
    most-seen states first, so leaders are stable as data grows."""
    leaders: list[int] = []
    members: list[list[int]] = []
    leader_matrix = np.zeros((0, vectors.shape[1]), dtype=np.float32)
    for i, v in enumerate(vectors):
        if len(leaders):
            sims = leader_matrix @ v
            best = int(np.argmax(sims))
            if sims[best] >= similarity:
                members[best].append(i)
                continue
        leaders.append(i)
        members.append([i])
        leader_matrix = np.vstack([leader_matrix, v[None, :]])
    return members


@dataclass
class Finding:
    polarity: str  # avoid | prefer
    action: str
    successes: int
    failures: int
    confidence: float
    centroid: np.ndarray
    leader: Reflection
    exemplars: list[Reflection]
    neighbourhood_size: int


def find(rows: list[Reflection], vectors: np.ndarray, config: ContrastiveConfig) -> list[Finding]:
    out: list[Finding] = []
    for group in neighbourhoods(vectors, config.similarity):
        by_action: dict[str, list[int]] = defaultdict(list)
        for i in group:
            by_action[action_key(rows[i].content.get("action"))].append(i)
        stats = {
            a: (sum(rows[i].evidence_successes for i in idx), sum(rows[i].evidence_failures for i in idx))
            for a, idx in by_action.items()
        }
        centroid = vectors[group].mean(axis=0)
        centroid /= np.linalg.norm(centroid) or 1.0
        for action, (s, f) in stats.items():
            n = s + f
            if n < config.min_support:
                continue
            others = [(s2, f2) for a2, (s2, f2) in stats.items() if a2 != action and s2 + f2 > 0]
            other_rate = sum(x for x, _ in others) / max(1, sum(x + y for x, y in others)) if others else 0.0
            members = [rows[i] for i in by_action[action]]
            if wilson_lower(f, n) >= config.min_confidence:
                out.append(
                    Finding("avoid", action, s, f, wilson_lower(f, n), centroid, rows[group[0]], members, len(group))
                )
            elif wilson_lower(s, n) >= config.min_confidence and s / n - other_rate >= config.min_lift and others:
                out.append(
                    Finding("prefer", action, s, f, wilson_lower(s, n), centroid, rows[group[0]], members, len(group))
                )
    return out


def render(f: Finding) -> dict[str, Any]:
    n = f.successes + f.failures
    observation = " ".join(str(f.leader.content.get("observation", "")).split())
    trigger = f"In states like: {observation[:240]}"
    if f.polarity == "avoid":
        guideline = f"Avoid '{f.action}'."
        rationale = f"{f.failures} of {n} attempts failed (95% lower bound of the failure rate {f.confidence:.2f})."
    else:
        guideline = f"Prefer '{f.action}'."
        rationale = (
            f"{f.successes} of {n} attempts succeeded (95% lower bound {f.confidence:.2f}), "
            "more than the other actions tried in these states."
        )
    return {
        "trigger": trigger,
        "guideline": guideline,
        "rationale": rationale,
        "polarity": f.polarity,
        "action": f.action,
        "support": {"successes": f.successes, "failures": f.failures, "attempts": n},
        "confidence": round(f.confidence, 4),
        "neighbourhood_size": f.neighbourhood_size,
        "text": f"{trigger}\n{guideline} {rationale}",
    }


def heuristic_id(namespace: str, environment: str | None, leader_id: str, action: str, polarity: str) -> str:
    key = f"{namespace}\x00{environment}\x00{leader_id}\x00{action}\x00{polarity}"
    return "heur_c_" + hashlib.sha256(key.encode()).hexdigest()[:28]


class ContrastiveReflector:
    """Job handler for `reflect.contrastive` (payload: environment)."""

    def __init__(self, db: Database, embedder: Embedder) -> None:
        self.db = db
        self.embedder = embedder

    def __call__(self, job: JobView) -> Write | None:
        ns, env = job.namespace, job.payload.get("environment")
        with self.db.read() as session:
            c = read_settings(session, ns).reflection.contrastive
            config = ContrastiveConfig(c.similarity, c.min_support, c.min_confidence, c.min_lift)
            pairs = repository.list_exemplars_with_vectors(session, ns, env, self.embedder.name, MAX_EXEMPLARS)
            existing = repository.list_reflections_by_reflector(session, ns, NAME, env)
            existing_vectors = embeddings_repo.read_embeddings(session, [r.pk for r in existing], self.embedder.name)
            if not pairs:
                return None
            rows = [r for r, _ in pairs]
            findings = find(rows, np.vstack([v for _, v in pairs]), config)
            evidence = evidence_repo.list_evidence(session, [r.pk for f in findings for r in f.exemplars])

        items: list[Derived] = []
        kept: set[str] = set()
        for f in findings:
            id_ = _match(existing, existing_vectors, f, config.similarity) or heuristic_id(
                ns, env, f.leader.id, f.action, f.polarity
            )
            kept.add(id_)
            links = [e for r in f.exemplars for e in evidence.get(r.pk, [])][-MAX_EVIDENCE:]
            content = render(f)
            items.append(
                Derived(
                    draft=ReflectionDraft(
                        namespace=ns,
                        id=id_,
                        kind=KIND,
                        status="active",
                        content=content,
                        text=content["text"],
                        environment=env,
                        reflector=NAME,
                        reflector_version=VERSION,
                    ),
                    vectors={"state": f.centroid.astype(np.float32)},
                    evidence=[
                        evidence_repo.EvidenceIn(e.trajectory_pk, e.step_start, e.step_end, e.success, e.value)
                        for e in links
                    ],
                )
            )
        # Heuristics the evidence no longer supports stop being served.
        stale = [r for r in existing if r.id not in kept and r.status == "active"]

        def write(session: Session) -> None:
            actor = f"reflector:{NAME}"
            for item in items:
                upsert_derived(
                    session,
                    item,
                    model=self.embedder.name,
                    actor=actor,
                    note="recounted from the environment's exemplars",
                )
            for r in stale:
                row = repo.read_reflection(session, ns, r.id, for_update=True)
                if row is not None and row.status == "active":
                    repo.update_reflection_status(
                        session,
                        row,
                        "candidate",
                        action="status",
                        actor=actor,
                        note="the evidence no longer supports it",
                    )

        return write


def _match(
    existing: list[Reflection], vectors: dict[int, dict[str, np.ndarray]], f: Finding, similarity: float
) -> str | None:
    """The existing heuristic this finding is a revision of: same action and
    polarity, centroid within `similarity`."""
    best, best_sim = None, similarity
    for r in existing:
        if r.content.get("action") != f.action or r.content.get("polarity") != f.polarity:
            continue
        v = vectors.get(r.pk, {}).get("state")
        if v is not None and float(v @ f.centroid) >= best_sim:
            best, best_sim = r.id, float(v @ f.centroid)
    return best


def queue_recount(session: Session, traj: Trajectory, settings: NamespaceSettings) -> None:
    """One recount per environment, however many of its episodes close meanwhile."""
    JOB.enqueue(session, traj.namespace, {"environment": traj.environment}, traj.namespace, traj.environment)


register(
    Reflector(
        name=NAME,
        version=VERSION,
        job=JOB,
        build=lambda deps: ContrastiveReflector(deps.db, deps.embedder),
        settings_section="contrastive",
        trigger=queue_recount,
    )
)
