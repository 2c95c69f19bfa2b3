"""ORM models: the SQL schema that is the source of truth.

Every table is created by Alembic migrations only (see migrations/); a test checks
that the migrated schema equals this metadata on SQLite and PostgreSQL.

Rows are scoped by namespace. Public ids are client-visible strings unique within a
namespace; integer surrogate keys (`pk`) join tables and give a stable insert order
for cursors.
"""

from __future__ import annotations

from datetime import UTC, date, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Date,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship
from sqlalchemy.types import TypeDecorator

NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

# JSONB on PostgreSQL (indexable, compact), plain JSON text elsewhere.
JSONType = JSON().with_variant(JSONB(), "postgresql")
# SQLite only auto-increments INTEGER PRIMARY KEY, so BigInteger keys are INTEGER there.
BigPK = BigInteger().with_variant(Integer(), "sqlite")


# SQLite reuses the highest rowid after a delete unless AUTOINCREMENT is asked for;
# ids here must never come back (index entries, job ids in tokens, cursors).
NO_REUSE: dict[str, Any] = {"sqlite_autoincrement": True}


def utcnow() -> datetime:
    return datetime.now(UTC)


class UTCDateTime(TypeDecorator[datetime]):
    """Timezone-aware UTC datetimes on both engines (SQLite drops tzinfo on its own)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Any) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given to a UTC column")
        return value.astimezone(UTC)

    def process_result_value(self, value: datetime | None, dialect: Any) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)


class Namespace(Base):
    __tablename__ = "namespaces"

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    settings: Mapped[dict[str, Any]] = mapped_column(JSONType, default=dict)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    # Running totals of retrieval outcomes that carry a success value: the utility
    # baseline every retrieve reads, kept here so it costs one row, not a scan.
    outcome_successes: Mapped[int] = mapped_column(BigInteger, default=0, server_default=text("0"))
    outcome_total: Mapped[int] = mapped_column(BigInteger, default=0, server_default=text("0"))
    # Frozen for evaluation: ingest goes on, memory does not change (no reflection
    # jobs run, no edits, no utility credit) until it is thawed.
    frozen: Mapped[bool] = mapped_column(Boolean, default=False, server_default=text("false"))
    frozen_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    # What its own near-duplicate states chose as the lexical weight, and how
    # (reflectors/lexical_calibration.py); ranks only a namespace set to `calibrated`.
    lexical_weight_calibrated: Mapped[float | None] = mapped_column(Float)
    lexical_calibration: Mapped[dict[str, Any] | None] = mapped_column(JSONType)


class ApiKey(Base):
    """An API key. Only a SHA-256 of the secret is stored: keys are 256-bit random
    tokens, so a fast hash is as safe as a slow one and keeps auth off the hot path."""

    __tablename__ = "api_keys"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    key_hash: Mapped[str] = mapped_column(String(64), unique=True)
    role: Mapped[str] = mapped_column(String(16))
    namespaces: Mapped[list[str]] = mapped_column(JSONType)  # ["*"] means every namespace
    description: Mapped[str | None] = mapped_column(String(200))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    revoked_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    expires_at: Mapped[datetime | None] = mapped_column(UTCDateTime)  # a rotated key's grace period ends
    # Refreshed at most once a minute per key (store.keys.update_key_used): what an
    # operator needs to find a dead key, without a write on every request.
    last_used_at: Mapped[datetime | None] = mapped_column(UTCDateTime)


class KeyBucket(Base):
    """A caller's request-rate token bucket shared by every API process (the per-key
    limit, service/limits/per_key.py). `identity` is the SHA-256 of the credential,
    never the secret; `updated` is wall-clock seconds (the processes' clocks)."""

    __tablename__ = "key_buckets"

    identity: Mapped[str] = mapped_column(String(64), primary_key=True)
    tokens: Mapped[float] = mapped_column(Float)
    updated: Mapped[float] = mapped_column(Float, index=True)


class Trajectory(Base):
    __tablename__ = "trajectories"
    __table_args__ = (
        UniqueConstraint("namespace", "id"),
        Index("ix_trajectories_ns_env", "namespace", "environment", "pk"),
        Index("ix_trajectories_ns_task", "namespace", "task_hash", "pk"),
        Index("ix_trajectories_ns_group", "namespace", "group_id"),
        Index("ix_trajectories_ns_parent", "namespace", "parent_trajectory_id"),
        Index("ix_trajectories_ns_created", "namespace", "created_at", "success"),  # the overview, per day
        NO_REUSE,
    )

    pk: Mapped[int] = mapped_column(BigPK, primary_key=True, autoincrement=True)
    namespace: Mapped[str] = mapped_column(ForeignKey("namespaces.name", ondelete="CASCADE"))
    id: Mapped[str] = mapped_column(String(128))
    task: Mapped[str] = mapped_column(Text)
    task_hash: Mapped[str] = mapped_column(String(16))  # for equality filters on long task texts
    environment: Mapped[str | None] = mapped_column(String(200))
    agent: Mapped[str | None] = mapped_column(String(200))
    policy_version: Mapped[str | None] = mapped_column(String(200))
    group_id: Mapped[str | None] = mapped_column(String(128))
    # A retry of an earlier attempt at the same task (Re-TRAC, Experiential RL):
    # the attempt it follows and its number (1 = first).
    parent_trajectory_id: Mapped[str | None] = mapped_column(String(128))
    attempt: Mapped[int | None] = mapped_column(Integer)
    metadata_: Mapped[dict[str, Any] | None] = mapped_column("metadata", JSONType)
    retrieval_ids: Mapped[list[str] | None] = mapped_column(JSONType)
    status: Mapped[str] = mapped_column(String(8), default="open")  # open | closed
    success: Mapped[bool | None] = mapped_column(Boolean)
    reward: Mapped[float | None] = mapped_column(Float)
    failure_reason: Mapped[str | None] = mapped_column(Text)
    outcome_details: Mapped[dict[str, Any] | None] = mapped_column(JSONType)
    step_count: Mapped[int] = mapped_column(Integer, default=0)
    # SHA-256 of the canonical create request: an idempotent replay must match it.
    request_hash: Mapped[str] = mapped_column(String(64))
    created_by: Mapped[str | None] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    closed_at: Mapped[datetime | None] = mapped_column(UTCDateTime)

    steps: Mapped[list[Step]] = relationship(
        back_populates="trajectory", order_by="Step.index", lazy="raise", passive_deletes=True
    )


class Step(Base):
    __tablename__ = "steps"
    __table_args__ = (UniqueConstraint("trajectory_pk", "index"), NO_REUSE)

    pk: Mapped[int] = mapped_column(BigPK, primary_key=True, autoincrement=True)
    trajectory_pk: Mapped[int] = mapped_column(ForeignKey("trajectories.pk", ondelete="CASCADE"))
    index: Mapped[int] = mapped_column(Integer)
    observation: Mapped[str] = mapped_column(Text)
    state_data: Mapped[Any | None] = mapped_column(JSONType)
    internal_state: Mapped[str | None] = mapped_column(Text)
    action: Mapped[Any] = mapped_column(JSONType)  # a string or a tool-call object
    result: Mapped[str | None] = mapped_column(Text)
    error: Mapped[str | None] = mapped_column(Text)
    reward: Mapped[float | None] = mapped_column(Float)
    done: Mapped[bool] = mapped_column(Boolean, default=False)
    truncated: Mapped[bool] = mapped_column(Boolean, default=False)
    caused_failure: Mapped[bool] = mapped_column(Boolean, default=False)
    # The policy that acted at this step (null: the trajectory's `policy_version`
    # applies), and what the inference engine reported for the step's action tokens:
    # their log-probs (each <= 0) and, optionally, their token ids (as many).
    policy_version: Mapped[str | None] = mapped_column(String(200))
    rollout_logprobs: Mapped[list[float] | None] = mapped_column(JSONType)
    rollout_token_ids: Mapped[list[int] | None] = mapped_column(JSONType)
    metadata_: Mapped[dict[str, Any] | None] = mapped_column("metadata", JSONType)
    # SHA-256 of the canonical step body: a retried append must match what is stored.
    content_hash: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)

    trajectory: Mapped[Trajectory] = relationship(back_populates="steps", lazy="raise")


