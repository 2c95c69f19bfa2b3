"""The namespaces domain's own reads and writes: a namespace as a stream of rows,
and back (`reflexa export` / `reflexa import`, through service/namespaces/backup.py).

Everything that is the namespace's meaning goes out: its settings and counters,
trajectories with steps, reflections with their whole history, evidence, vectors
and lexical texts, utility, the retrieval log with outcomes, snapshots with their
copies, reward capabilities, LLM token use. What is not meaning stays behind and is
remade on import: the job queue (nothing to redo: derived rows come along) and the
index change feed (an upsert per imported reflection is written, so every replica's
indexes pick them up).

Surrogate keys are shifted on import past the target table's largest key, in the
order they were exported, so the rows keep their order and every reference between
them; a snapshot's reference to a row deleted since gets a negative stand-in (it is
only an identity inside the snapshot, and no real row can have it). Values are JSON: times as ISO 8601 with
their offset, vectors as base64.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import date, datetime
from typing import Any

from sqlalchemy import Column, Date, LargeBinary, Table, func, insert, select, text
from sqlalchemy.orm import Session

from store.index_feed import create_changes, lock_feed
from store.models import (
    Embedding,
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
    RewardCapability,
    Snapshot,
    SnapshotEmbedding,
    SnapshotEvidence,
    SnapshotReflection,
    SnapshotTrajectory,
    Step,
    Trajectory,
    UTCDateTime,
)

FORMAT = "reflexa.namespace"
VERSION = 1
CHUNK = 2000


@dataclass(frozen=True)
class Part:
    """One table of a namespace: how to select its rows, its surrogate key (shifted
    on import) and the columns that hold another part's surrogate key."""

    table: Table
    where: Callable[[str], Any]
    key: str | None = None
    refs: dict[str, str] = field(default_factory=dict)  # column -> table whose key it holds
    soft: frozenset[str] = frozenset()  # refs that may point at rows deleted since (snapshots)


def _in(column: Any, parent: Any, parent_key: Any, ns: str) -> Any:
    return column.in_(select(parent_key).where(parent.namespace == ns))


T, S, R = Trajectory, Snapshot, Reflection
PARTS: tuple[Part, ...] = (
    Part(Namespace.__table__, lambda ns: Namespace.name == ns),
    Part(T.__table__, lambda ns: T.namespace == ns, key="pk"),
    Part(
        Step.__table__,
        lambda ns: _in(Step.trajectory_pk, T, T.pk, ns),
        key="pk",
        refs={"trajectory_pk": "trajectories"},
    ),
    Part(R.__table__, lambda ns: R.namespace == ns, key="pk"),
    Part(
        ReflectionEvidence.__table__,
        lambda ns: _in(ReflectionEvidence.reflection_pk, R, R.pk, ns),
        key="pk",
        refs={"reflection_pk": "reflections", "trajectory_pk": "trajectories"},
    ),
    Part(
        ReflectionVersion.__table__,
        lambda ns: _in(ReflectionVersion.reflection_pk, R, R.pk, ns),
        key="pk",
        refs={"reflection_pk": "reflections"},
    ),
    Part(Embedding.__table__, lambda ns: Embedding.namespace == ns, key="pk", refs={"reflection_pk": "reflections"}),
    Part(LexicalText.__table__, lambda ns: LexicalText.namespace == ns, refs={"reflection_pk": "reflections"}),
    Part(Retrieval.__table__, lambda ns: Retrieval.namespace == ns),
    Part(
        RetrievalItem.__table__,
        lambda ns: _in(RetrievalItem.retrieval_id, Retrieval, Retrieval.id, ns),
        key="pk",
        refs={"reflection_pk": "reflections"},
    ),
    Part(RetrievalOutcome.__table__, lambda ns: _in(RetrievalOutcome.retrieval_id, Retrieval, Retrieval.id, ns)),
    Part(
        ReflectionServed.__table__,
        lambda ns: _in(ReflectionServed.reflection_pk, R, R.pk, ns),
        refs={"reflection_pk": "reflections"},
    ),
    Part(S.__table__, lambda ns: S.namespace == ns, key="pk"),
    Part(
        SnapshotReflection.__table__,
        lambda ns: _in(SnapshotReflection.snapshot_pk, S, S.pk, ns),
        refs={"snapshot_pk": "snapshots", "reflection_pk": "reflections"},
        soft=frozenset({"reflection_pk"}),
    ),
    Part(
        SnapshotEmbedding.__table__,
        lambda ns: _in(SnapshotEmbedding.snapshot_pk, S, S.pk, ns),
        refs={"snapshot_pk": "snapshots", "reflection_pk": "reflections"},
        soft=frozenset({"reflection_pk"}),
    ),
    Part(
        SnapshotEvidence.__table__,
        lambda ns: _in(SnapshotEvidence.snapshot_pk, S, S.pk, ns),
        key="pk",
        refs={"snapshot_pk": "snapshots", "reflection_pk": "reflections", "trajectory_pk": "trajectories"},
        soft=frozenset({"reflection_pk", "trajectory_pk"}),
    ),
    Part(
        SnapshotTrajectory.__table__,
        lambda ns: _in(SnapshotTrajectory.snapshot_pk, S, S.pk, ns),
        refs={"snapshot_pk": "snapshots", "trajectory_pk": "trajectories"},
        soft=frozenset({"trajectory_pk"}),
    ),
    Part(RewardCapability.__table__, lambda ns: RewardCapability.namespace == ns, key="pk"),
    Part(LLMTokenUsage.__table__, lambda ns: LLMTokenUsage.namespace == ns),
)
BY_NAME = {p.table.name: p for p in PARTS}


