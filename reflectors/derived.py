"""Writing reflections that a reflector recomputes from the evidence (evidence
cards, contrastive heuristics): one row per identity, revised in place as the
evidence changes, every revision kept in the history."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from sqlalchemy.orm import Session

from domain.reflections import ReflectionDraft
from reflectors.embed import write_vectors
from store import evidence as evidence_repo
from store import index_feed
from store import reflections as repo


@dataclass
class Derived:
    """A reflection as a reflector computed it this time."""

    draft: ReflectionDraft
    vectors: dict[str, np.ndarray]
    evidence: list[evidence_repo.EvidenceIn]
    texts: dict[str, str] | None = None  # what the vectors encode, when they encode texts (not a centroid)


def upsert_derived(session: Session, item: Derived, *, model: str, actor: str, note: str) -> bool:
    """Insert, or revise when content or status changed; returns True if anything changed."""
    d = item.draft
    # The namespace's feed lock before the read (writers take it anyway): two jobs
    # recounting at once would both find no row and both insert it (PostgreSQL: a
    # unique violation that failed the job); now the second waits and revises.
    index_feed.lock_feed(session, d.namespace)
    row = repo.read_reflection(session, d.namespace, d.id, for_update=True)
    if row is None:
        row = repo.create_reflection(session, d.values(), actor=actor)
        write_vectors(session, row, model, item.vectors, item.texts)
        evidence_repo.update_evidence(session, row.pk, item.evidence)
        return True
    changed = False
    if row.content != d.content:
        repo.update_reflection(session, row, content=d.content, text=d.text, actor=actor, note=note)
        write_vectors(session, row, model, item.vectors, item.texts)
        changed = True
    if row.status != d.status and row.status != "retired":  # an operator's retirement stands
        repo.update_reflection_status(session, row, d.status, action="status", actor=actor, note=note)
        changed = True
    evidence_repo.update_evidence(session, row.pk, item.evidence)
    return changed