class Reflection(Base):
    """A distilled memory item (exemplar, heuristic, skill, rubric, evidence card)."""

    __tablename__ = "reflections"
    __table_args__ = (
        UniqueConstraint("namespace", "id"),
        Index("ix_reflections_ns_kind_status", "namespace", "kind", "status", "pk"),
        Index("ix_reflections_ns_pk", "namespace", "pk"),  # newest first in one namespace, unfiltered
        # The operator's counts from the index alone (the review queue and its count, the
        # Learning page's per-reflector numbers, reflections by kind and status): the rows
        # are wide (content, text), and scanning 100k of them took most of those pages.
        Index(
            "ix_reflections_ns_counters",
            "namespace",
            "reflector",  # before status: per-reflector groups come out in order, unsorted
            "status",
            "kind",
            "uses",
            "reviewed_uses",
            "successes",
            "failures",
            "evidence_count",
            "pk",
        ),
        NO_REUSE,
    )

    pk: Mapped[int] = mapped_column(BigPK, primary_key=True, autoincrement=True)
    namespace: Mapped[str] = mapped_column(ForeignKey("namespaces.name", ondelete="CASCADE"))
    id: Mapped[str] = mapped_column(String(128))
    kind: Mapped[str] = mapped_column(String(16))
    status: Mapped[str] = mapped_column(String(12), default="candidate")  # candidate|active|retired
    version: Mapped[int] = mapped_column(Integer, default=1)
    content: Mapped[dict[str, Any]] = mapped_column(JSONType)
    text: Mapped[str] = mapped_column(Text)
    environment: Mapped[str | None] = mapped_column(String(200))
    task: Mapped[str | None] = mapped_column(Text)
    reflector: Mapped[str] = mapped_column(String(100))
    reflector_version: Mapped[str] = mapped_column(String(40))
    model: Mapped[str | None] = mapped_column(String(200))
    # What the evidence says (aggregated from reflection_evidence, kept in step with it):
    # for a merged exemplar, how often the (state, action) was seen, credited with
    # success or failure, and its mean return-to-go.
    evidence_count: Mapped[int] = mapped_column(Integer, default=0)
    evidence_successes: Mapped[int] = mapped_column(Integer, default=0)
    evidence_failures: Mapped[int] = mapped_column(Integer, default=0)
    evidence_value: Mapped[float | None] = mapped_column(Float)
    # The distinct `internal_hash`es of its evidence (None: none): a merged exemplar is
    # an exact match under any internal state it was seen with, not just the first.
    internal_hashes: Mapped[list[str] | None] = mapped_column(JSONType)
    # Utility: counts of served retrievals whose outcome was reported.
    uses: Mapped[int] = mapped_column(Integer, default=0)
    successes: Mapped[int] = mapped_column(Integer, default=0)
    failures: Mapped[int] = mapped_column(Integer, default=0)
    reward_sum: Mapped[float] = mapped_column(Float, default=0.0)
    # Dedup key of the job output that wrote it, so a re-run job does not duplicate it.
    source_key: Mapped[str | None] = mapped_column(String(200))
    # `uses` when an operator last kept it after review (the queue shows it again
    # only after new outcomes).
    reviewed_uses: Mapped[int | None] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)

    evidence: Mapped[list[ReflectionEvidence]] = relationship(lazy="raise", passive_deletes=True)


