"""The pre-action check (MIRROR-style reflection before acting): what happened when
this action was taken in states like this one, and what else was tried there.

The exemplars come from the retrieval service itself (kind `exemplar`, the request's
state, internal state, task, environment and filters), so "like this" means what it
means for retrieve: an exact match of the state ranks first, then by similarity.
Of the `k` exemplars retrieved, those whose environment state has
`state_similarity >= min_similarity` (and every exact match) are the states like
this; the internal state, matched jointly, only ranks them. Their merged counts are summed per action:
a success is a credited step, a failure a debited one (docs/retrieval.md, "Credit
goes to the step that caused it"); a failed episode's other steps are attempts of
neither kind, but count in `support`.

Rates come with 95% Wilson score intervals (docs/api.md, "Pre-action check").
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from typing import Any

from service.auth import Permission, Principal
from service.check import repository as repo
from service.check.schemas import (
    CheckAlternative,
    CheckEvidence,
    CheckHeuristic,
    CheckRequest,
    CheckResponse,
    CheckRisk,
)
from service.limits.checks import LimitChecker
from service.retrieval.schemas import RetrievedItem, RetrieveRequest
from service.retrieval.service import RetrievalService
from service.trajectories.schemas import State
from store.database import Database

Z95 = 1.959963984540054  # the standard normal's 97.5% quantile
EVIDENCE_MAX = 20
HEURISTICS_MAX = 20


def wilson_interval(successes: int, n: int, z: float = Z95) -> tuple[float, float] | None:
    """The Wilson score interval of a binomial proportion (Wilson 1927):

        center = (p + z²/2n) / (1 + z²/n)
        half   = z / (1 + z²/n) · sqrt(p(1 − p)/n + z²/4n²)

    with p = successes / n; None when n = 0. Clamped to [0, 1] (rounding only)."""
    if n <= 0:
        return None
    p = successes / n
    denom = 1.0 + z * z / n
    center = (p + z * z / (2 * n)) / denom
    half = z / denom * math.sqrt(p * (1.0 - p) / n + z * z / (4 * n * n))
    return max(0.0, center - half), min(1.0, center + half)


def action_key(action: Any) -> str:
    """What makes two actions the same: text compared with runs of whitespace made one
    space, trimmed and case-folded; an object compared as JSON with sorted keys. The
    keys also order tied alternatives: text ("a:") before objects ("o:")."""
    if isinstance(action, str):
        return "a:" + " ".join(action.split()).casefold()
    return "o:" + json.dumps(action, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def action_phrase(action: Any) -> str | None:
    """The words a heuristic names an action by: the text itself, or a tool call's
    `name` (else `tool`) when it is a string; None otherwise."""
    if isinstance(action, dict):
        action = next((action[k] for k in ("name", "tool") if isinstance(action.get(k), str)), None)
    if not isinstance(action, str) or not action.split():
        return None
    return " ".join(action.split())


def names_pattern(phrase: str) -> re.Pattern[str]:
    """A heuristic names the action when the phrase occurs in its trigger or guideline
    as a whole phrase: case-insensitive, any run of whitespace between its words, and
    no letter, digit or underscore right before or after it."""
    body = r"\s+".join(re.escape(w) for w in phrase.split())
    return re.compile(rf"(?<!\w){body}(?!\w)", re.IGNORECASE)


def _prefilter_word(phrase: str) -> str | None:
    """The longest run of ASCII letters and digits in the phrase (what SQL can look for
    case-insensitively on both engines), lower-cased; None if there is none. Every
    text that names the phrase holds it."""
    runs = [w.lower() for w in re.findall(r"[A-Za-z0-9]+", phrase)]
    return max(runs, key=len) if runs else None


@dataclass
class _Tally:
    action: Any
    successes: int = 0
    failures: int = 0
    support: int = 0
    items: list[RetrievedItem] = field(default_factory=list)

    @property
    def attempts(self) -> int:
        return self.successes + self.failures

    def add(self, item: RetrievedItem) -> None:
        c = item.content
        self.successes += int(c.get("success_count") or 0)
        self.failures += int(c.get("failure_count") or 0)
        self.support += int(c.get("count") or 0)
        self.items.append(item)


def _rate(x: int, n: int) -> tuple[float | None, float | None, float | None]:
    interval = wilson_interval(x, n)
    if interval is None:
        return None, None, None
    return x / n, interval[0], interval[1]


class CheckService:
    def __init__(self, db: Database, retrieval: RetrievalService, checker: LimitChecker) -> None:
        self.db = db
        self.retrieval = retrieval
        self.checker = checker

    def check(self, principal: Principal, ns: str, req: CheckRequest, *, log: bool = True) -> CheckResponse:
        """`log=False` (the operator UI's preview): the same answer, but the exemplars'
        retrieval is not logged, so nothing can be credited and no retrieval_id comes back."""
        principal.require(Permission.RETRIEVE, ns)
        if isinstance(req.action, dict):
            self.checker.json(req.action, "action")  # bounded as a step's action is
        # The namespace (404), the state's limits and the retrieval log: the retrieve's.
        query = RetrieveRequest(
            state=State(observation=req.state.observation, data=req.state.data),
            internal_state=req.internal_state,
            task=req.task,
            environment=req.environment,
            kinds=["exemplar"],
            k=req.k,
            filters=req.filters,
            consistency_token=req.consistency_token,
            wait_timeout_ms=req.wait_timeout_ms,
        )
        # holdout=False: the check sums its exemplars' statistics; withholding some at
        # random would move its risk estimate, and none of them is served as an item.
        [found] = self.retrieval.retrieve_many(principal, ns, [query], field="", log=log, holdout=False)
        # Like this by the environment state: the agent's plan ranks, it does not exclude.
        like = [i for i in found.items if i.exact_match or i.state_similarity >= req.min_similarity]

        mine = action_key(req.action)
        tallies: dict[str, _Tally] = {}
        for item in like:  # in the retrieve's order: exact matches first, then by score
            act = item.content.get("action")
            tallies.setdefault(action_key(act), _Tally(act)).add(item)
        this = tallies.pop(mine, _Tally(req.action))

        rate, low, high = _rate(this.failures, this.attempts)
        phrase = action_phrase(req.action)
        with self.db.read() as session:
            evidence = self._evidence(session, ns, this.items)
            heuristics = self._heuristics(session, ns, phrase, req.environment) if phrase else []
        return CheckResponse(
            risk=CheckRisk(rate=rate, low=low, high=high, failures=this.failures, attempts=this.attempts),
            support=this.support,
            exact_match=any(i.exact_match for i in this.items),
            states=len(like),
            evidence=evidence,
            alternatives=_alternatives(tallies),
            heuristics=heuristics,
            retrieval_id=found.retrieval_id,
            waited_ms=found.waited_ms,
        )

    @staticmethod
    def _evidence(session: Any, ns: str, items: list[RetrievedItem]) -> list[CheckEvidence]:
        out: list[CheckEvidence] = []
        for item in items:
            if len(out) >= EVIDENCE_MAX:
                break
            for step in repo.list_evidence_steps(session, ns, item.id, EVIDENCE_MAX - len(out)):
                out.append(
                    CheckEvidence(
                        exemplar_id=item.id,
                        trajectory_id=step.trajectory_id,
                        step_index=step.step_index,
                        similarity=item.state_similarity,
                        exact_match=item.exact_match,
                        success=step.success,
                        result=step.result,
                        error=step.error,
                    )
                )
        return out

    @staticmethod
    def _heuristics(session: Any, ns: str, phrase: str, environment: str | None) -> list[CheckHeuristic]:
        pattern = names_pattern(phrase)
        out: list[CheckHeuristic] = []
        rows = repo.iter_active_heuristics(session, ns, contains=_prefilter_word(phrase), environment=environment)
        for id_, content, text in rows:
            said = [content.get(k) for k in ("trigger", "guideline")]
            if any(isinstance(s, str) and pattern.search(s) for s in said):
                out.append(CheckHeuristic(id=id_, text=text))
                if len(out) >= HEURISTICS_MAX:
                    break
        return out


def _alternatives(tallies: dict[str, _Tally]) -> list[CheckAlternative]:
    """Best first: the Wilson lower bound of the success rate (none last), then the
    rate, then support, then the action's key (text before objects, then bytewise)."""
    rows: list[tuple[tuple[Any, ...], CheckAlternative]] = []
    for key, t in tallies.items():
        rate, low, high = _rate(t.successes, t.attempts)
        alt = CheckAlternative(
            action=t.action,
            success_rate=rate,
            low=low,
            high=high,
            successes=t.successes,
            failures=t.failures,
            attempts=t.attempts,
            support=t.support,
        )
        rows.append(((low is None, -(low or 0.0), -(rate or 0.0), -t.support, key), alt))
    return [alt for _, alt in sorted(rows, key=lambda r: r[0])]
