"""The table of job kinds: for each kind of background work, its lane, its
priority and its dedup rule, declared once.

The kinds the API queues itself (indexing a closed trajectory, re-embedding an
edited reflection) are declared here; each reflector declares its own next to its
code (reflectors/registry.py) with `declare`. Either way `JOB_KINDS` is the one
table the worker, the queue and the docs read.

Lanes: a worker runs the `fast` lane (indexing, offline reflection) and the `slow`
lane (LLM calls that may take a minute) on separate slots, so slow work never
delays indexing. Priority orders claims within a lane (lower first). Dedup:
`once` does the work at most once ever per key; `coalesce` queues it again only
after the waiting job has started (it may already have read its inputs).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum, StrEnum
from typing import Any

from sqlalchemy.orm import Session

from store import jobs as jobs_repo


class Lane(StrEnum):
    FAST = "fast"
    SLOW = "slow"


class Priority(IntEnum):
    AWAITED = 5  # a job a reader is waiting on right now (its consistency token): first
    INDEX = 10  # a closed episode's exemplars: what read-your-writes waits for
    REEMBED = 20  # an operator's edit, re-encoded
    OFFLINE = 50  # offline recounts (contrastive heuristics, evidence cards)
    LLM = 70  # per-trajectory LLM reflection
    LLM_TASK = 80  # per-task LLM reflection (rubrics)


class Dedup(StrEnum):
    ONCE = "once"
    COALESCE = "coalesce"


@dataclass(frozen=True)
class JobKind:
    kind: str
    lane: Lane
    priority: Priority
    dedup: Dedup
    description: str = ""

    def dedup_key(self, *parts: Any) -> str:
        """`kind:part:part…`: the same work has the same key."""
        return ":".join([self.kind, *(str(p) for p in parts)])

    def enqueue(self, session: Session, namespace: str, payload: dict[str, Any], *key_parts: Any) -> int:
        """Queue this kind of job in the caller's transaction; returns its id (the
        id of the job already holding the key, when the dedup rule says so)."""
        return jobs_repo.create_job(
            session,
            namespace=namespace,
            kind=self.kind,
            payload=payload,
            dedup_key=self.dedup_key(*key_parts),
            once=self.dedup is Dedup.ONCE,
            priority=int(self.priority),
        )


JOB_KINDS: dict[str, JobKind] = {}


def declare(kind: str, *, lane: Lane, priority: Priority, dedup: Dedup, description: str = "") -> JobKind:
    """Add a kind to the table (a module declaring it again, e.g. on reload, is fine;
    two different declarations of one kind are a bug)."""
    job = JobKind(kind, lane, priority, dedup, description)
    known = JOB_KINDS.setdefault(kind, job)
    if known != job:
        raise ValueError(f"job kind {kind!r} is declared twice, differently: {known} and {job}")
    return known


TRAJECTORY_CLOSED = declare(
    "trajectory.closed",
    lane=Lane.FAST,
    priority=Priority.INDEX,
    dedup=Dedup.ONCE,
    description="a trajectory closed: index its exemplars, then queue the reflection that builds on them",
)
REFLECTION_EMBED = declare(
    "reflection.embed",
    lane=Lane.FAST,
    priority=Priority.REEMBED,
    dedup=Dedup.ONCE,
    description="an operator edited a reflection: encode its new version",
)