class ReflectionEvidence(Base):
    """Which trajectory (and step range) a reflection was distilled from.

    For a merged exemplar, each source step is one row, carrying what that step
    contributed (its credited success or failure and its return-to-go), so the
    merged statistics can be recomputed exactly when a source trajectory goes.
    """

    __tablename__ = "reflection_evidence"
    __table_args__ = (
        Index("ix_reflection_evidence_trajectory", "trajectory_pk"),
        UniqueConstraint("reflection_pk", "trajectory_pk", "step_start"),
        NO_REUSE,
    )

    pk: Mapped[int] = mapped_column(BigPK, primary_key=True, autoincrement=True)
    reflection_pk: Mapped[int] = mapped_column(ForeignKey("reflections.pk", ondelete="CASCADE"), index=True)
    trajectory_pk: Mapped[int] = mapped_column(ForeignKey("trajectories.pk", ondelete="CASCADE"))
    step_start: Mapped[int | None] = mapped_column(Integer)
    step_end: Mapped[int | None] = mapped_column(Integer)
    success: Mapped[bool | None] = mapped_column(Boolean)  # credited outcome; None = no credit
    value: Mapped[float | None] = mapped_column(Float)  # e.g. the step's return-to-go
    # text_hash of the cited step's internal-state text (exemplars; None: it has none,
    # or written before migration 0010 and not yet reindexed)
    internal_hash: Mapped[str | None] = mapped_column(String(32))


