"""Turning retrieved exemplars into an action.

Each exemplar says: in a state like this, action *a* was taken ``count`` times,
``success_count`` of them in episodes that succeeded, ``failure_count`` of them
debited as the cause of a failure, with mean return-to-go ``return_to_go`` (the
discounted reward that followed: high when success came soon after).

Only the nearest states count (by the state match; the subgoal only ranks what
the server returns): with an exact match the agent acts on that state
alone (a look-alike state of another world must not outvote it), otherwise on the
items within ``margin`` of the best similarity and above ``min_similarity``.
Per action, the value is the mean return-to-go over those items, weighted by how
many steps each merged and by the server's utility factor (``score / similarity``:
items served in successful episodes rank higher), so outcome feedback moves the
choice, not only the order.

The choice: the highest-valued action with success evidence (unless it keeps
failing to change anything here in this episode), never an action whose evidence
is mostly failures, otherwise explore: the action least tried in these states in
past episodes (memory makes exploration systematic across episodes, instead of
starting from scratch every time), then the least tried in this episode.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from reflexa.models import RetrievedItem

from examples.common.rules import EpisodeRules


@dataclass
class ActionEvidence:
    weight: float = 0.0
    value_sum: float = 0.0
    count: int = 0  # steps in past episodes that took this action in these states
    successes: int = 0
    failures: int = 0
    items: list[str] = field(default_factory=list)

    @property
    def value(self) -> float:
        return self.value_sum / self.weight if self.weight else 0.0


@dataclass(frozen=True)
class MemoryParams:
    min_similarity: float = 0.8
    margin: float = 0.02
    exact: float = 0.999  # similarity at which a state counts as the same state
    loop_limit: int = 2  # a recalled action tried this often here in this episode is not trusted again


def nearest(items: Sequence[RetrievedItem], params: MemoryParams) -> list[RetrievedItem]:
    if not items:
        return []
    # The state match alone decides what counts as "this state": the joint similarity
    # also weighs the internal state, so the same view under another mission (another
    # world's "go to the red ball") would never count as the same state.
    best = max(i.state_similarity for i in items)
    if best >= params.exact:  # this very state was seen: its own record beats any look-alike
        return [i for i in items if i.state_similarity >= params.exact]
    floor = max(params.min_similarity, best - params.margin)
    return [i for i in items if i.state_similarity >= floor]


def evidence_by_action(
    items: Sequence[RetrievedItem], actions: Sequence[str], params: MemoryParams
) -> dict[str, ActionEvidence]:
    valid = set(actions)
    out: dict[str, ActionEvidence] = {}
    for item in nearest(items, params):
        content = item.content
        action = content.get("action")
        if not isinstance(action, str) or action not in valid:
            continue
        count = int(content.get("count") or 1)
        successes = int(content.get("success_count", 1 if content.get("success") is True else 0))
        failures = int(content.get("failure_count", 1 if content.get("success") is False else 0))
        utility = item.score / item.similarity if item.similarity > 0 else 1.0
        ev = out.setdefault(action, ActionEvidence())
        ev.count += count
        ev.weight += count * utility
        ev.value_sum += count * utility * float(content.get("return_to_go") or 0.0)
        ev.successes += successes
        ev.failures += failures
        ev.items.append(item.id)
    return out


def choose(
    evidence: dict[str, ActionEvidence],
    rules: EpisodeRules,
    state: str,
    actions: tuple[str, ...],
    params: MemoryParams,
) -> tuple[str, str]:
    """(action, why): why is "memory" when recalled evidence decided, else "explore"."""
    allowed = rules.allowed(state, actions)
    avoid = {a for a, ev in evidence.items() if ev.failures > ev.successes}
    good = [
        a
        for a in allowed
        if a in evidence
        and a not in avoid
        and evidence[a].successes > 0
        and evidence[a].value > 0
        and rules.tried(state, a) < params.loop_limit
    ]
    if good:
        return max(good, key=lambda a: (evidence[a].value, evidence[a].successes)), "memory"
    candidates = [a for a in allowed if a not in avoid] or allowed
    fewest = min(_past(evidence, a) for a in candidates)
    return rules.explore(state, [a for a in candidates if _past(evidence, a) == fewest]), "explore"


def _past(evidence: dict[str, ActionEvidence], action: str) -> int:
    return evidence[action].count if action in evidence else 0
