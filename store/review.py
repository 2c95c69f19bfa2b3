"""The operator's review queue: candidates awaiting approval and active items whose
posterior utility fell below the namespace baseline, ordered by impact.

Impact (docs/ui.md): a candidate's is the evidence it stands on plus its uses
(what approving it would put in front of agents); an underperformer's is
uses * (baseline - mean), the successes it is estimated to have cost. An operator's
"keep" records `reviewed_uses`; the item returns only after `renew_after` more uses.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import case, func, or_, select
from sqlalchemy.orm import Session

from store.models import Reflection
from store.reflections import utility_mean


@dataclass(frozen=True)
class ReviewRule:
    baseline: float
    prior_strength: float
    min_uses: int  # an active item is judged only after this many uses
    renew_after: int  # uses after a "keep" before it is shown again


def _terms(rule: ReviewRule) -> tuple[Any, Any, Any]:
    r = Reflection
    mean = utility_mean(rule.baseline, rule.prior_strength)
    candidate = r.status == "candidate"
    below = (
        (r.status == "active")
        & (r.uses >= rule.min_uses)
        & (mean < rule.baseline)
        & (r.reviewed_uses.is_(None) | (r.uses >= r.reviewed_uses + rule.renew_after))
    )
    impact = case((candidate, 1.0 * (r.evidence_count + r.uses)), else_=r.uses * (rule.baseline - mean))
    return candidate, below, impact


@dataclass(frozen=True)
class ReviewEntry:
    reflection: Reflection
    reason: str  # "candidate" | "below_baseline"
    impact: float


def list_review_queue(
    session: Session, namespace: str, rule: ReviewRule, *, before: tuple[float, int] | None, limit: int
) -> list[ReviewEntry]:
    candidate, below, impact = _terms(rule)
    r = Reflection
    stmt = select(r, impact.label("impact")).where(r.namespace == namespace, or_(candidate, below))
    if before is not None:
        at, pk = before
        stmt = stmt.where(or_(impact < at, (impact == at) & (r.pk < pk)))
    stmt = stmt.order_by(impact.desc(), r.pk.desc()).limit(limit)
    return [
        ReviewEntry(row, "candidate" if row.status == "candidate" else "below_baseline", float(value))
        for row, value in session.execute(stmt)
    ]


def count_review_queue(session: Session, namespace: str, rule: ReviewRule) -> int:
    candidate, below, _ = _terms(rule)
    r = Reflection
    stmt = select(func.count()).select_from(r).where(r.namespace == namespace, or_(candidate, below))
    return int(session.scalar(stmt) or 0)