class ReflectionVersion(Base):
    """Audit history: every edit or status change of a reflection, who and when."""

    __tablename__ = "reflection_versions"
    __table_args__ = (Index("ix_reflection_versions_reflection", "reflection_pk", "pk"), NO_REUSE)

    pk: Mapped[int] = mapped_column(BigPK, primary_key=True, autoincrement=True)
    reflection_pk: Mapped[int] = mapped_column(ForeignKey("reflections.pk", ondelete="CASCADE"))
    version: Mapped[int] = mapped_column(Integer)
    action: Mapped[str] = mapped_column(String(16))  # create|edit|approve|retire|restore|merge
    status: Mapped[str] = mapped_column(String(12))
    content: Mapped[dict[str, Any]] = mapped_column(JSONType)
    actor: Mapped[str] = mapped_column(String(100))
    note: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class Embedding(Base):
    """A reflection's vector for one field ("state", "internal", "text"), so an index
    rebuild needs no re-encoding. Tied to the model that made it."""

    __tablename__ = "embeddings"
    __table_args__ = (
        UniqueConstraint("reflection_pk", "field", "model"),
        Index("ix_embeddings_ns_kind", "namespace", "kind", "field", "model"),
        Index("ix_embeddings_text_hash_model", "text_hash", "model"),  # reuse by text; never led by model
        NO_REUSE,
    )

    pk: Mapped[int] = mapped_column(BigPK, primary_key=True, autoincrement=True)
    reflection_pk: Mapped[int] = mapped_column(ForeignKey("reflections.pk", ondelete="CASCADE"))
    namespace: Mapped[str] = mapped_column(String(64))
    kind: Mapped[str] = mapped_column(String(16))
    field: Mapped[str] = mapped_column(String(16))
    model: Mapped[str] = mapped_column(String(200))
    dim: Mapped[int] = mapped_column(Integer)
    vector: Mapped[bytes] = mapped_column(LargeBinary)  # float32, little-endian, L2-normalised
    # domain.hashing.text_hash of the text encoded (None: not a text, e.g. a centroid,
    # or written before migration 0005 and not yet reindexed)
    text_hash: Mapped[str | None] = mapped_column(String(32))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class LexicalText(Base):
    """A reflection's state text for lexical search (store/lexical.py). The engine's
    own index over it lives outside the ORM: an FTS5 table on SQLite, a generated
    `tsvector` column with a GIN index on PostgreSQL (migration 0006)."""

    __tablename__ = "lexical_texts"
    __table_args__ = (Index("ix_lexical_texts_ns_kind", "namespace", "kind"),)

    reflection_pk: Mapped[int] = mapped_column(
        BigPK, ForeignKey("reflections.pk", ondelete="CASCADE"), primary_key=True, autoincrement=False
    )
    namespace: Mapped[str] = mapped_column(String(64))
    kind: Mapped[str] = mapped_column(String(16))
    text: Mapped[str] = mapped_column(Text)
    # the text's feature keys (store.lexical.text_keys, as keys_blob), read with a
    # candidate so that ranking never keys a stored text; NULL only for a row written
    # by code older than migration 0019 (ranking then keys the text)
    keys: Mapped[bytes | None] = mapped_column(LargeBinary, nullable=True)


class LexicalGeneration(Base):
    """How many times the lexical index has changed: moved by triggers on
    `lexical_texts` (migration 0021) in the writing transaction, read by a retrieve to
    reuse an earlier search's matches while it stands still (store.lexical.
    read_generation). SQLite: one row, scope '' (bm25's statistics span the whole
    index); PostgreSQL: one row per namespace (ts_rank scores each text by itself)."""

    __tablename__ = "lexical_generations"

    scope: Mapped[str] = mapped_column(String(64), primary_key=True)
    generation: Mapped[int] = mapped_column(BigInteger)


