"""Retrieval's own reads: the candidates a retrieve ranks (the reflections among
the index hits that pass every filter, with their vectors, live or as a snapshot
pinned them) and the trajectories their evidence cites, which the leakage guards
and citation filters check."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import numpy as np
import orjson
from sqlalchemy import Select, Text, and_, bindparam, cast, exists, null, select
from sqlalchemy.orm import Session

from store.database import one_of
from store.lexical import keys_from_blob, text_keys
from store.models import (
    Embedding,
    LexicalText,
    Reflection,
    ReflectionEvidence,
    SnapshotEmbedding,
    SnapshotEvidence,
    SnapshotReflection,
    Trajectory,
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
    stored_keys: bytes | None = None  # that text's feature keys as stored (store.lexical.keys_blob)
    # hashes of every internal-state text its evidence was seen with (a merged
    # exemplar's occurrences), beside text_hashes["internal"] (its first one's)
    internal_hashes: frozenset[str] = frozenset()
    # `lexical_keys()`, made once: a batch's rows are shared by its requests
    _keys: np.ndarray | None = field(default=None, repr=False, compare=False)

    @property
    def content(self) -> dict[str, Any]:
        return orjson.loads(self.content_json)

    def lexical_keys(self) -> np.ndarray | None:
        """The lexical text's feature keys: as stored, else made from the text (a
        snapshot's rows, which keep the text only; a row older than migration 0019)."""
        if self._keys is None:
            if self.stored_keys is not None:
                self._keys = keys_from_blob(self.stored_keys)
            elif self.lexical_text is not None:
                self._keys = text_keys(self.lexical_text)
        return self._keys


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
        session.get_bind().dialect.name == "postgresql",
        snapshot_pk is not None,
        f.environment is not None,
        f.as_of is not None,
        f.agent is not None,
        f.policy_version is not None,
        bool(f.exclude_task_hashes),
        bool(f.exclude_trajectory_ids),
    )
    out: dict[int, CandidateRow] = {}
    for *columns, fld, blob, digest, lexical, keys, internal in session.connection().execute(stmt, params):
        row = out.get(columns[0])
        if row is None:
            # JSON text parsed once per candidate, not by the driver for each field's row
            hashes = frozenset(orjson.loads(internal) or ()) if internal else frozenset()
            row = out[columns[0]] = CandidateRow(
                *columns, lexical_text=lexical, stored_keys=keys, internal_hashes=hashes
            )
        row.vectors[fld] = np.frombuffer(blob, dtype="<f4")
        row.text_hashes[fld] = digest
    return list(out.values())


@functools.cache
def _candidate_statement(
    postgres: bool,
    pinned: bool,
    environment: bool,
    as_of: bool,
    agent: bool,
    policy_version: bool,
    exclude_tasks: bool,
    exclude_trajectories: bool,
) -> Select[Any]:
    """`list_candidates`' query for one engine and combination of filters (which are
    given), every value a bound parameter named as in its `params`; a list is bound
    as one parameter on PostgreSQL (`store.database.one_of`)."""
    r: Any
    if not pinned:
        r, emb, lexical = Reflection, Embedding, LexicalText
        stmt = (
            select(
                *_columns(r),
                emb.field,
                emb.vector,
                emb.text_hash,
                lexical.text,
                lexical.keys,
                cast(r.internal_hashes, Text),
            )
            .join(emb, and_(emb.reflection_pk == r.pk, emb.model == bindparam("model")))
            .outerjoin(LexicalText, LexicalText.reflection_pk == r.pk)
        )
        t: Any = Trajectory
        cited_by = _cited_by
        mine: tuple[Any, ...] = (Trajectory.namespace == bindparam("namespace"),)
    else:
        r, emb = SnapshotReflection, SnapshotEmbedding
        internal = cast(r.internal_hashes, Text)
        # a snapshot keeps the lexical text, not its keys
        keys = null().label("keys")
        stmt = select(*_columns(r), emb.field, emb.vector, emb.text_hash, r.lexical_text, keys, internal).join(
            emb,
            and_(emb.snapshot_pk == r.snapshot_pk, emb.reflection_pk == r.pk, emb.model == bindparam("model")),
        )
        stmt = stmt.where(r.snapshot_pk == bindparam("snapshot_pk"))
        t = SnapshotEvidence  # agent, policy_version, task_hash copied; trajectory id as trajectory_id
        cited_by = _pinned_cited_by
        mine = ()
    stmt = stmt.where(
        one_of(r.pk, "pks", postgres),
        r.namespace == bindparam("namespace"),
        one_of(r.kind, "kinds", postgres),
        one_of(r.status, "statuses", postgres),
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
        stmt = stmt.where(~cited_by(one_of(t.task_hash, "task_hashes", postgres)))
    if exclude_trajectories:
        tid = SnapshotEvidence.trajectory_id if pinned else Trajectory.id
        stmt = stmt.where(~cited_by(*mine, one_of(tid, "trajectory_ids", postgres)))
    return stmt
