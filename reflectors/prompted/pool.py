"""The pools of LLM-written items (heuristics, skills): planned operations and the
one write that applies them.

A handler plans outside any transaction — it embeds the new items, compares them
with the pool it read, asks pool maintenance where needed — and ends with a list
of operations. `write_ops` applies them in the job's write unit, re-reading every
target under the namespace's feed lock.

Importance (ExpeL's counter) is not a stored counter but the sum of votes kept in
the evidence rows: the row that links an attempt to an item carries `value` +1
(the attempt added, confirmed or improved it) or -1 (it contradicted it). One
attempt votes at most once on an item, and a vote is only counted when its
evidence row is new, so a re-run job can never count twice; `content.importance`
is refreshed from the sum whenever the item changes. An item reaching the
namespace's `activation_importance` becomes active (activation "evidence"); one
falling to 0 is retired, the history saying why.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from sqlalchemy.orm import Session

from domain import llm_pool
from domain.reflections import ReflectionDraft
from domain.settings import LLMReflectionSettings
from reflectors import repository
from reflectors.embed import write_vectors
from store import evidence as evidence_repo
from store import index_feed
from store import reflections as repo
from store.models import Reflection, Trajectory

MAX_GOLDEN_NEGATIVES = 20  # golden-negative analyses kept on one heuristic


@dataclass
class NewItem:
    """An item as the reflector wrote it, not yet in the pool."""

    id: str
    draft: ReflectionDraft  # a candidate whose content starts at importance 1
    vector: np.ndarray
    evidence: evidence_repo.EvidenceIn  # the source attempt, value +1

    @classmethod
    def candidate(
        cls,
        where: tuple[str, str, str | None],
        id_: str,
        content: dict[str, Any],
        made_by: tuple[str, str, str],
        vector: np.ndarray,
        evidence: evidence_repo.EvidenceIn,
    ) -> NewItem:
        """A new candidate item. where: (namespace, kind, environment); made_by:
        (reflector, its version, model)."""
        namespace, kind, environment = where
        reflector, version, model = made_by
        draft = ReflectionDraft(
            namespace=namespace,
            id=id_,
            kind=kind,  # type: ignore[arg-type]
            content=content,
            text=content["text"],
            environment=environment,
            reflector=reflector,
            reflector_version=version,
            model=model,
        )
        return cls(id_, draft, vector, evidence)


@dataclass
class Add:
    item: NewItem


@dataclass
class Vote:
    """Evidence for (+1) or against (-1) an existing item: a merged near-duplicate,
    an UPVOTE or a DOWNVOTE."""

    target_id: str
    evidence: evidence_repo.EvidenceIn  # value is the vote
    action: str  # merge | upvote | downvote (the history action)
    note: str
    extra: list[dict[str, Any]] | None = None  # golden-negative analyses to keep on the target


@dataclass
class Edit:
    """Pool maintenance's EDIT: a new version of the target with new wording."""

    target_id: str
    base_version: int
    changes: dict[str, Any]  # content fields replaced (trigger, guideline, text)
    text: str
    vector: np.ndarray
    evidence: evidence_repo.EvidenceIn  # value +1: the attempt supports the improved item
    note: str
    extra: list[dict[str, Any]] | None = None


Op = Add | Vote | Edit


@dataclass
class PoolEntry:
    """An item of the working pool while planning (stored, or added earlier in the plan)."""

    id: str
    version: int
    content: dict[str, Any]
    text: str
    vector: np.ndarray


@dataclass
class WorkingPool:
    entries: list[PoolEntry] = field(default_factory=list)

    @classmethod
    def of(cls, rows: list[tuple[Reflection, np.ndarray]]) -> WorkingPool:
        return cls([PoolEntry(r.id, r.version, dict(r.content), r.text, v) for r, v in rows])

    def get(self, id: str) -> PoolEntry | None:
        return next((e for e in self.entries if e.id == id), None)

    def ranked(self, vector: np.ndarray) -> list[tuple[PoolEntry, float]]:
        """Entries by cosine to `vector` (vectors are unit length), most similar first."""
        if not self.entries:
            return []
        sims = np.vstack([e.vector for e in self.entries]) @ vector
        order = sorted(range(len(self.entries)), key=lambda i: (-float(sims[i]), self.entries[i].id))
        return [(self.entries[i], float(sims[i])) for i in order]