class IndexChange(Base):
    """The change feed the in-memory vector indexes catch up from.

    Writers append to it under a per-namespace lock (PostgreSQL advisory lock;
    SQLite's single writer), so within a namespace `seq` order is commit order and
    "everything after my watermark" never skips a late commit. No foreign key: a
    delete must outlive the row it deletes.
    """

    __tablename__ = "index_changes"
    __table_args__ = (Index("ix_index_changes_ns_seq", "namespace", "seq"), NO_REUSE)

    seq: Mapped[int] = mapped_column(BigPK, primary_key=True, autoincrement=True)
    namespace: Mapped[str] = mapped_column(String(64))
    kind: Mapped[str] = mapped_column(String(16))
    reflection_pk: Mapped[int] = mapped_column(BigInteger)
    op: Mapped[str] = mapped_column(String(8))  # upsert | delete
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class LLMTokenUsage(Base):
    """Tokens an LLM spent for a namespace on one UTC day: the shared count that
    every worker process checks before a call, so a daily budget holds however
    many workers run."""

    __tablename__ = "llm_token_usage"

    namespace: Mapped[str] = mapped_column(ForeignKey("namespaces.name", ondelete="CASCADE"), primary_key=True)
    day: Mapped[date] = mapped_column(Date, primary_key=True)
    tokens: Mapped[int] = mapped_column(BigInteger, default=0)
    calls: Mapped[int] = mapped_column(Integer, default=0)


class Job(Base):
    """A unit of derived work (index a closed trajectory, run a reflector, …).

    Inserted in the same transaction as the data that triggers it; claimed with a
    lease that expires, so a killed worker's job runs again.
    """

    __tablename__ = "jobs"
    __table_args__ = (
        # A dedup key is unique among queued jobs: the same work is never waiting
        # twice, yet it can be queued again while (or after) it runs, so work that
        # arrives during a run is not lost ("coalescing" jobs, e.g. rebuild a task's
        # evidence card). "Once" jobs check for any job at all (store/jobs.py).
        Index(
            "uq_jobs_dedup_queued",
            "dedup_key",
            unique=True,
            sqlite_where=text("status = 'queued'"),  # == store.jobs.QUEUED
            postgresql_where=text("status = 'queued'"),
        ),
        Index("ix_jobs_dedup_key", "dedup_key"),
        Index("ix_jobs_claim", "status", "run_after"),
        Index("ix_jobs_ns_status", "namespace", "status", "id"),
        NO_REUSE,
    )

    id: Mapped[int] = mapped_column(BigPK, primary_key=True, autoincrement=True)
    namespace: Mapped[str] = mapped_column(ForeignKey("namespaces.name", ondelete="CASCADE"))
    kind: Mapped[str] = mapped_column(String(64))
    payload: Mapped[dict[str, Any]] = mapped_column(JSONType)
    # Unique while the job is wanted; the same work is never queued twice.
    dedup_key: Mapped[str | None] = mapped_column(String(300))
    status: Mapped[str] = mapped_column(String(10), default="queued")  # queued|running|done|failed
    priority: Mapped[int] = mapped_column(Integer, default=100)  # lower runs first
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    max_attempts: Mapped[int] = mapped_column(Integer, default=5)
    run_after: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    lease_expires_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    locked_by: Mapped[str | None] = mapped_column(String(100))
    last_error: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime)


class Retrieval(Base):
    """One logged retrieval: the query and what was served, for outcome credit."""

    __tablename__ = "retrievals"
    __table_args__ = (
        # latency_ms: the overview's volume and latency per day read the index alone.
        Index("ix_retrievals_ns_created", "namespace", "created_at", "latency_ms"),
        Index("ix_retrievals_ns_trajectory", "namespace", "trajectory_id", "created_at"),
    )

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    namespace: Mapped[str] = mapped_column(ForeignKey("namespaces.name", ondelete="CASCADE"))
    query: Mapped[dict[str, Any]] = mapped_column(JSONType)
    trajectory_id: Mapped[str | None] = mapped_column(String(128))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    # Server time to answer (ms, the consistency wait left out; a batch's whole time).
    latency_ms: Mapped[float | None] = mapped_column(Float)
    # The rendered context block as served (null: no render asked). Kept, not
    # re-rendered: edits and merges change the items' content after serving.
    # Deferred: the log's lists never show it, and it is up to render.max_chars long.
    context: Mapped[str | None] = mapped_column(Text, deferred=True)

    items: Mapped[list[RetrievalItem]] = relationship(lazy="raise", passive_deletes=True)


