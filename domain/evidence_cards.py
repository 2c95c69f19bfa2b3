"""Evidence cards (Pats): per task, what sibling rollouts did that worked and what
failed. The card's content is derived from rollouts alone, here, by one function
(`build_card`): the evidence-card reflector (reflectors/evidence_cards.py) builds a
task's card from its latest rollout groups with it, and the distill contexts
(service/distill) rebuild a card from its evidence minus what a leakage guard
excludes with it.

Pure: a rollout is any (trajectory, steps) pair with the fields below (ORM rows or
read records alike).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import orjson

TOP = 5  # actions listed as worked / failed


class RunTrajectory(Protocol):
    @property
    def pk(self) -> int: ...
    @property
    def id(self) -> str: ...
    @property
    def group_id(self) -> str | None: ...
    @property
    def success(self) -> bool | None: ...
    @property
    def failure_reason(self) -> str | None: ...


class RunStep(Protocol):
    @property
    def observation(self) -> str: ...
    @property
    def action(self) -> Any: ...
    @property
    def caused_failure(self) -> bool: ...


Run = tuple[RunTrajectory, Sequence[RunStep]]


def action_key(action: Any) -> str:
    text = action if isinstance(action, str) else orjson.dumps(action, option=orjson.OPT_SORT_KEYS).decode()
    return " ".join(text.split()).lower()


@dataclass(frozen=True)
class _ActionStat:
    action: str
    in_successful: int
    in_failed: int


def _contrast(runs: Sequence[Run]) -> tuple[list[_ActionStat], list[_ActionStat]]:
    """Actions that separate successful from failed rollouts: the share of successful
    rollouts using an action minus the share of failed ones (and the reverse)."""
    won = [{action_key(s.action) for s in steps} for t, steps in runs if t.success]
    lost = [{action_key(s.action) for s in steps} for t, steps in runs if t.success is False]
    in_won, in_lost = Counter(a for acts in won for a in acts), Counter(a for acts in lost for a in acts)
    stats = [_ActionStat(a, in_won[a], in_lost[a]) for a in sorted(set(in_won) | set(in_lost))]

    def lift(s: _ActionStat) -> float:
        return s.in_successful / max(1, len(won)) - s.in_failed / max(1, len(lost))

    worked = sorted((s for s in stats if lift(s) >= 0.5 and s.in_successful >= 2), key=lambda s: (-lift(s), s.action))
    failed = sorted((s for s in stats if lift(s) <= -0.5 and s.in_failed >= 2), key=lambda s: (lift(s), s.action))
    return worked[:TOP], failed[:TOP]


def build_card(task: str, runs: Sequence[Run]) -> dict[str, Any]:
    """A task's card from its rollouts: what separated successes from failures, what
    caused the failures, the failure reasons, the shortest success. `content["text"]`
    is its rendering. Used by the evidence-card reflector on the latest rollout
    groups, and by the distill contexts to rebuild a card without the rollouts a
    leakage guard excludes (the same function: the same card from the same runs)."""
    wins = [t for t, _ in runs if t.success]
    worked, failed = _contrast(runs)
    causes = Counter(
        (action_key(s.action), " ".join(s.observation.split())[:160])
        for t, steps in runs
        if t.success is False
        for s in steps
        if s.caused_failure
    )
    reasons = Counter(t.failure_reason for t, _ in runs if t.success is False and t.failure_reason)
    best = min(((t, steps) for t, steps in runs if t.success), key=lambda r: (len(r[1]), r[0].pk), default=None)
    content: dict[str, Any] = {
        "task": task,
        "groups": sorted({t.group_id for t, _ in runs if t.group_id}),
        "rollouts": len(runs),
        "successes": len(wins),
        "success_rate": round(len(wins) / len(runs), 4) if runs else 0.0,
        "worked": [s.__dict__ for s in worked],
        "failed": [s.__dict__ for s in failed],
        "failure_causes": [{"action": a, "observation": o, "count": n} for (a, o), n in causes.most_common(TOP)],
        "failure_reasons": [{"reason": r, "count": n} for r, n in reasons.most_common(TOP)],
        "best_rollout": None
        if best is None
        else {
            "trajectory_id": best[0].id,
            "steps": len(best[1]),
            "actions": [action_key(s.action) for s in best[1]][:30],
        },
    }
    content["text"] = render_card(content)
    return content


def render_card(c: dict[str, Any]) -> str:
    n_won = c["successes"]
    n_lost = c["rollouts"] - n_won
    lines = [
        f"Task: {c['task']}",
        f"Evidence from {len(c['groups'])} rollout group(s): {c['rollouts']} rollouts, {n_won} succeeded.",
    ]

    def successes(s: dict[str, Any]) -> str:
        return f"{s['in_successful']}/{n_won} successes"

    def failures(s: dict[str, Any]) -> str:
        return f"{s['in_failed']}/{n_lost} failures"

    # An action's counts, the side it is listed for first.
    for key, label, first, then in (
        ("worked", "Worked", successes, failures),
        ("failed", "Failed", failures, successes),
    ):
        if c[key]:
            lines.append(f"{label}: " + "; ".join(f"'{s['action']}' (in {first(s)}, {then(s)})" for s in c[key]))
    if c["failure_causes"]:
        lines.append(
            "Failures were caused by: "
            + "; ".join(f"'{x['action']}' when '{x['observation']}' ({x['count']}x)" for x in c["failure_causes"])
        )
    if c["failure_reasons"]:
        lines.append("Failure reasons: " + "; ".join(f"{x['reason']} ({x['count']}x)" for x in c["failure_reasons"]))
    if c["best_rollout"]:
        b = c["best_rollout"]
        lines.append(f"Shortest success ({b['steps']} steps): " + " -> ".join(b["actions"]))
    return "\n".join(lines)
