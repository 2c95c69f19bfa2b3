"""Writing reflections that a reflector recomputes from the evidence (evidence
cards, contrastive heuristics): one row per identity, revised in place as the
evidence changes, every revision kept in the history."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from sqlalchemy.orm import Session

from reflectors.embed import write_vectors
from store import reflections as repo


@dataclass
class Derived:
    """A reflection as a reflector computed it this time."""

    values: dict[str, Any]  # namespace, id, kind, status, content, text, environment, task, reflector, …
    vectors: dict[str, np.ndarray]
    evidence: list[repo.EvidenceIn]


def upsert_derived(session: Session, item: Derived, *, model: str, actor: str, note: str) -> bool:
    """Insert, or revise when content or status changed; returns True if anything changed."""
    v = item.values
    row = repo.get_reflection(session, v["namespace"], v["id"], for_update=True)
    if row is None:
        row = repo.insert_reflection(session, v, actor=actor)
        write_vectors(session, row, model, item.vectors)
        repo.replace_evidence(session, row.pk, item.evidence)
        return True
    changed = False
    if row.content != v["content"]:
        repo.edit_reflection(session, row, content=v["content"], text=v["text"], actor=actor, note=note)
        write_vectors(session, row, model, item.vectors)
        changed = True
    if row.status != v["status"] and row.status != "retired":  # an operator's retirement stands
        repo.set_status(session, row, v["status"], action="status", actor=actor, note=note)
        changed = True
    repo.replace_evidence(session, row.pk, item.evidence)
    return changed