@dataclass(frozen=True)
class PoolContext:
    """What the write needs to know besides the operations."""

    namespace: str
    kind: str
    environment: str | None
    pool_reflectors: tuple[str, ...]
    trajectory_pk: int
    trajectory_id: str
    settings: LLMReflectionSettings
    model: str  # the embedder's name
    actor: str
    seen_ids: frozenset[str]  # pool items the plan was made against


def writer(
    ops: list[Op],
    *,
    who: tuple[str, tuple[str, ...], str],
    traj: Trajectory,
    environment: str | None,
    settings: LLMReflectionSettings,
    model: str,
    seen_ids: frozenset[str],
) -> Callable[[Session], None]:
    """The job's write: apply `ops` for the trajectory. `who` is (kind, the
    reflectors whose items form the pool, actor recorded in history)."""
    kind, pool_reflectors, actor = who
    ctx = PoolContext(
        traj.namespace, kind, environment, pool_reflectors, traj.pk, traj.id, settings, model, actor, seen_ids
    )
    return lambda session: write_ops(session, ctx, ops)


def write_ops(session: Session, ctx: PoolContext, ops: list[Op]) -> None:
    """Apply a plan in the job's write unit. Idempotent: when the attempt already
    gave evidence to this pool (the job's results were written before), nothing is
    written again."""
    index_feed.lock_feed(session, ctx.namespace)
    if session.get(Trajectory, ctx.trajectory_pk) is None:
        return  # deleted while the job ran: nothing to derive
    if repository.cited_by_reflectors(session, ctx.namespace, ctx.trajectory_pk, ctx.pool_reflectors):
        return
    fresh: list[tuple[Reflection, np.ndarray]] | None = None
    for op in ops:
        if isinstance(op, Add):
            if fresh is None:  # items other jobs added since the plan was made
                fresh = [
                    (r, v)
                    for r, v in repository.list_pool_with_vectors(
                        session,
                        ctx.namespace,
                        kind=ctx.kind,
                        environment=ctx.environment,
                        reflectors=ctx.pool_reflectors,
                        model=ctx.model,
                        limit=1_000,
                    )
                    if r.id not in ctx.seen_ids
                ]
            _add(session, ctx, op, fresh)
        elif isinstance(op, Vote):
            row = repo.read_reflection(session, ctx.namespace, op.target_id, for_update=True)
            if row is not None:
                vote(session, ctx, row, op.evidence, op.action, op.note, op.extra)
        else:
            _edit(session, ctx, op)


def _add(session: Session, ctx: PoolContext, op: Add, fresh: list[tuple[Reflection, np.ndarray]]) -> None:
    item = op.item
    extra = item.draft.content.get("golden_negatives")
    row = repo.read_reflection(session, ctx.namespace, item.id, for_update=True)
    if row is not None:  # the very same item, worded the same: one more piece of evidence
        note = f"the same item again, from attempt {ctx.trajectory_id}"
        vote(session, ctx, row, item.evidence, "merge", note, extra)
        return
    if fresh:
        best, best_sim = max(((r, float(v @ item.vector)) for r, v in fresh), key=lambda p: p[1])
        if best_sim >= ctx.settings.dedup_similarity:  # written by a concurrent job meanwhile
            note = f"near-duplicate (cosine {best_sim:.3f}) from attempt {ctx.trajectory_id}"
            vote(session, ctx, best, item.evidence, "merge", note, extra)
            return
    row = repo.create_reflection(session, item.draft.values(), actor=ctx.actor)
    write_vectors(session, row, ctx.model, {"state": item.vector}, {"state": item.draft.text})  # it encodes the text
    evidence_repo.create_evidence(session, row.pk, [item.evidence])
    evidence_repo.update_evidence_stats(session, [row.pk])
    fresh.append((row, item.vector))
    settle_status(session, ctx, row, row.content.get("importance", 1), f"added from attempt {ctx.trajectory_id}")


