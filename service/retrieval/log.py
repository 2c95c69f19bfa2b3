"""The retrieval log's writes: inline (one write unit before the answer), or deferred
for the hot routes: journaled before the answer is sent and written to the database
after it (store/retrieval_journal.py), so a retrieve's answer does not wait for a
write transaction and a killed process loses no logged retrieval.

A deferred record is in the database within milliseconds of its answer. The reads
that must see it wait for it (`await_logged`): an outcome naming its retrieval, an
episode closing that credits its retrievals. They find what is pending in every
journal file on the host, and replay the file of a process that is gone.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import orjson
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from store import retrieval_journal as journal_files
from store import retrievals as retrievals_repo
from store.database import Database
from store.retrieval_journal import Journal, Ticket

log = logging.getLogger("reflexa.retrieval.log")

AWAIT_TIMEOUT_S = 5.0
RETRY_DELAYS_S = (0.05, 0.2, 0.5, 1.0, 2.0)


@dataclass(frozen=True)
class LogRecord:
    """One logged retrieval: what `store.retrievals.create_retrieval` writes."""

    id: str
    namespace: str
    query: dict[str, Any]
    trajectory_id: str | None
    created_at: datetime
    latency_ms: float
    items: list[tuple[int, int, float, float]]  # (reflection pk, rank, score, similarity)
    holdouts: list[tuple[int, bool, str]] = field(default_factory=list)  # (reflection pk, withheld, unit)
    context: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "namespace": self.namespace,
            "query": self.query,
            "trajectory_id": self.trajectory_id,
            "created_at": self.created_at.isoformat(),
            "latency_ms": self.latency_ms,
            "items": self.items,
            "holdouts": self.holdouts,
            "context": self.context,
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> LogRecord:
        return cls(
            id=d["id"],
            namespace=d["namespace"],
            query=d["query"],
            trajectory_id=d["trajectory_id"],
            created_at=datetime.fromisoformat(d["created_at"]),
            latency_ms=d["latency_ms"],
            items=[(int(pk), int(rank), float(s), float(sim)) for pk, rank, s, sim in d["items"]],
            holdouts=[(int(pk), bool(w), str(u)) for pk, w, u in d["holdouts"]],
            context=d["context"],
        )


def journal_directory(data_dir: Path, database_url: str) -> Path:
    """One journal directory per database: a record is only ever replayed into the
    database it was served from."""
    digest = hashlib.sha256(database_url.encode()).hexdigest()[:16]
    return data_dir / "retrieval-journal" / digest


class RetrievalLog:
    def __init__(self, db: Database, journal_dir: Path | None) -> None:
        """`journal_dir` None: every write is inline."""
        self.db = db
        self.journal_dir = journal_dir
        self._journal: Journal | None = None  # this process's files, made on its first deferred write
        self._journal_lock = threading.Lock()
        self._retry: list[tuple[Ticket, list[LogRecord]]] = []
        self._retry_lock = threading.Lock()
        self._retrying: threading.Thread | None = None

    # -- writing -----------------------------------------------------------

    def write(self, session: Session, records: Sequence[LogRecord]) -> None:
        for r in records:
            retrievals_repo.create_retrieval(
                session,
                id=r.id,
                namespace=r.namespace,
                query=r.query,
                trajectory_id=r.trajectory_id,
                items=r.items,
                latency_ms=r.latency_ms,
                holdouts=r.holdouts,
                context=r.context,
                created_at=r.created_at,
            )

    def write_now(self, records: Sequence[LogRecord]) -> None:
        """Inline: in one write unit, before the caller answers. One record on
        PostgreSQL is one statement (`store.retrievals.create_retrieval`), so it runs
        without BEGIN and COMMIT around it: one round trip."""
        if len(records) == 1 and self.db.is_postgres:
            with self.db.one_statement_write() as session:
                self.write(session, records)
        elif records:
            self.db.run_write(lambda session: self.write(session, records))

    def defer(self, records: list[LogRecord]) -> Callable[[], None]:
        """Journal the records now; the returned call writes them to the database (run
        it after the answer is sent). Without a journal, they are written now."""
        if self.journal_dir is None or not records:
            self.write_now(records)
            return _nothing
        ticket = self.journal.append([r.to_json() for r in records])
        return lambda: self._finish(ticket, records)

    @property
    def journal(self) -> Journal:
        assert self.journal_dir is not None
        if self._journal is None:
            with self._journal_lock:
                if self._journal is None:
                    self._journal = Journal(self.journal_dir)
        return self._journal

    def _finish(self, ticket: Ticket, records: list[LogRecord]) -> None:
        try:
            self._store(records)
        except Exception:  # the database is down or overloaded: the journal keeps them
            log.warning("retrieval log write failed; retrying in the background", exc_info=True)
            self._schedule_retry(ticket, records)
            return
        self.journal.done(ticket)

    def _store(self, records: list[LogRecord]) -> None:
        """Write records not yet in the database. The common case is one plain write; a
        namespace or reflection deleted since serving (a foreign key), or a record
        already written (a replay) takes the careful path."""
        try:
            self.write_now(records)
        except IntegrityError:
            self.db.run_write(lambda session: self._write_surviving(session, records))

    def _write_surviving(self, session: Session, records: list[LogRecord]) -> None:
        logged = retrievals_repo.read_logged_ids(session, [r.id for r in records])
        fresh = [r for r in records if r.id not in logged]
        if not fresh:
            return
        names, pks = retrievals_repo.read_live_targets(
            session,
            {r.namespace for r in fresh},
            {pk for r in fresh for pk, *_ in r.items} | {pk for r in fresh for pk, *_ in r.holdouts},
        )
        kept = [
            dataclasses.replace(
                r, items=[i for i in r.items if i[0] in pks], holdouts=[h for h in r.holdouts if h[0] in pks]
            )
            for r in fresh
            if r.namespace in names
        ]
        self.write(session, kept)

    def _schedule_retry(self, ticket: Ticket, records: list[LogRecord]) -> None:
        with self._retry_lock:
            self._retry.append((ticket, records))
            if self._retrying is None:
                self._retrying = threading.Thread(target=self._retry_loop, name="retrieval-log-retry", daemon=True)
                self._retrying.start()

    def _retry_loop(self) -> None:
        attempt = 0
        while True:
            time.sleep(RETRY_DELAYS_S[min(attempt, len(RETRY_DELAYS_S) - 1)])
            with self._retry_lock:
                batch, self._retry = self._retry, []
            records = [r for _, rs in batch for r in rs]
            try:
                self.db.run_write(lambda session, rs=records: self._write_surviving(session, rs))
            except Exception:
                log.warning("retrieval log retry failed (%d batches pending)", len(batch), exc_info=True)
                attempt += 1
                with self._retry_lock:
                    self._retry = batch + self._retry
                continue
            for ticket, _ in batch:
                self.journal.done(ticket)
            attempt = 0
            with self._retry_lock:
                if not self._retry:
                    self._retrying = None
                    return

    # -- reading what was logged -------------------------------------------

    def recover(self) -> int:
        """Replay the journal files of processes that are gone; the records written."""
        if self.journal_dir is None:
            return 0
        written = 0
        for orphan in journal_files.orphans(self.journal_dir):
            records = [LogRecord.from_json(r) for r in orphan.records]
            try:
                if records:
                    self.db.run_write(lambda session, rs=records: self._write_surviving(session, rs))
            except Exception:
                orphan.release()
                raise
            orphan.remove()
            written += len(records)
        if written:
            log.info("replayed %d journaled retrieval log records", written)
        return written

    def await_logged(
        self,
        namespace: str,
        retrieval_ids: Iterable[str] | Callable[[], Iterable[str]] = (),
        trajectory_ids: Iterable[str] = (),
        timeout_s: float = AWAIT_TIMEOUT_S,
    ) -> None:
        """Return once every journaled record of `namespace` with one of these ids, or
        served to one of these trajectories, is in the database (bounded by
        `timeout_s`; a record still pending then stays unseen, as it would have been
        had it come later). `retrieval_ids` may be a call, made only when something of
        the namespace is pending. Call it outside any transaction."""
        if self.journal_dir is None or not self.journal_dir.is_dir():
            return
        needle = b'"namespace":' + orjson.dumps(namespace)
        trajectories = set(trajectory_ids)
        ids: set[str] | None = None
        deadline = time.monotonic() + timeout_s
        while True:
            pending = [r for r in journal_files.scan(self.journal_dir, needle) if r["namespace"] == namespace]
            if pending and ids is None:
                ids = set(retrieval_ids() if callable(retrieval_ids) else retrieval_ids)
            wanted = {r["id"] for r in pending if r["id"] in (ids or ()) or r["trajectory_id"] in trajectories}
            if not wanted:
                return
            with self.db.read() as session:
                if retrievals_repo.read_logged_ids(session, sorted(wanted)) == wanted:
                    return
            self.recover()
            if time.monotonic() >= deadline:
                log.warning("retrieval log records %s still pending after %.1f s", sorted(wanted)[:5], timeout_s)
                return
            time.sleep(0.005)


def _nothing() -> None:
    return None
