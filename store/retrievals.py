"""Retrieval queries: candidate loading with filters and leakage guards, the
retrieval log, and outcome credit into reflection utility."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import numpy as np
import orjson
from sqlalchemy import Select, Text, and_, bindparam, case, cast, exists, func, insert, select, true, update
from sqlalchemy.orm import Session

from store.database import dialect_insert
from store.models import (
    Embedding,
    LexicalText,
    Namespace,
    Reflection,
    ReflectionEvidence,
    ReflectionServed,
    Retrieval,
    RetrievalHoldout,
    RetrievalItem,
    RetrievalOutcome,
    SnapshotEmbedding,
    SnapshotEvidence,
    SnapshotReflection,
    Trajectory,
    utcnow,
)


@dataclass(frozen=True)
class CandidateFilters:
    kinds: Sequence[str]
    statuses: Sequence[str]
    environment: str | None = None
    agent: str | None = None
    policy_version: str | None = None
    exclude_task_hashes: Sequence[str] = ()
    exclude_trajectory_ids: Sequence[str] = ()
    as_of: datetime | None = None

    @property
    def cites(self) -> bool:
        """Whether any filter looks at the citing trajectories."""
        return bool(self.agent or self.policy_version or self.exclude_task_hashes or self.exclude_trajectory_ids)

    def without_citations(self) -> CandidateFilters:
        return CandidateFilters(self.kinds, self.statuses, self.environment, as_of=self.as_of)

    @functools.cached_property
    def excluded_tasks(self) -> frozenset[str]:
        """`exclude_task_hashes` as a set, for `admits`' per-row checks."""
        return frozenset(self.exclude_task_hashes)

    @functools.cached_property
    def excluded_trajectories(self) -> frozenset[str]:
        """`exclude_trajectory_ids` as a set, for `admits`' per-row checks."""
        return frozenset(self.exclude_trajectory_ids)

    def admits(self, citations: Sequence[Citation]) -> bool:
        """The citation filters of `list_candidates`, on a candidate's citations
        (for rows fetched once for many requests)."""
        if self.agent is not None and not any(c.agent == self.agent for c in citations):
            return False
        if self.policy_version is not None and not any(c.policy_version == self.policy_version for c in citations):
            return False
        tasks, trajectories = self.excluded_tasks, self.excluded_trajectories
        if tasks and any(c.task_hash in tasks for c in citations):
            return False
        return not (trajectories and any(c.trajectory_id in trajectories for c in citations))


@dataclass(frozen=True)
class Citation:
    """A trajectory a reflection's evidence comes from, as the filters see it."""

    trajectory_id: str
    task_hash: str
    agent: str | None
    policy_version: str | None


def list_citations(
    session: Session, namespace: str, pks: Sequence[int], snapshot_pk: int | None = None
) -> dict[int, list[Citation]]:
    """pk -> the trajectories its evidence cites (live, or in a snapshot)."""
    out: dict[int, list[Citation]] = {pk: [] for pk in pks}
    if not pks:
        return out
    if snapshot_pk is None:
        e, t = ReflectionEvidence, Trajectory
        stmt = (
            select(e.reflection_pk, t.id, t.task_hash, t.agent, t.policy_version)
            .join(t, t.pk == e.trajectory_pk)
            .where(e.reflection_pk.in_(list(pks)), t.namespace == namespace)
        )
    else:
        p = SnapshotEvidence
        stmt = select(p.reflection_pk, p.trajectory_id, p.task_hash, p.agent, p.policy_version).where(
            p.snapshot_pk == snapshot_pk, p.reflection_pk.in_(list(pks))
        )
    for pk, *fields in session.execute(stmt):
        out[pk].append(Citation(*fields))
    return out


def _cited_by(*conditions: Any) -> Any:
    """EXISTS: the reflection has evidence from a trajectory matching the conditions."""
    return exists().where(
        ReflectionEvidence.reflection_pk == Reflection.pk,
        Trajectory.pk == ReflectionEvidence.trajectory_pk,
        *conditions,
    )