def _edit(session: Session, ctx: PoolContext, op: Edit) -> None:
    row = repo.read_reflection(session, ctx.namespace, op.target_id, for_update=True)
    if row is None or row.status == "retired":
        return
    if row.version != op.base_version:  # someone edited it since: keep their wording, count the support
        note = op.note + " (not applied as an edit: the item changed meanwhile)"
        vote(session, ctx, row, op.evidence, "upvote", note, op.extra)
        return
    new_vote = not evidence_repo.cites_trajectory(session, row.pk, ctx.trajectory_pk)
    if new_vote:
        evidence_repo.create_evidence(session, row.pk, [op.evidence])
        evidence_repo.update_evidence_stats(session, [row.pk])
    importance = _importance(session, row)
    content = _with_extra({**row.content, **op.changes, "importance": importance}, op.extra)
    note = f"{op.note.rstrip('.')}; importance now {importance}"
    repo.update_reflection(session, row, content=content, text=op.text, actor=ctx.actor, note=note)
    write_vectors(session, row, ctx.model, {"state": op.vector}, {"state": op.text})
    settle_status(session, ctx, row, importance, f"edited with attempt {ctx.trajectory_id}")


def vote(
    session: Session,
    ctx: PoolContext,
    row: Reflection,
    evidence: evidence_repo.EvidenceIn,
    action: str,
    note: str,
    extra: list[dict[str, Any]] | None = None,
) -> None:
    """Count one attempt's vote on an item: only once per attempt, never on a
    retired item (an operator's or the votes' retirement stands)."""
    if row.status == "retired" or evidence_repo.cites_trajectory(session, row.pk, evidence.trajectory_pk):
        return
    evidence_repo.create_evidence(session, row.pk, [evidence])
    evidence_repo.update_evidence_stats(session, [row.pk])
    importance = _importance(session, row)
    row.content = _with_extra({**row.content, "importance": importance}, extra)
    repo.update_reflection_status(
        session,
        row,
        row.status,
        action=action,
        actor=ctx.actor,
        note=f"{note.rstrip('.')}; importance now {importance}",
    )
    settle_status(session, ctx, row, importance, note)


def settle_status(session: Session, ctx: PoolContext, row: Reflection, importance: int, why: str) -> None:
    """Retire at importance 0; activate a candidate at `activation_importance` when
    the namespace activates on evidence."""
    if importance <= 0 and row.status != "retired":
        repo.update_reflection_status(
            session, row, "retired", action="retire", actor=ctx.actor, note=f"importance fell to {importance}: {why}"
        )
    elif (
        row.status == "candidate"
        and ctx.settings.activation == "evidence"
        and importance >= ctx.settings.activation_importance
    ):
        repo.update_reflection_status(
            session,
            row,
            "active",
            action="activate",
            actor=ctx.actor,
            note=f"importance reached {importance} (activation_importance {ctx.settings.activation_importance})",
        )


def _importance(session: Session, row: Reflection) -> int:
    return llm_pool.importances(session, [row.pk])[row.pk]


def _with_extra(content: dict[str, Any], extra: list[dict[str, Any]] | None) -> dict[str, Any]:
    """Keep golden-negative analyses (one per attempt) on the item they landed in."""
    if not extra:
        return content
    kept = list(content.get("golden_negatives") or [])
    known = {g.get("trajectory_id") for g in kept}
    for e in extra:
        if e.get("trajectory_id") not in known:
            kept.append(e)
            known.add(e.get("trajectory_id"))
    return {**content, "golden_negatives": kept[-MAX_GOLDEN_NEGATIVES:]}
