"""Is the agent learning, and what memory helps: success and reward per block of
episodes (in completion order) and per policy version, per-reflector numbers, and
a reflection's utility as credits came in.

A run lasts hours, so per-day charts show it as one bar; blocks of episodes show it
as a curve. A reflection's utility over time is rebuilt from the outcomes that
credited it, in order, with the ranking's own posterior (ranking.utility) at
today's baseline: nothing stores past utilities."""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime

from service.auth import Permission, Principal
from service.namespaces.service import NamespaceService
from service.operator.repository import learning as repo
from service.operator.repository.learning import EpisodeGroup, ReflectorRow
from service.retrieval import ranking
from service.retrieval.credit import unnamed_max_rank
from store import reflections as reflection_repo
from store.database import Database

TARGET_BLOCKS = 20  # the default block size gives about this many blocks
MAX_BLOCKS = 500  # a block size the caller picks may not cut more
POLICY_VERSIONS = 50  # the newest versions shown
UTILITY_POINTS = 60  # a reflection's utility curve, thinned to about this many points


@dataclass
class Learning:
    namespace: str
    block_size: int
    episodes: int
    blocks: list[EpisodeGroup]
    versions: list[EpisodeGroup]
    reflectors: list[ReflectorRow]
    served_total: int
    baseline: float  # the ranking's baseline: success over retrieval outcomes
    outcomes: int

    @property
    def overall_success(self) -> float | None:
        known = sum(b.with_outcome for b in self.blocks)
        return sum(b.successes for b in self.blocks) / known if known else None

    def served_share(self, row: ReflectorRow) -> float | None:
        return row.served / self.served_total if self.served_total else None


@dataclass(frozen=True)
class UtilityPoint:
    credit: int  # the n-th credited outcome
    at: datetime
    retrieval_id: str
    utility: ranking.Utility


def default_block_size(episodes: int) -> int:
    return max(1, math.ceil(episodes / TARGET_BLOCKS))


def thin(points: list[UtilityPoint], most: int = UTILITY_POINTS) -> list[UtilityPoint]:
    """Every k-th point and the last, so a long history stays a readable chart."""
    if len(points) <= most:
        return points
    step = math.ceil(len(points) / most)
    kept = points[::step]
    return kept if kept[-1] is points[-1] else [*kept, points[-1]]


class LearningService:
    def __init__(self, db: Database, namespaces: NamespaceService) -> None:
        self.db = db
        self.namespaces = namespaces

    def learning(self, principal: Principal, ns: str, *, block_size: int | None = None) -> Learning:
        for permission in (Permission.TRAJECTORIES_READ, Permission.REFLECTIONS_READ):
            principal.require(permission, ns)
        _, successes, total = self.namespaces.ranking_inputs(ns)
        baseline = ranking.baseline_rate(successes, total)
        with self.db.read() as session:
            self.namespaces.require(session, ns)
            episodes = repo.count_closed_episodes(session, ns)
            size = max(block_size or default_block_size(episodes), math.ceil(episodes / MAX_BLOCKS), 1)
            reflectors = repo.list_reflector_stats(session, ns, baseline, ranking.PRIOR_STRENGTH)
            return Learning(
                namespace=ns,
                block_size=size,
                episodes=episodes,
                blocks=repo.list_episode_blocks(session, ns, size),
                versions=repo.list_policy_versions(session, ns, POLICY_VERSIONS),
                reflectors=reflectors,
                served_total=sum(r.served for r in reflectors),
                baseline=baseline,
                outcomes=total,
            )

    def utility_over_time(self, principal: Principal, ns: str, id: str) -> list[UtilityPoint]:
        """The reflection's posterior utility after each outcome that credited it."""
        principal.require(Permission.REFLECTIONS_READ, ns)
        _, successes, total = self.namespaces.ranking_inputs(ns)
        baseline = ranking.baseline_rate(successes, total)
        with self.db.read() as session:
            row = self.namespaces.get_or_404(
                session, ns, "reflection", id, lambda: reflection_repo.read_reflection(session, ns, id)
            )
            credits = repo.list_credited_outcomes(session, row.pk, row.id, unnamed_max_rank(session, ns))
        out, wins, losses = [], 0, 0
        for n, credit in enumerate(credits, start=1):
            wins += 1 if credit.success is True else 0
            losses += 1 if credit.success is False else 0
            out.append(UtilityPoint(n, credit.at, credit.retrieval_id, ranking.utility(wins, losses, n, baseline)))
        return out