@dataclass
class CandidateRow:
    """A candidate with what ranking needs and what serving shows. `content` stays
    JSON text until asked for: most candidates are never served."""

    pk: int
    kind: str
    successes: int
    failures: int
    uses: int
    updated_at: datetime
    id: str
    status: str
    version: int
    content_json: str
    text: str
    environment: str | None
    created_at: datetime
    evidence_count: int
    evidence_successes: int
    evidence_failures: int
    evidence_value: float | None
    vectors: dict[str, np.ndarray] = field(default_factory=dict)
    text_hashes: dict[str, str | None] = field(default_factory=dict)  # field -> hash of the text encoded
    lexical_text: str | None = None  # its state text in the lexical index
    # hashes of every internal-state text its evidence was seen with (a merged
    # exemplar's occurrences), beside text_hashes["internal"] (its first one's)
    internal_hashes: frozenset[str] = frozenset()

    @property
    def content(self) -> dict[str, Any]:
        return orjson.loads(self.content_json)


_CANDIDATE_FIELDS = (
    "pk",
    "kind",
    "successes",
    "failures",
    "uses",
    "updated_at",
    "id",
    "status",
    "version",
    "content",
    "text",
    "environment",
    "created_at",
    "evidence_count",
    "evidence_successes",
    "evidence_failures",
    "evidence_value",
)


def _columns(r: Any) -> list[Any]:
    """The CandidateRow columns of a reflection table (live or pinned; the same names)."""
    return [cast(r.content, Text) if name == "content" else getattr(r, name) for name in _CANDIDATE_FIELDS]


def _pinned_cited_by(*conditions: Any) -> Any:
    """EXISTS over a snapshot's evidence copy (it carries the citing trajectory's fields)."""
    e = SnapshotEvidence
    return exists().where(
        e.snapshot_pk == bindparam("snapshot_pk"), e.reflection_pk == SnapshotReflection.pk, *conditions
    )


def list_candidates(
    session: Session,
    namespace: str,
    pks: Sequence[int],
    f: CandidateFilters,
    model: str,
    snapshot_pk: int | None = None,
) -> list[CandidateRow]:
    """The reflections among `pks` that pass every filter, with their vectors of
    `model`, in one query (a candidate comes back once per stored field): live, or
    as they were in a snapshot. Plain rows, not ORM objects: building those was a
    sixth of a retrieve's CPU. The query is built once per combination of filters
    (`_candidate_statement`) and runs on the session's connection: building it and
    its cache key, and the ORM's execution path, cost more than running it."""
    if not pks:
        return []
    params: dict[str, Any] = {
        "pks": list(pks),
        "namespace": namespace,
        "kinds": list(f.kinds),
        "statuses": list(f.statuses),
        "model": model,
    }
    if snapshot_pk is not None:
        params["snapshot_pk"] = snapshot_pk
    if f.environment is not None:
        params["environment"] = f.environment
    if f.as_of is not None:
        params["as_of"] = f.as_of
    if f.agent is not None:
        params["agent"] = f.agent
    if f.policy_version is not None:
        params["policy_version"] = f.policy_version
    if f.exclude_task_hashes:
        params["task_hashes"] = list(f.exclude_task_hashes)
    if f.exclude_trajectory_ids:
        params["trajectory_ids"] = list(f.exclude_trajectory_ids)
    stmt = _candidate_statement(
        snapshot_pk is not None,
        f.environment is not None,
        f.as_of is not None,
        f.agent is not None,
        f.policy_version is not None,
        bool(f.exclude_task_hashes),
        bool(f.exclude_trajectory_ids),
    )
    out: dict[int, CandidateRow] = {}
    for *columns, fld, blob, digest, lexical, internal in session.connection().execute(stmt, params):
        row = out.get(columns[0])
        if row is None:
            # JSON text parsed once per candidate, not by the driver for each field's row
            hashes = frozenset(orjson.loads(internal) or ()) if internal else frozenset()
            row = out[columns[0]] = CandidateRow(*columns, lexical_text=lexical, internal_hashes=hashes)
        row.vectors[fld] = np.frombuffer(blob, dtype="<f4")
        row.text_hashes[fld] = digest
    return list(out.values())


