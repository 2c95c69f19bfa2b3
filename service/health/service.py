"""Readiness: can this process serve, and what state are the things it needs in."""

from __future__ import annotations

from typing import Any

from migrations import schema_status
from service.container import Services
from store.jobs import count_jobs_by_status, read_oldest_queued_age


def readiness(services: Services) -> tuple[bool, dict[str, Any]]:
    """(ready, checks). Not ready: the database does not answer, its schema is not
    current, or the in-process worker this process should run has died."""
    checks: dict[str, Any] = {}
    try:
        status = schema_status(services.db.engine)
        with services.db.read() as session:
            counts = count_jobs_by_status(session)
            oldest = read_oldest_queued_age(session)
    except Exception as exc:  # readiness reports failures, it does not raise them
        checks["database"] = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
        return False, checks
    checks["database"] = {"ok": True, "dialect": services.db.dialect}
    checks["schema"] = {"ok": status.up_to_date, "current": list(status.current), "head": list(status.head)}
    in_process = services.settings.worker.in_process

    def total(state: str) -> int:
        return sum(n for (_, s), n in counts.items() if s == state)

    checks["workers"] = {
        # Workers may run as separate processes; only a dead in-process one fails readiness.
        "ok": services.worker.running or not in_process,
        "in_process": in_process,
        "queued": total("queued"),
        "running": total("running"),
        "failed": total("failed"),
        "oldest_queued_seconds": oldest,
    }
    checks["index"] = {"ok": True, "embedder": services.embedder.name, "dim": services.embedder.dim}
    return all(c["ok"] for c in checks.values()), checks
