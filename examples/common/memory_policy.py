"""Turning retrieved exemplars into an action.

Each exemplar says: in a state like this, action *a* was taken ``count`` times,
``success_count`` of them in episodes that succeeded, ``failure_count`` of them
debited as the cause of a failure, with mean return-to-go ``return_to_go`` (the
discounted reward that followed: high when success came soon after).

The agent acts on the items in the order the server ranked them, and only on the
nearest (see :func:`nearest`): the server's exact matches of this state first (it
ranks them above every other item and flags them ``exact_match``), this very
situation before the same state met elsewhere, then the top-ranked look-alikes.
Per action, the value is the mean return-to-go over those items, weighted by how
many steps each merged; the server's rank breaks ties (within the exact matches,
and among look-alikes within its similarity band, the rank is utility's say).

The choice: the highest-valued action with rewarding evidence (unless following
it is going round in circles in this episode), never an action whose evidence
is mostly failures, otherwise explore: the action least tried in these states in
past episodes among those equally new in this episode (memory makes exploration
systematic across episodes, instead of starting from scratch every time).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from reflexa.models import RetrievedItem

from examples.common.rules import EpisodeRules


@dataclass
class ActionEvidence:
    rank: int  # the server's rank of the first item for this action (0 = top)
    count: int = 0  # steps in past episodes that took this action in these states
    value_sum: float = 0.0
    successes: int = 0
    failures: int = 0

    @property
    def value(self) -> float:
        """Mean return-to-go: how well taking this action here went, failures included."""
        return self.value_sum / self.count if self.count else 0.0


@dataclass(frozen=True)
class MemoryParams:
    min_similarity: float = 0.8  # a look-alike below this (the server's similarity) is no evidence
    margin: float = 0.02  # look-alikes scoring within this of the top-ranked one
    loop_limit: int = 2  # see _looping


def nearest(
    items: Sequence[RetrievedItem], params: MemoryParams, situation: Mapping[str, Any] | None = None
) -> tuple[list[RetrievedItem], str]:
    """The items to act on, in the server's order, and how they match the query:

    - ``"same"``: exact matches (the server's ``exact_match``: the same state text
      and internal state) whose structured state is this ``situation`` (the one
      the agent sent: same world, same place); the server does not compare
      structured state (it is not part of the state text), so the agent does, on
      the ``state_data`` each exemplar carries;
    - ``"state"``: exact matches from another situation (another world, another
      place): what was done in this view elsewhere;
    - ``"near"``: no exact match: the top-ranked items, those scoring within
      ``margin`` of the first (and at least ``min_similarity`` similar);
    - ``"none"``: nothing close enough.

    Each level is used only when the one before it is empty: a look-alike never
    outvotes the record of this very situation.
    """
    ranked = list(items)  # the server's order: exact matches first, then by score
    exact = [i for i in ranked if i.exact_match]
    same = [i for i in exact if situation is not None and i.content.get("state_data") == dict(situation)]
    if same:
        return same, "same"
    if exact:
        return exact, "state"
    if not ranked:
        return [], "none"
    floor = ranked[0].score - params.margin
    near = [i for i in ranked if i.score >= floor and i.similarity >= params.min_similarity]
    return near, "near" if near else "none"


def evidence_by_action(items: Sequence[RetrievedItem], actions: Sequence[str]) -> dict[str, ActionEvidence]:
    """Per valid action, what ``items`` (in the server's order, see :func:`nearest`) say."""
    valid = set(actions)
    out: dict[str, ActionEvidence] = {}
    for rank, item in enumerate(items):
        content = item.content
        action = content.get("action")
        if not isinstance(action, str) or action not in valid:
            continue
        count = int(content.get("count") or 1)
        successes = int(content.get("success_count", 1 if content.get("success") is True else 0))
        failures = int(content.get("failure_count", 1 if content.get("success") is False else 0))
        ev = out.setdefault(action, ActionEvidence(rank))
        ev.count += count
        ev.value_sum += count * float(content.get("return_to_go") or 0.0)
        ev.successes += successes
        ev.failures += failures
    return out


def choose(
    evidence: dict[str, ActionEvidence],
    rules: EpisodeRules,
    state: str,
    actions: tuple[str, ...],
    params: MemoryParams,
    *,
    exact: bool = False,
) -> tuple[str, str]:
    """(action, why): why is "memory" when recalled evidence decided, else "explore".
    ``exact``: the evidence is about this very state (not look-alikes)."""
    allowed = rules.allowed(state, actions)
    avoid = {a for a, ev in evidence.items() if ev.failures > ev.successes}
    good = [
        a
        for a in allowed
        if a in evidence and a not in avoid and evidence[a].value > 0 and not _looping(rules, state, a, params)
    ]
    if good:
        return max(good, key=lambda a: (evidence[a].value, evidence[a].successes, -evidence[a].rank)), "memory"
    candidates = [a for a in allowed if a not in avoid] or allowed
    # This episode's novelty first (it breaks loops); among equally new actions,
    # the one least tried here in past episodes (only an exact state's counts say
    # what was tried *here*).
    newest = min(rules.novelty(state, a)[0] for a in candidates)
    candidates = [a for a in candidates if rules.novelty(state, a)[0] == newest]
    if exact:
        fewest = min(_past(evidence, a) for a in candidates)
        candidates = [a for a in candidates if _past(evidence, a) == fewest]
    return rules.explore(state, candidates), "explore"


def _looping(rules: EpisodeRules, state: str, action: str, params: MemoryParams) -> bool:
    """Recalled values are means over mixed experience, so following them can cycle:
    stop trusting an action already taken here ``loop_limit`` times in this episode."""
    return rules.tried(state, action) >= params.loop_limit


def _past(evidence: dict[str, ActionEvidence], action: str) -> int:
    return evidence[action].count if action in evidence else 0