@functools.cache
def _candidate_statement(
    pinned: bool,
    environment: bool,
    as_of: bool,
    agent: bool,
    policy_version: bool,
    exclude_tasks: bool,
    exclude_trajectories: bool,
) -> Select[Any]:
    """`list_candidates`' query for one combination of filters (which are given),
    every value a bound parameter named as in its `params`."""
    r: Any
    if not pinned:
        r, emb, lexical_text = Reflection, Embedding, LexicalText.text
        stmt = (
            select(*_columns(r), emb.field, emb.vector, emb.text_hash, lexical_text, cast(r.internal_hashes, Text))
            .join(emb, and_(emb.reflection_pk == r.pk, emb.model == bindparam("model")))
            .outerjoin(LexicalText, LexicalText.reflection_pk == r.pk)
        )
        t: Any = Trajectory
        cited_by = _cited_by
        mine: tuple[Any, ...] = (Trajectory.namespace == bindparam("namespace"),)
    else:
        r, emb = SnapshotReflection, SnapshotEmbedding
        internal = cast(r.internal_hashes, Text)
        stmt = select(*_columns(r), emb.field, emb.vector, emb.text_hash, r.lexical_text, internal).join(
            emb,
            and_(emb.snapshot_pk == r.snapshot_pk, emb.reflection_pk == r.pk, emb.model == bindparam("model")),
        )
        stmt = stmt.where(r.snapshot_pk == bindparam("snapshot_pk"))
        t = SnapshotEvidence  # agent, policy_version, task_hash copied; trajectory id as trajectory_id
        cited_by = _pinned_cited_by
        mine = ()
    stmt = stmt.where(
        r.pk.in_(bindparam("pks", expanding=True)),
        r.namespace == bindparam("namespace"),
        r.kind.in_(bindparam("kinds", expanding=True)),
        r.status.in_(bindparam("statuses", expanding=True)),
    )
    if environment:
        stmt = stmt.where(r.environment == bindparam("environment"))
    if as_of:
        stmt = stmt.where(r.created_at <= bindparam("as_of"))
    if agent:
        stmt = stmt.where(cited_by(t.agent == bindparam("agent")))
    if policy_version:
        stmt = stmt.where(cited_by(t.policy_version == bindparam("policy_version")))
    if exclude_tasks:
        stmt = stmt.where(~cited_by(t.task_hash.in_(bindparam("task_hashes", expanding=True))))
    if exclude_trajectories:
        tid = SnapshotEvidence.trajectory_id if pinned else Trajectory.id
        stmt = stmt.where(~cited_by(*mine, tid.in_(bindparam("trajectory_ids", expanding=True))))
    return stmt


