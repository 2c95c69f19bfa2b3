"""The `calibrate.lexical` job: a namespace whose `ranking.lexical_weight` is
`calibrated` gets the weight its own near-duplicate states choose
(service/retrieval/calibration.py), refreshed as it grows.

When: a closed trajectory's exemplars queue it (coalesced per namespace) once the
namespace's report says a check is due: at once for a namespace never checked,
RETRY_SECONDS after a check that found too few near-duplicate states, REFRESH_SECONDS
after a calibration. A due check recalibrates when the namespace has no weight yet,
when its distinct states grew by GROWTH since the last calibration, or, past
calibration.MAX_STATES (the newest are read), when the last one is older than
STALE_SECONDS; otherwise it only moves the next check on. The queries are encoded
with no transaction open; the weight and its report are written in one.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import numpy as np
from sqlalchemy.orm import Session

from domain.jobs import Dedup, Lane, Priority, declare
from domain.settings import NamespaceSettings
from reflectors import repository
from reflectors.registry import Reflector, register
from reflectors.worker import JobView, Write
from service.retrieval import calibration
from store import namespaces as namespaces_repo
from store.database import Database
from store.embedding.base import Embedder
from store.models import Trajectory, utcnow

JOB = declare(
    "calibrate.lexical",
    lane=Lane.FAST,
    priority=Priority.OFFLINE,
    dedup=Dedup.COALESCE,
    description="choose a calibrated namespace's lexical weight from its own near-duplicate states",
)
RETRY_SECONDS = 30.0
REFRESH_SECONDS = 300.0
STALE_SECONDS = 3600.0
GROWTH = 1.25


def _due(report: dict[str, Any] | None, now: datetime) -> bool:
    return report is None or datetime.fromisoformat(report["next_check_at"]) <= now


def _recalibrate(report: dict[str, Any] | None, states: int, now: datetime) -> bool:
    if report is None or report.get("calibrated_at") is None:
        return True
    if states >= GROWTH * report["calibrated_states"]:
        return True
    age = (now - datetime.fromisoformat(report["calibrated_at"])).total_seconds()
    return states >= calibration.MAX_STATES and age >= STALE_SECONDS


def queue_calibration(session: Session, traj: Trajectory, settings: NamespaceSettings) -> None:
    if settings.ranking.lexical_weight != "calibrated":
        return
    if _due(namespaces_repo.read_lexical_calibration(session, traj.namespace), utcnow()):
        JOB.enqueue(session, traj.namespace, {}, traj.namespace)


class LexicalCalibration:
    """Job handler for `calibrate.lexical`."""

    def __init__(self, db: Database, embedder: Embedder) -> None:
        self.db = db
        self.embedder = embedder

    def __call__(self, job: JobView) -> Write | None:
        ns = job.namespace
        now = utcnow()
        with self.db.read() as session:
            report = namespaces_repo.read_lexical_calibration(session, ns)
            rows = repository.list_exemplar_state_texts(session, ns, self.embedder.name, calibration.MAX_STATES)
        texts = [t for t, _ in rows]
        states = len(set(texts))
        if not _recalibrate(report, states, now):
            assert report is not None
            kept = {**report, "checked_at": now.isoformat(), "next_check_at": _after(now, REFRESH_SECONDS)}
            return lambda session: namespaces_repo.update_lexical_calibration(session, ns, None, kept)
        vectors = np.vstack([v for _, v in rows]) if rows else np.zeros((0, self.embedder.dim), np.float32)
        result = calibration.calibrate(texts, vectors, lambda qs: self.embedder.encode(qs))  # no transaction open
        new = {**result.as_report(), "checked_at": now.isoformat()}
        if result.weight is None:  # too few near-duplicates: keep any earlier weight and its record
            earlier = report or {}
            new |= {
                "weight": earlier.get("weight"),
                "calibrated_at": earlier.get("calibrated_at"),
                "calibrated_states": earlier.get("calibrated_states"),
                "next_check_at": _after(now, RETRY_SECONDS),
            }
        else:
            new |= {"calibrated_at": now.isoformat(), "calibrated_states": states}
            new["next_check_at"] = _after(now, REFRESH_SECONDS)
        return lambda session: namespaces_repo.update_lexical_calibration(session, ns, result.weight, new)


def _after(now: datetime, seconds: float) -> str:
    return (now + timedelta(seconds=seconds)).isoformat()


register(
    Reflector(
        name="lexical-calibration",
        version="1",
        job=JOB,
        build=lambda deps: LexicalCalibration(deps.db, deps.embedder),
        trigger=queue_calibration,
    )
)