class RetrievalItem(Base):
    __tablename__ = "retrieval_items"
    __table_args__ = (UniqueConstraint("retrieval_id", "reflection_pk"), NO_REUSE)

    pk: Mapped[int] = mapped_column(BigPK, primary_key=True, autoincrement=True)
    retrieval_id: Mapped[str] = mapped_column(ForeignKey("retrievals.id", ondelete="CASCADE"))
    reflection_pk: Mapped[int] = mapped_column(ForeignKey("reflections.pk", ondelete="CASCADE"), index=True)
    rank: Mapped[int] = mapped_column(Integer)
    score: Mapped[float] = mapped_column(Float)
    similarity: Mapped[float] = mapped_column(Float)
    # Whether the retrieval's outcome credited this item (null: no outcome yet, or
    # reported before migration 0013). Recorded: the rule depends on settings then.
    credited: Mapped[bool | None] = mapped_column(Boolean)


class ReflectionServed(Base):
    """How many logged retrievals served a reflection: a rollup the retrieval log's
    write keeps (store.retrievals.create_retrieval), so per-reflector numbers need not
    count the log's items (a million rows at bench size). A table of its own, not a
    reflections column: a retrieve never waits on the row lock an outcome or a
    reflector's merge holds on the reflection."""

    __tablename__ = "reflection_served"

    reflection_pk: Mapped[int] = mapped_column(ForeignKey("reflections.pk", ondelete="CASCADE"), primary_key=True)
    served: Mapped[int] = mapped_column(Integer)


class RetrievalHoldout(Base):
    """An item a retrieval put to the holdout draw (`credit.holdout_rate`): served
    (withheld false; it is also a retrieval item) or withheld in its place. Only
    these rows enter the causal effect estimate (service/retrieval/holdout.py)."""

    __tablename__ = "retrieval_holdouts"
    __table_args__ = (UniqueConstraint("retrieval_id", "reflection_pk"), NO_REUSE)

    pk: Mapped[int] = mapped_column(BigPK, primary_key=True, autoincrement=True)
    retrieval_id: Mapped[str] = mapped_column(ForeignKey("retrievals.id", ondelete="CASCADE"))
    reflection_pk: Mapped[int] = mapped_column(ForeignKey("reflections.pk", ondelete="CASCADE"), index=True)
    withheld: Mapped[bool] = mapped_column(Boolean)
    # The episode (trajectory_id) or, without one, the retrieval: the unit randomised.
    unit: Mapped[str] = mapped_column(String(128))


