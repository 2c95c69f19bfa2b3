"""Side effects that cross domains, declared in one place.

A domain announces what happened inside its own write transaction; every handler
listed here runs in that same transaction, so the effect commits or rolls back
with the write that caused it. Since they hold the transaction, handlers are SQL
only (never an LLM, embedding or HTTP call); slow work is queued as a job instead.
Adding an effect is one line in these tables.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from sqlalchemy.orm import Session

from domain import llm_pool
from service.retrieval.credit import credit_closed_episode
from store.models import Trajectory


@dataclass(frozen=True)
class TrajectoryClosed:
    namespace: str
    trajectory: Trajectory  # just closed: its outcome is set


@dataclass(frozen=True)
class TrajectoryDeleted:
    namespace: str
    voted_reflection_pks: Sequence[int]  # LLM pool items whose votes it carried


def _credit_retrievals(session: Session, event: TrajectoryClosed) -> None:
    credit_closed_episode(session, event.namespace, event.trajectory)


def _refresh_pool_votes(session: Session, event: TrajectoryDeleted) -> None:
    llm_pool.refresh_importance(session, event.voted_reflection_pks)


ON_TRAJECTORY_CLOSED: tuple[Callable[[Session, TrajectoryClosed], None], ...] = (
    _credit_retrievals,  # the retrievals the episode used get its outcome (service.retrieval.credit)
)
ON_TRAJECTORY_DELETED: tuple[Callable[[Session, TrajectoryDeleted], None], ...] = (
    _refresh_pool_votes,  # LLM pool items lose the deleted episode's votes (domain.llm_pool)
)


def trajectory_closed(session: Session, namespace: str, trajectory: Trajectory) -> None:
    event = TrajectoryClosed(namespace, trajectory)
    for handler in ON_TRAJECTORY_CLOSED:
        handler(session, event)


def trajectory_deleted(session: Session, namespace: str, voted_reflection_pks: Sequence[int]) -> None:
    event = TrajectoryDeleted(namespace, voted_reflection_pks)
    for handler in ON_TRAJECTORY_DELETED:
        handler(session, event)