def create_retrieval(
    session: Session,
    *,
    id: str,
    namespace: str,
    query: dict[str, Any],
    trajectory_id: str | None,
    items: Sequence[tuple[int, int, float, float]],
    latency_ms: float | None = None,
    holdouts: Sequence[tuple[int, bool, str]] = (),
    context: str | None = None,
) -> None:
    """Log a retrieval, what it served and the context block it rendered (if any):
    items are (reflection pk, rank, score, similarity), holdouts the items put to the
    holdout draw (reflection pk, withheld, unit).
    Core inserts built once, on the session's connection: the ORM unit of work cost a
    fifth of a retrieve's CPU here, building the statements and going through the
    session most of what was left."""
    conn = session.connection()
    conn.execute(
        _INSERT_RETRIEVAL,
        {
            "id": id,
            "namespace": namespace,
            "query": query,
            "trajectory_id": trajectory_id,
            "created_at": utcnow(),
            "latency_ms": latency_ms,
            "context": context,
        },
    )
    if items:
        conn.execute(
            _INSERT_RETRIEVAL_ITEM,
            [
                {"retrieval_id": id, "reflection_pk": pk, "rank": rank, "score": score, "similarity": sim}
                for pk, rank, score, sim in items
            ],
        )
    if holdouts:
        conn.execute(
            _INSERT_HOLDOUT,
            [
                {"retrieval_id": id, "reflection_pk": pk, "withheld": withheld, "unit": unit}
                for pk, withheld, unit in holdouts
            ],
        )
    if items:  # last: the rows it locks are held only until the commit
        _count_served(session, sorted({pk for pk, *_ in items}))


def _count_served(session: Session, reflection_pks: list[int]) -> None:
    """One more serving for each (one statement). In key order, so two retrieves
    serving the same items lock their rows in the same order and never deadlock; an
    item served by most retrieves is one row every logged retrieve updates, so on
    PostgreSQL those retrieves' log writes commit one after another."""
    rows = [{"reflection_pk": pk, "served": 1} for pk in reflection_pks]
    stmt = dialect_insert(session)(ReflectionServed).values(rows)
    session.execute(
        stmt.on_conflict_do_update(
            index_elements=["reflection_pk"], set_={"served": ReflectionServed.served + stmt.excluded.served}
        )
    )


_INSERT_RETRIEVAL = insert(Retrieval.__table__)
_INSERT_RETRIEVAL_ITEM = insert(RetrievalItem.__table__)
_INSERT_HOLDOUT = insert(RetrievalHoldout.__table__)


@dataclass(frozen=True)
class HoldoutCounts:
    """One item's holdout arms: units (episodes, or lone retrievals) with a
    success/failure outcome, and how many of them succeeded."""

    served_units: int = 0
    served_successes: int = 0
    withheld_units: int = 0
    withheld_successes: int = 0


def list_holdout_counts(
    session: Session, namespace: str, reflection_pks: Sequence[int] | None = None
) -> dict[int, HoldoutCounts]:
    """Per reflection pk (those given, or every one of the namespace put to the draw):
    its holdout arms. A unit is counted once per arm, successful when any of its
    retrievals' outcomes is (an episode's retrievals share the episode's outcome)."""
    h, o = RetrievalHoldout, RetrievalOutcome
    won = func.max(case((o.success.is_(True), 1), else_=0))
    per_unit = (
        select(h.reflection_pk, h.withheld, h.unit, won.label("won"))
        .join(o, o.retrieval_id == h.retrieval_id)
        .join(Reflection, Reflection.pk == h.reflection_pk)
        .where(Reflection.namespace == namespace, o.success.is_not(None))
        .group_by(h.reflection_pk, h.withheld, h.unit)
    )
    if reflection_pks is not None:
        per_unit = per_unit.where(h.reflection_pk.in_(list(reflection_pks)))
    units = per_unit.subquery()
    stmt = select(units.c.reflection_pk, units.c.withheld, func.count(), func.sum(units.c.won)).group_by(
        units.c.reflection_pk, units.c.withheld
    )
    arms: dict[int, dict[str, int]] = {}
    for pk, was_withheld, n, wins in session.execute(stmt):
        arm = arms.setdefault(pk, {})
        prefix = "withheld" if was_withheld else "served"
        arm[f"{prefix}_units"], arm[f"{prefix}_successes"] = int(n), int(wins or 0)
    return {pk: HoldoutCounts(**arm) for pk, arm in arms.items()}


def read_retrieval(session: Session, namespace: str, id: str) -> Retrieval | None:
    row = session.get(Retrieval, id)
    return row if row is not None and row.namespace == namespace else None


