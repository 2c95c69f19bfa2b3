"""Outcome credit: what was served earns or loses utility.

Two paths: an agent reports the outcome of one retrieval (optionally naming the
items it acted on), or an episode closes and credits, with its own outcome, every
retrieval it used that has no outcome yet (linked by `trajectory_id` or listed in
`retrieval_ids`). An outcome that names no items credits only the items served in
the top `credit.unnamed_top_k` ranks (3): a hundred served look-alikes do not each
earn the full credit of what the agent did with the first few.
"""

from __future__ import annotations

from sqlalchemy.orm import Session

from domain.errors import Conflict, InvalidInput
from service.namespaces.stored import read_settings
from service.retrieval.schemas import RetrievalOutcomeCreate, RetrievalOutcomeRead
from store import namespaces as ns_repo
from store import retrievals as repo
from store.models import Trajectory


def unnamed_max_rank(session: Session, ns: str) -> int | None:
    """The rank bound of an outcome that names no items (None: every served item)."""
    top_k = read_settings(session, ns).credit.unnamed_top_k
    return top_k or None


def credit_closed_episode(session: Session, ns: str, traj: Trajectory) -> None:
    """A closing episode credits the retrievals it used that have no outcome yet
    (their top-ranked items: it names none)."""
    open_ids = repo.list_open_retrievals(session, ns, traj.id, traj.retrieval_ids or [])
    max_rank = unnamed_max_rank(session, ns) if open_ids else None
    credit = not ns_repo.read_frozen(session, ns) if open_ids else True
    for rid in open_ids:
        repo.create_outcome(
            session,
            ns,
            rid,
            success=traj.success,
            reward=traj.reward,
            trajectory_id=traj.id,
            details=None,
            max_rank=max_rank,
            credit=credit,
        )


def credit_retrieval(
    session: Session, ns: str, retrieval_id: str, body: RetrievalOutcomeCreate
) -> RetrievalOutcomeRead:
    """Record one retrieval's outcome (the retrieval exists). An identical repeat is a
    replay that credits nothing; a different one is a conflict."""
    item_ids = None if body.item_ids is None else sorted(set(body.item_ids))
    old = repo.read_outcome(session, retrieval_id)
    if old is not None:
        if (old.success, old.reward, old.details, old.item_ids) != (body.success, body.reward, body.details, item_ids):
            raise Conflict(
                f"retrieval {retrieval_id!r} already has a different outcome",
                field="outcome",
                rule="idempotent_replay",
            )
        return RetrievalOutcomeRead(retrieval_id=retrieval_id, success=old.success, reward=old.reward, credited_items=0)
    if body.item_ids is not None:
        served = repo.read_served_ids(session, retrieval_id)
        for i, item_id in enumerate(body.item_ids):
            if item_id not in served:
                raise InvalidInput(
                    f"item_ids[{i}] {item_id!r} was not served by retrieval {retrieval_id!r}",
                    field=f"item_ids[{i}]",
                    rule="served",
                )
    n = repo.create_outcome(
        session,
        ns,
        retrieval_id,
        success=body.success,
        reward=body.reward,
        trajectory_id=body.trajectory_id,
        details=body.details,
        item_ids=item_ids,
        max_rank=unnamed_max_rank(session, ns) if item_ids is None else None,
        credit=not ns_repo.read_frozen(session, ns),  # frozen: recorded, not credited
    )
    return RetrievalOutcomeRead(retrieval_id=retrieval_id, success=body.success, reward=body.reward, credited_items=n)
