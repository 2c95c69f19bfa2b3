"""The vote rule of the LLM-maintained pools (heuristics, skills): an item's
`content.importance` is the sum of its evidence votes (+1 per supporting attempt,
-1 per DOWNVOTE), rounded. The pool maintenance in reflectors/prompted/pool.py
counts votes with it, and deleting a trajectory takes that trajectory's votes out
with it; both sides read the rule from here.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy.orm import Session

from store import evidence as evidence_repo
from store import reflections as reflections_repo


def importances(session: Session, reflection_pks: Sequence[int]) -> dict[int, int]:
    """pk -> the importance its evidence votes add up to (0 with no evidence)."""
    return {pk: round(total) for pk, total in evidence_repo.read_evidence_value_sums(session, reflection_pks).items()}


def refresh_importance(session: Session, reflection_pks: Sequence[int]) -> None:
    """Recompute `content.importance` of the pool items among these reflections
    after their evidence changed. Status is left to curation (an item is not
    retired because its source data was deleted)."""
    if not reflection_pks:
        return
    votes = importances(session, reflection_pks)
    for row in reflections_repo.list_reflections_by_pks(session, reflection_pks):
        if "importance" in row.content and row.content["importance"] != votes[row.pk]:
            row.content = {**row.content, "importance": votes[row.pk]}