def read_served_ids(session: Session, retrieval_id: str) -> set[str]:
    """The reflection ids a retrieval served (that still exist)."""
    stmt = (
        select(Reflection.id)
        .join(RetrievalItem, RetrievalItem.reflection_pk == Reflection.pk)
        .where(RetrievalItem.retrieval_id == retrieval_id)
    )
    return set(session.scalars(stmt))


def read_outcome(session: Session, retrieval_id: str) -> RetrievalOutcome | None:
    return session.get(RetrievalOutcome, retrieval_id)


def create_outcome(
    session: Session,
    namespace: str,
    retrieval_id: str,
    *,
    success: bool | None,
    reward: float | None,
    trajectory_id: str | None,
    details: dict[str, Any] | None,
    item_ids: Sequence[str] | None = None,
    max_rank: int | None = None,
    credit: bool = True,
) -> int:
    """Store the outcome and credit the items the retrieval served: all of them, or
    only `item_ids` (reflection ids the caller checked were served), or only those
    served at a rank below `max_rank`. Counters are updated in SQL, so concurrent
    credits never lose an increment. Returns the number of items credited. The
    caller checks there is no outcome yet. `credit=False` (a frozen namespace)
    records the outcome and changes no counter."""
    session.add(
        RetrievalOutcome(
            retrieval_id=retrieval_id,
            item_ids=None if item_ids is None else list(item_ids),
            success=success,
            reward=reward,
            trajectory_id=trajectory_id,
            details=details,
            created_at=utcnow(),
        )
    )
    mine = RetrievalItem.retrieval_id == retrieval_id
    if not credit:
        session.flush()
        session.execute(update(RetrievalItem).where(mine).values(credited=False))
        return 0
    served = select(RetrievalItem.reflection_pk).where(mine)
    chosen: Any = true()  # which served items the outcome credits
    if max_rank is not None:
        served = served.where(RetrievalItem.rank < max_rank)
        chosen = RetrievalItem.rank < max_rank
    if item_ids is not None:
        named = select(Reflection.pk).where(Reflection.namespace == namespace, Reflection.id.in_(list(item_ids)))
        chosen = and_(chosen, RetrievalItem.reflection_pk.in_(named))
    # Recorded per item, beside the counters: which items an outcome credits depends
    # on item_ids, credit.unnamed_top_k and the freeze at this moment (docs/ui.md).
    session.execute(update(RetrievalItem).where(mine).values(credited=case((chosen, True), else_=False)))
    values: dict[str, Any] = {"uses": Reflection.uses + 1}
    if success is True:
        values["successes"] = Reflection.successes + 1
    elif success is False:
        values["failures"] = Reflection.failures + 1
    if reward is not None:
        values["reward_sum"] = Reflection.reward_sum + reward
    target = Reflection.pk.in_(served)
    if item_ids is not None:
        target = and_(target, Reflection.id.in_(list(item_ids)))
    result = session.execute(update(Reflection).where(target).values(**values))
    if success is not None:
        session.execute(
            update(Namespace)
            .where(Namespace.name == namespace)
            .values(
                outcome_total=Namespace.outcome_total + 1,
                outcome_successes=Namespace.outcome_successes + (1 if success else 0),
            )
        )
    return result.rowcount or 0


def list_open_retrievals(session: Session, namespace: str, trajectory_id: str, extra_ids: Sequence[str]) -> list[str]:
    """Retrievals linked to an episode (by trajectory_id or listed in its
    retrieval_ids) that have no outcome yet."""
    linked = Retrieval.trajectory_id == trajectory_id
    if extra_ids:
        linked = linked | Retrieval.id.in_(list(extra_ids))
    stmt = select(Retrieval.id).where(
        Retrieval.namespace == namespace,
        linked,
        ~exists().where(RetrievalOutcome.retrieval_id == Retrieval.id),
    )
    return list(session.scalars(stmt))
