"""The review queue and its decisions: approve a candidate, keep an underperformer,
retire either. Each decision is a history entry with its actor and note."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from sqlalchemy.orm import Session

from domain.errors import Conflict, InvalidInput, NotFound
from service.auth import Permission, Principal
from service.namespaces.service import NamespaceService
from service.operator.repository import review as repo
from service.operator.repository.review import REASONS, Citation, QueueCount, ReviewEntry, ReviewFilters, ReviewRule
from service.pagination import decode_pair_cursor, encode_pair_cursor
from service.reflections.service import ReflectionService
from service.retrieval import ranking
from service.retrieval.holdout import effect_of
from store import reflections as reflection_repo
from store import retrievals as retrievals_repo
from store.database import Database
from store.retrievals import HoldoutCounts

Decision = Literal["approve", "retire", "keep"]
DECISIONS: tuple[Decision, ...] = ("approve", "retire", "keep")
MAX_SELECTED = 500  # items one decision on a selection may name


class ReviewRuleFactory:
    """The review rule at a namespace's baseline; thresholds from settings."""

    def __init__(self, min_uses: int, renew_after: int) -> None:
        self.min_uses = min_uses
        self.renew_after = renew_after

    def __call__(self, baseline: float, holdouts: Mapping[int, HoldoutCounts] | None = None) -> ReviewRule:
        return ReviewRule(
            baseline=baseline,
            prior_strength=ranking.PRIOR_STRENGTH,
            min_uses=self.min_uses,
            renew_after=self.renew_after,
            harmful=harmful_items(holdouts or {}, baseline),
        )


def harmful_items(holdouts: Mapping[int, HoldoutCounts], baseline: float) -> tuple[tuple[int, float], ...]:
    """The items whose causal effect's 95 % interval lies below zero, each with the
    successes it is estimated to have cost the episodes it was served to."""
    out = []
    for pk, c in holdouts.items():
        e = effect_of(c, baseline)
        if e.verdict == "hurts":
            out.append((pk, -e.effect * c.served_units))
    return tuple(sorted(out))


FILTER_NAMES = ("reason", "kind", "reflector")  # ReviewFilters' fields, each also a QueueCount field
CITATIONS_SHOWN = 3  # evidence rows shown inline per item (the reflection's page has them all)
STEPS_SHOWN = 2  # steps shown per cited range


@dataclass
class ReviewPage:
    entries: list[ReviewEntry]
    next_cursor: str | None
    baseline: float
    counts: list[QueueCount]  # the whole queue by reason, kind and reflector
    citations: dict[int, list[Citation]]  # reflection pk -> its newest evidence with the cited steps
    filters: ReviewFilters

    @property
    def total(self) -> int:
        """How many items wait under the filters."""
        return sum(n for reason, n in self.counts_by("reason").items() if self.filters.reason in (None, reason))

    def counts_by(self, name: str) -> dict[str, int]:
        """The queue counted by `name` (reason, kind or reflector) under the other
        filters: what each choice of that filter would show."""
        out: dict[str, int] = dict.fromkeys(REASONS, 0) if name == "reason" else {}
        if getattr(self.filters, name) is not None:
            out.setdefault(getattr(self.filters, name), 0)
        others = [n for n in FILTER_NAMES if n != name]
        for c in self.counts:
            if all(getattr(self.filters, n) in (None, getattr(c, n)) for n in others):
                out[getattr(c, name)] = out.get(getattr(c, name), 0) + c.count
        return out


@dataclass
class DecisionsResult:
    decided: list[str]
    refused: list[tuple[str, str]]  # (id, why): its state does not allow the decision, or it is gone


class ReviewService:
    def __init__(
        self, db: Database, namespaces: NamespaceService, reflections: ReflectionService, rule: ReviewRuleFactory
    ) -> None:
        self.db = db
        self.namespaces = namespaces
        self.reflections = reflections
        self.rule = rule

    def _rule(self, ns: str) -> ReviewRule:
        _, successes, total = self.namespaces.ranking_inputs(ns)
        with self.db.read() as session:
            holdouts = retrievals_repo.list_holdout_counts(session, ns)
        return self.rule(ranking.baseline_rate(successes, total), holdouts)

    def queue(
        self,
        principal: Principal,
        ns: str,
        *,
        filters: ReviewFilters | None = None,
        cursor: str | None,
        limit: int,
    ) -> ReviewPage:
        principal.require(Permission.REFLECTIONS_READ, ns)
        f = filters or ReviewFilters()
        if f.reason is not None and f.reason not in REASONS:
            raise InvalidInput(f"reason {f.reason!r} is not one of {', '.join(REASONS)}", field="reason", rule="enum")
        rule = self._rule(ns)
        before = decode_pair_cursor(cursor, "review", lambda impact, pk: (float(impact), int(pk)))
        with self.db.read() as session:
            self.namespaces.require(session, ns)
            rows = repo.list_review_queue(session, ns, rule, filters=f, before=before, limit=limit + 1)
            counts = repo.list_review_counts(session, ns, rule)
            page = rows[:limit]
            citations = repo.list_citations(
                session,
                [e.reflection.pk for e in page],
                per_item=CITATIONS_SHOWN,
                steps_per_citation=STEPS_SHOWN,
            )
        next_cursor = (
            encode_pair_cursor("review", repr(page[-1].impact), str(page[-1].reflection.pk))
            if len(rows) > limit
            else None
        )
        return ReviewPage(page, next_cursor, rule.baseline, counts, citations, f)

    def decide_many(
        self, principal: Principal, ns: str, ids: Sequence[str], decision: str, *, note: str | None
    ) -> DecisionsResult:
        """The same decision on each of `ids`, each recorded as a single decision is
        (its own transaction and history entry); an item whose state does not allow
        it, or that is gone, is refused and the rest go on."""
        principal.require(Permission.REFLECTIONS_CURATE, ns)
        if len(ids) > MAX_SELECTED:
            raise InvalidInput(f"at most {MAX_SELECTED} items at once", field="id", rule="max_items")
        out = DecisionsResult([], [])
        for id in dict.fromkeys(ids):  # once each, in the order given
            try:
                self.decide(principal, ns, id, decision, note=note, expected_version=None)
            except (Conflict, NotFound) as exc:
                out.refused.append((id, exc.message))
            else:
                out.decided.append(id)
        return out

    def decide(
        self, principal: Principal, ns: str, id: str, decision: str, *, note: str | None, expected_version: int | None
    ) -> str:
        """Record one decision; returns the history action it was recorded as."""
        principal.require(Permission.REFLECTIONS_CURATE, ns)
        if decision not in DECISIONS:
            raise InvalidInput(
                f"decision {decision!r} is not one of {', '.join(DECISIONS)}", field="decision", rule="enum"
            )
        actor = f"key:{principal.key_id}"

        def work(session: Session) -> str:
            row = self.reflections.editable(session, ns, id, expected_version)
            if decision == "keep":
                if row.status != "active":
                    raise Conflict(
                        f"reflection {id!r} is {row.status}; only an active item is kept",
                        field="decision",
                        rule="state",
                    )
                reflection_repo.update_reflection_kept(session, row, actor=actor, note=note)
                return "keep"
            new = "active" if decision == "approve" else "retired"
            if row.status == new:
                raise Conflict(f"reflection {id!r} is already {new}", field="decision", rule="state")
            action = self.reflections.change_status(session, row, new, actor=actor, note=note)
            return action

        return self.db.run_write(work)
