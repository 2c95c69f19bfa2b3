"""Read-your-writes: a write's consistency token (domain.consistency) names the
indexing jobs it queued; waiting on it means those jobs are done, so a sync of the
index sees them.

Measured on a reference setup: with a 10 s ingest-to-searchable lag an online
learner on short episodes learned nothing; waiting for the index before the next
episode restored learning. So the wait is bounded and its timeout is a clear error.
"""

from __future__ import annotations

import time

from domain.errors import Conflict, ReflexaError
from domain.jobs import TRAJECTORY_CLOSED, Priority
from store import jobs as jobs_repo
from store import namespaces as ns_repo
from store.database import Database


class ConsistencyTimeout(ReflexaError):
    status = 504
    type = "consistency_timeout"


def wait_for(db: Database, ns: str, token: tuple[int, int], timeout_ms: int, field: str = "consistency_token") -> int:
    """Block until the token's jobs are done; returns the milliseconds waited.

    Jobs still queued when the wait begins move ahead of every other queued job
    (Priority.AWAITED): a reader waiting on its own write is not made to wait behind
    other namespaces' backlog (fair share for read-your-writes)."""
    start = time.monotonic()
    delay = 0.005
    bumped = False
    while True:
        with db.read() as session:
            statuses = jobs_repo.read_job_statuses(session, ns, TRAJECTORY_CLOSED.kind, *token)
            frozen = bool(statuses.get("queued")) and ns_repo.read_frozen(session, ns)
        if frozen:  # its jobs wait for the thaw: waiting here could only time out
            raise Conflict(
                f"namespace {ns!r} is frozen for evaluation: the write this token names is indexed after the thaw",
                field=field,
                rule="namespace_frozen",
            )
        if statuses.get("queued") and not bumped:
            db.run_write(
                lambda session: jobs_repo.update_awaited_jobs(
                    session, ns, TRAJECTORY_CLOSED.kind, *token, int(Priority.AWAITED)
                )
            )
            bumped = True
        if statuses.get("failed"):
            raise ConsistencyTimeout(
                f"indexing of the write this token names failed; see GET /v1/namespaces/{ns}/jobs?status=failed",
                field=field,
                rule="indexing_failed",
            )
        if not statuses.get("queued") and not statuses.get("running"):
            return int((time.monotonic() - start) * 1000)
        elapsed = time.monotonic() - start
        if elapsed * 1000 >= timeout_ms:
            raise ConsistencyTimeout(
                f"the write this token names was not searchable within {timeout_ms} ms; retry, or wait longer",
                field=field,
                rule="wait_timeout",
            )
        time.sleep(max(0.0, min(delay, timeout_ms / 1000 - elapsed)))
        delay = min(delay * 2, 0.05)