class RetrievalOutcome(Base):
    """A reported outcome for a retrieval; one per retrieval (a replay must match)."""

    __tablename__ = "retrieval_outcomes"

    retrieval_id: Mapped[str] = mapped_column(ForeignKey("retrievals.id", ondelete="CASCADE"), primary_key=True)
    # The served items the agent acted on, when it said (None: all served items).
    item_ids: Mapped[list[str] | None] = mapped_column(JSONType)
    success: Mapped[bool | None] = mapped_column(Boolean)
    reward: Mapped[float | None] = mapped_column(Float)
    details: Mapped[dict[str, Any] | None] = mapped_column(JSONType)
    trajectory_id: Mapped[str | None] = mapped_column(String(128))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class Snapshot(Base):
    """Memory pinned at a moment for trainers: a copy of every reflection as it was
    (version, status, utility counters, vectors, evidence) and of the mutable part
    of every trajectory (how many steps, its outcome), so that every read under it
    answers the same while the live namespace goes on changing. Copy-on-snapshot:
    creating one costs one INSERT … SELECT per table (see docs/trainers.md)."""

    __tablename__ = "snapshots"
    __table_args__ = (UniqueConstraint("namespace", "id"), NO_REUSE)

    pk: Mapped[int] = mapped_column(BigPK, primary_key=True, autoincrement=True)
    namespace: Mapped[str] = mapped_column(ForeignKey("namespaces.name", ondelete="CASCADE"))
    id: Mapped[str] = mapped_column(String(128))
    note: Mapped[str | None] = mapped_column(Text)
    # The namespace's change feed position when it was taken (index_changes.seq).
    watermark: Mapped[int] = mapped_column(BigInteger)
    # What ranking read then: the namespace settings and the utility baseline counts.
    settings: Mapped[dict[str, Any]] = mapped_column(JSONType)
    outcome_successes: Mapped[int] = mapped_column(BigInteger)
    outcome_total: Mapped[int] = mapped_column(BigInteger)
    reflection_count: Mapped[int] = mapped_column(Integer)
    trajectory_count: Mapped[int] = mapped_column(Integer)
    step_count: Mapped[int] = mapped_column(BigInteger)
    request_hash: Mapped[str] = mapped_column(String(64))
    created_by: Mapped[str | None] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class SnapshotReflection(Base):
    """A reflection as it was when the snapshot was taken. `pk` is the reflection's
    pk (column reflection_pk): the same attribute names as Reflection, so candidate
    queries run over either."""

    __tablename__ = "snapshot_reflections"
    __table_args__ = (Index("ix_snapshot_reflections_kind", "snapshot_pk", "kind", "status"),)

    snapshot_pk: Mapped[int] = mapped_column(ForeignKey("snapshots.pk", ondelete="CASCADE"), primary_key=True)
    pk: Mapped[int] = mapped_column("reflection_pk", BigInteger, primary_key=True, autoincrement=False)
    namespace: Mapped[str] = mapped_column(String(64))
    id: Mapped[str] = mapped_column(String(128))
    kind: Mapped[str] = mapped_column(String(16))
    status: Mapped[str] = mapped_column(String(12))
    version: Mapped[int] = mapped_column(Integer)
    content: Mapped[dict[str, Any]] = mapped_column(JSONType)
    text: Mapped[str] = mapped_column(Text)
    environment: Mapped[str | None] = mapped_column(String(200))
    task: Mapped[str | None] = mapped_column(Text)
    reflector: Mapped[str] = mapped_column(String(100))
    reflector_version: Mapped[str] = mapped_column(String(40))
    model: Mapped[str | None] = mapped_column(String(200))
    evidence_count: Mapped[int] = mapped_column(Integer)
    evidence_successes: Mapped[int] = mapped_column(Integer)
    evidence_failures: Mapped[int] = mapped_column(Integer)
    evidence_value: Mapped[float | None] = mapped_column(Float)
    internal_hashes: Mapped[list[str] | None] = mapped_column(JSONType)
    uses: Mapped[int] = mapped_column(Integer)
    successes: Mapped[int] = mapped_column(Integer)
    failures: Mapped[int] = mapped_column(Integer)
    reward_sum: Mapped[float] = mapped_column(Float)
    lexical_text: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime)


class SnapshotEmbedding(Base):
    """A reflection's vector as it was (a later edit re-embeds the live row)."""

    __tablename__ = "snapshot_embeddings"
    __table_args__ = (Index("ix_snapshot_embeddings_kind", "snapshot_pk", "kind", "field", "model"),)

    snapshot_pk: Mapped[int] = mapped_column(ForeignKey("snapshots.pk", ondelete="CASCADE"), primary_key=True)
    reflection_pk: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    field: Mapped[str] = mapped_column(String(16), primary_key=True)
    model: Mapped[str] = mapped_column(String(200), primary_key=True)
    kind: Mapped[str] = mapped_column(String(16))
    vector: Mapped[bytes] = mapped_column(LargeBinary)
    text_hash: Mapped[str | None] = mapped_column(String(32))


class SnapshotEvidence(Base):
    """A reflection's evidence as it was, with the citing trajectory's fixed fields
    copied, so leakage guards and filters under a snapshot need no live join."""

    __tablename__ = "snapshot_evidence"
    __table_args__ = (Index("ix_snapshot_evidence_reflection", "snapshot_pk", "reflection_pk"), NO_REUSE)

    pk: Mapped[int] = mapped_column(BigPK, primary_key=True, autoincrement=True)
    snapshot_pk: Mapped[int] = mapped_column(ForeignKey("snapshots.pk", ondelete="CASCADE"))
    reflection_pk: Mapped[int] = mapped_column(BigInteger)
    trajectory_pk: Mapped[int] = mapped_column(BigInteger)
    trajectory_id: Mapped[str] = mapped_column(String(128))
    task_hash: Mapped[str] = mapped_column(String(16))
    agent: Mapped[str | None] = mapped_column(String(200))
    policy_version: Mapped[str | None] = mapped_column(String(200))
    group_id: Mapped[str | None] = mapped_column(String(128))
    step_start: Mapped[int | None] = mapped_column(Integer)
    step_end: Mapped[int | None] = mapped_column(Integer)
    success: Mapped[bool | None] = mapped_column(Boolean)
    value: Mapped[float | None] = mapped_column(Float)