def _order(part: Part) -> list[Column[Any]]:
    return [part.table.c[part.key]] if part.key else list(part.table.primary_key.columns)


def _encode(column: Column[Any], value: Any) -> Any:
    if value is None:
        return None
    if isinstance(column.type, LargeBinary):
        return base64.b64encode(value).decode()
    if isinstance(value, datetime | date):
        return value.isoformat()
    return value


def _decode(column: Column[Any], value: Any) -> Any:
    if value is None:
        return None
    if isinstance(column.type, LargeBinary):
        return base64.b64decode(value)
    if isinstance(column.type, UTCDateTime):
        return datetime.fromisoformat(value)
    if isinstance(column.type, Date):
        return date.fromisoformat(value)
    return value


def dump_namespace(session: Session, namespace: str, *, schema: str, exported_at: datetime) -> Iterator[dict[str, Any]]:
    """The header, then every row of the namespace as {"table": …, "row": {…}}, parents
    before children, each table in key order (read in one consistent transaction)."""
    yield {
        "format": FORMAT,
        "version": VERSION,
        "namespace": namespace,
        "schema": schema,
        "exported_at": exported_at.isoformat(),
    }
    for part in PARTS:
        stmt = select(part.table).where(part.where(namespace)).order_by(*_order(part))
        for row in session.execute(stmt.execution_options(yield_per=CHUNK)).mappings():
            yield {
                "table": str(part.table.name),
                "row": {str(c.name): _encode(c, row[c.name]) for c in part.table.columns},
            }


class BackupError(ValueError):
    pass


@dataclass
class Loaded:
    namespace: str
    rows: dict[str, int] = field(default_factory=dict)


def load_namespace(session: Session, records: Iterable[dict[str, Any]], *, schema: str) -> Loaded:
    """Insert a dumped namespace into this database, in the caller's transaction
    (all or nothing). Refuses a dump of another schema revision or format, and a
    namespace that exists here."""
    it = iter(records)
    header = next(it, None)
    if not header or header.get("format") != FORMAT or header.get("version") != VERSION:
        raise BackupError("not a Reflexa namespace export (its first line names the format)")
    if header.get("schema") != schema:
        raise BackupError(
            f"the export is of schema revision {header.get('schema')}, this database is at {schema}: "
            "upgrade the older of the two (`reflexa db upgrade`) and export again"
        )
    namespace = header["namespace"]
    if session.get(Namespace, namespace) is not None:
        raise BackupError(f"namespace {namespace!r} already exists here; import into a database without it")
    pg = session.get_bind().dialect.name == "postgresql"
    if pg:  # keys are shifted past the current maximum: no other writer may take one meanwhile
        for part in PARTS:
            if part.key:
                session.execute(text(f'LOCK TABLE "{part.table.name}" IN SHARE ROW EXCLUSIVE MODE'))
    lock_feed(session, namespace)
    shift: dict[str, int] = {}
    seen: dict[str, set[int]] = {}  # exported keys per table, as they were
    out = Loaded(namespace)
    batch: list[dict[str, Any]] = []
    current: Part | None = None

    def flush() -> None:
        if batch and current is not None:
            session.execute(insert(current.table), batch)
            out.rows[current.table.name] = out.rows.get(current.table.name, 0) + len(batch)
            batch.clear()

    def mapped(part: Part, column: str, value: Any) -> Any:
        target = part.refs[column]
        if value is None:
            return None
        if value in seen.get(target, ()):
            return value + shift[target]
        if column in part.soft:  # a snapshot's copy of a row deleted since: a stand-in no real row can have
            return -abs(value)
        raise BackupError(f"{part.table.name}.{column} = {value} refers to no exported {target} row")

    for record in it:
        part = BY_NAME.get(record.get("table", ""))
        if part is None:
            raise BackupError(f"unknown table {record.get('table')!r} in the export")
        if part is not current:
            flush()
            current = part
        raw = record["row"]
        row = {c.name: _decode(c, raw.get(c.name)) for c in part.table.columns}
        if part.key:
            if part.table.name not in shift:
                top = session.scalar(select(func.max(part.table.c[part.key]))) or 0
                shift[part.table.name] = top + 1 - row[part.key]
            seen.setdefault(part.table.name, set()).add(row[part.key])
            row[part.key] += shift[part.table.name]
        for column in part.refs:
            row[column] = mapped(part, column, row[column])
        batch.append(row)
        if len(batch) >= CHUNK:
            flush()
    flush()
    if pg:  # the sequences continue after what was inserted with explicit keys
        for part in PARTS:
            if part.key and part.table.name in shift:
                name, key = part.table.name, part.key
                session.execute(
                    text(f"SELECT setval(pg_get_serial_sequence('{name}', '{key}'), (SELECT MAX({key}) FROM {name}))")
                )
    kinds = session.execute(select(Reflection.kind, Reflection.pk).where(Reflection.namespace == namespace))
    create_changes(session, namespace, [(kind, pk, "upsert") for kind, pk in kinds])
    return out