class SnapshotTrajectory(Base):
    """The mutable part of a trajectory as it was: how many of its steps existed
    and its outcome. Its fixed fields (task, group, …) are read from the live row;
    a trajectory deleted since is gone from the snapshot too (deletion is honoured)."""

    __tablename__ = "snapshot_trajectories"

    snapshot_pk: Mapped[int] = mapped_column(ForeignKey("snapshots.pk", ondelete="CASCADE"), primary_key=True)
    trajectory_pk: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    step_count: Mapped[int] = mapped_column(Integer)
    status: Mapped[str] = mapped_column(String(8))
    success: Mapped[bool | None] = mapped_column(Boolean)
    reward: Mapped[float | None] = mapped_column(Float)
    failure_reason: Mapped[str | None] = mapped_column(Text)
    closed_at: Mapped[datetime | None] = mapped_column(UTCDateTime)


class RewardCapability(Base):
    """A capability URL for scoring one rubric of one namespace without an API key
    (OpenRLHF's remote reward model cannot send one): `POST /v1/reward/<secret>`.
    Only a SHA-256 of the secret is stored (a 256-bit random token: a fast hash is as
    safe as a slow one); revoking keeps the row, with `revoked_at`."""

    __tablename__ = "reward_capabilities"
    __table_args__ = (Index("ix_reward_capabilities_ns_rubric", "namespace", "rubric_id", "pk"), NO_REUSE)

    pk: Mapped[int] = mapped_column(BigPK, primary_key=True, autoincrement=True)
    id: Mapped[str] = mapped_column(String(64), unique=True)
    namespace: Mapped[str] = mapped_column(ForeignKey("namespaces.name", ondelete="CASCADE"))
    rubric_id: Mapped[str] = mapped_column(String(128))
    secret_hash: Mapped[str] = mapped_column(String(64), unique=True)
    note: Mapped[str | None] = mapped_column(Text)
    created_by: Mapped[str | None] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    revoked_at: Mapped[datetime | None] = mapped_column(UTCDateTime)


class UiSession(Base):
    """A signed-in operator's browser session. The cookie carries a random secret;
    only its SHA-256 is stored. Valid while unexpired, not ended (sign-out) and its
    key not revoked; every form carries `csrf_token`."""

    __tablename__ = "ui_sessions"
    __table_args__ = (Index("ix_ui_sessions_key", "key_id"), NO_REUSE)

    pk: Mapped[int] = mapped_column(BigPK, primary_key=True, autoincrement=True)
    secret_hash: Mapped[str] = mapped_column(String(64), unique=True)
    key_id: Mapped[str] = mapped_column(ForeignKey("api_keys.id", ondelete="CASCADE"))
    csrf_token: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    expires_at: Mapped[datetime] = mapped_column(UTCDateTime)
    ended_at: Mapped[datetime | None] = mapped_column(UTCDateTime)


class NamespaceSettingChange(Base):
    """Audit history of a namespace's settings: one row per setting a save changed
    (its dotted path, the value before and after), written in the same transaction
    as the change."""

    __tablename__ = "namespace_setting_changes"
    __table_args__ = (Index("ix_namespace_setting_changes_ns", "namespace", "pk"), NO_REUSE)

    pk: Mapped[int] = mapped_column(BigPK, primary_key=True, autoincrement=True)
    namespace: Mapped[str] = mapped_column(ForeignKey("namespaces.name", ondelete="CASCADE"))
    path: Mapped[str] = mapped_column(String(300))  # e.g. "ranking.similarity_band"
    old_value: Mapped[Any | None] = mapped_column(JSONType)
    new_value: Mapped[Any | None] = mapped_column(JSONType)
    actor: Mapped[str] = mapped_column(String(100))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
