"""Export rows from stored trajectories and steps: pure functions, no I/O.

Chat messages are the `{"role", "content"}` lists TRL's trainers read. The plain
prompt of an sft row is the plain context of domain.contexts.plain, the one the
distill contexts give a trainer (system: the task; then the earlier steps as
user/assistant turns; last the current observation). An action is shown as its
text, a tool-call object as its JSON text (sorted keys).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from domain.contexts.plain import DEFAULT_HISTORY_MAX_CHARS, HistoryStep, PlainHistory, action_text
from domain.contexts.templates import ContextTemplate
from service.export.formats import json_text

Row = Mapping[str, Any]
Message = dict[str, str]

SECTION_ITEMS = 10  # most lines in one section of an attempt reflection
REFLECTION_FIELD_CHARS = 300


def shorten(text: str, max_chars: int) -> str:
    """`text` cut to about `max_chars`, keeping head and tail (the end of an
    observation is often what matters: an error, the last lines)."""
    if len(text) <= max_chars:
        return text
    head = max_chars * 2 // 3
    tail = max_chars - head
    return f"{text[:head]} …[{len(text) - head - tail} characters cut]… {text[-tail:]}"


def state_text(observation: str, data: Any) -> str:
    """The state as the agent saw it: the observation, then its structured data."""
    if data is None:
        return observation
    return f"{observation}\n\nState data: {json_text(data)}"


def message(role: str, content: str) -> Message:
    return {"role": role, "content": content}


# -- trajectories -------------------------------------------------------------------


def step_row(step: Row) -> dict[str, Any]:
    return {
        "index": step["index"],
        "observation": step["observation"],
        "state_data": step["state_data"],
        "internal_state": step["internal_state"],
        "action": step["action"],
        "result": step["result"],
        "error": step["error"],
        "reward": step["reward"],
        "done": step["done"],
        "truncated": step["truncated"],
        "caused_failure": step["caused_failure"],
        "policy_version": step["policy_version"],
        "rollout_logprobs": step["rollout_logprobs"],
        "rollout_token_ids": step["rollout_token_ids"],
    }


def trajectory_row(t: Row, steps: Sequence[Row]) -> dict[str, Any]:
    return {
        "id": t["id"],
        "task": t["task"],
        "environment": t["environment"],
        "agent": t["agent"],
        "policy_version": t["policy_version"],
        "group_id": t["group_id"],
        "parent_trajectory_id": t["parent_trajectory_id"],
        "attempt": t["attempt"],
        "status": t["status"],
        "success": t["success"],
        "reward": t["reward"],
        "failure_reason": t["failure_reason"],
        "metadata": t["metadata"],
        "created_at": t["created_at"],
        "closed_at": t["closed_at"],
        "step_count": t["step_count"],
        "steps": [step_row(s) for s in steps],
    }


# -- sft ------------------------------------------------------------------------------


def history_step(step: Row) -> HistoryStep:
    """A stored step as the plain context shows it."""
    return HistoryStep(
        observation=step["observation"],
        action=step["action"],
        result=step["result"],
        error=step["error"],
        data=step["state_data"],
    )


def sft_rows(
    t: Row,
    steps: Sequence[Row],
    *,
    template: ContextTemplate,
    history: int | None,
    history_max_chars: int = DEFAULT_HISTORY_MAX_CHARS,
) -> Iterator[dict[str, Any]]:
    """One row per step: the plain context of that step (domain.contexts.plain, the
    distill contexts' `plain`) and its action as the answer."""
    plain = PlainHistory(template, t["task"], [history_step(s) for s in steps])
    for position, step in enumerate(steps):
        messages, _ = plain.messages(position, history_max_chars, history)
        messages.append(message("assistant", action_text(step["action"])))
        yield sft_row(messages, t["id"], step["index"], template_version=template.id)


def sft_row(
    messages: list[Message],
    trajectory_id: str,
    step: int,
    *,
    context: str = "plain",
    template_version: str | None = None,
    item_ids: Sequence[str] = (),
) -> dict[str, Any]:
    return {
        "messages": messages,
        "trajectory_id": trajectory_id,
        "step": step,
        "context": context,
        "template_version": template_version,
        "item_ids": list(item_ids),
    }


# -- preferences -------------------------------------------------------------------------


@dataclass
class _Side:
    """Distinct actions taken at one state on one side (successful or failed), in
    the order first seen, at most `cap` of them."""

    cap: int
    actions: dict[str, tuple[int, int, str, bool]] = field(default_factory=dict)
    # key -> (trajectory pk, step index, trajectory id, caused_failure)

    def add(self, key: str, trajectory_pk: int, index: int, trajectory_id: str, caused_failure: bool) -> None:
        seen = self.actions.get(key)
        if seen is None:
            if len(self.actions) < self.cap:
                self.actions[key] = (trajectory_pk, index, trajectory_id, caused_failure)
        elif caused_failure and not seen[3]:
            # A failed side prefers the step that was marked as causing the failure.
            self.actions[key] = (trajectory_pk, index, trajectory_id, caused_failure)


@dataclass
class MatchedState:
    task: str
    observation: str
    data: Any
    chosen: _Side
    rejected: _Side
    actions: dict[str, Any] = field(default_factory=dict)  # key -> the action as stored


@dataclass(frozen=True)
class Pair:
    state: MatchedState
    chosen_key: str
    rejected_key: str

    @property
    def chosen(self) -> tuple[int, int, str, bool]:
        return self.state.chosen.actions[self.chosen_key]

    @property
    def rejected(self) -> tuple[int, int, str, bool]:
        return self.state.rejected.actions[self.rejected_key]


class StateMatcher:
    """Steps of one task's closed trajectories, grouped by state (the same
    observation text and the same state data), keeping per state the distinct
    actions of successful and of failed trajectories. Memory: the distinct states
    of the task, with at most `2 * cap` actions each."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        # One side keeps up to 2*cap actions so that, after the pairs whose
        # actions are equal are dropped, `cap` pairs can still be formed.
        self.states: dict[tuple[str, str, str], MatchedState] = {}

    def add(self, t: Row, step: Row) -> None:
        data_key = "" if step["state_data"] is None else json_text(step["state_data"])
        key = (t["task"], step["observation"], data_key)
        state = self.states.get(key)
        if state is None:
            state = MatchedState(
                t["task"], step["observation"], step["state_data"], _Side(2 * self.cap), _Side(2 * self.cap)
            )
            self.states[key] = state
        akey = json_text(step["action"])
        side = state.chosen if t["success"] else state.rejected
        side.add(akey, t["pk"], step["index"], t["id"], bool(step["caused_failure"]))
        if akey in side.actions:  # (not past the cap)
            state.actions.setdefault(akey, step["action"])

    def pairs(self) -> Iterator[Pair]:
        """Per state (in the order first seen), at most `cap` pairs of different
        actions, spread over the candidates: (c0, r0), (c0, r1), (c1, r0), … and
        failed steps marked caused_failure first."""
        for state in self.states.values():
            if not state.chosen.actions or not state.rejected.actions:
                continue
            chosen = list(state.chosen.actions)
            rejected = sorted(state.rejected.actions, key=lambda k: not state.rejected.actions[k][3])
            grid = [(i, j) for i in range(len(chosen)) for j in range(len(rejected)) if chosen[i] != rejected[j]]
            grid.sort(key=lambda ij: (ij[0] + ij[1], ij[0]))
            for i, j in grid[: self.cap]:
                yield Pair(state, chosen[i], rejected[j])


@dataclass(frozen=True)
class Hint:
    id: str
    text: str


def preference_row(pair: Pair, hint: Hint | None, *, hints_in_prompt: bool) -> dict[str, Any]:
    state = pair.state
    system = state.task
    if hint is not None and hints_in_prompt:
        system = f"{state.task}\n\nHint: {hint.text}"
    prompt = [message("system", system), message("user", state_text(state.observation, state.data))]
    chosen, rejected = pair.chosen, pair.rejected
    return {
        "prompt": prompt,
        "chosen": [message("assistant", action_text(state.actions[pair.chosen_key]))],
        "rejected": [message("assistant", action_text(state.actions[pair.rejected_key]))],
        "state": {"observation": state.observation, "data": state.data},
        "chosen_trajectory_id": chosen[2],
        "chosen_step": chosen[1],
        "rejected_trajectory_id": rejected[2],
        "rejected_step": rejected[1],
        "hint": hint.text if hint else None,
        "hint_id": hint.id if hint else None,
    }


def _covers(start: int | None, end: int | None, index: int) -> bool:
    if start is None:
        return True  # the whole trajectory
    return start <= index <= (start if end is None else end)


def choose_hint(pair: Pair, evidence: Sequence[Row]) -> Hint | None:
    """The active heuristic with evidence from both trajectories of the pair (as a
    contrastive heuristic has): one whose evidence covers both steps first, then
    the best supported, then the oldest. `evidence`: rows of read_heuristic_evidence."""
    sides = {pair.chosen[0]: (0, pair.chosen[1]), pair.rejected[0]: (1, pair.rejected[1])}
    rows: dict[int, Row] = {}
    cites: dict[int, list[bool]] = {}  # reflection pk -> [cites chosen, cites rejected, covers chosen, covers rejected]
    for e in evidence:
        if e["trajectory_pk"] not in sides:
            continue
        side, index = sides[e["trajectory_pk"]]
        rows.setdefault(e["reflection_pk"], e)
        flags = cites.setdefault(e["reflection_pk"], [False, False, False, False])
        flags[side] = True
        flags[2 + side] = flags[2 + side] or _covers(e["step_start"], e["step_end"], index)
    both = [pk for pk, flags in cites.items() if flags[0] and flags[1]]
    if not both:
        return None
    best = min(both, key=lambda pk: (not (cites[pk][2] and cites[pk][3]), -(rows[pk]["evidence_count"] or 0), pk))
    return Hint(rows[best]["id"], rows[best]["text"])


# -- attempts ------------------------------------------------------------------------------


def _outcome(t: Row) -> str:
    parts = ["succeeded" if t["success"] else "failed" if t["success"] is False else "ended with no outcome"]
    if t["reward"] is not None:
        parts.append(f"with reward {t['reward']:g}")
    return " ".join(parts)


def attempt_reflection(t: Row, steps: Sequence[Row]) -> str:
    """What an attempt established (actions and what they led to), failed at (its
    failure reason and the steps marked caused_failure) and planned (its internal
    states), as a structured summary for the next attempt."""
    cut = REFLECTION_FIELD_CHARS
    established = [
        f"- [{s['index']}] {shorten(action_text(s['action']), cut)} -> {shorten(s['result'], cut)}"
        for s in steps
        if s["result"] and not s["error"] and not s["caused_failure"]
    ][-SECTION_ITEMS:]
    failed = [f"- {shorten(t['failure_reason'], cut)}"] if t["failure_reason"] else []
    for s in steps:
        if s["caused_failure"]:
            what = s["error"] or s["result"]
            after = f": {shorten(what, cut)}" if what else ""
            failed.append(f"- [{s['index']}] {shorten(action_text(s['action']), cut)} caused the failure{after}")
    planned: list[str] = []
    seen: set[str] = set()
    for s in steps:
        plan = (s["internal_state"] or "").strip()
        if plan and plan not in seen and len(planned) < SECTION_ITEMS:
            seen.add(plan)
            planned.append(f"- [{s['index']}] {shorten(plan, cut)}")
    count = f"{len(steps)} step" + ("" if len(steps) == 1 else "s")
    lines = [f"Attempt {t['attempt'] or 1} {_outcome(t)} after {count}."]
    for title, items in (
        ("What it established:", established),
        ("What it failed at:", failed[: SECTION_ITEMS + 1]),
        ("What it planned:", planned),
    ):
        if items:
            lines += ["", title, *items]
    return "\n".join(lines)


def steps_summary(steps: Sequence[Row]) -> str:
    """One line per step: `[i] action -> result`."""
    lines = []
    for s in steps:
        after = s["error"] or s["result"]
        mark = " (caused the failure)" if s["caused_failure"] else ""
        tail = f" -> {shorten(after, REFLECTION_FIELD_CHARS)}" if after else ""
        lines.append(f"[{s['index']}] {shorten(action_text(s['action']), REFLECTION_FIELD_CHARS)}{tail}{mark}")
    return "\n".join(lines)


def episode_messages(system: str, steps: Sequence[Row]) -> list[Message]:
    """An attempt as a conversation: the system message, then per step the state
    (after the previous step's result) as user and the action as assistant."""
    out = [message("system", system)]
    previous: Row | None = None
    for s in steps:
        current = state_text(s["observation"], s["state_data"])
        if previous is not None and (previous["error"] or previous["result"]):
            current = f"Result: {previous['error'] or previous['result']}\n\n{current}"
        out += [message("user", current), message("assistant", action_text(s["action"]))]
        previous = s
    return out


def attempt_part(t: Row, steps: Sequence[Row], system: str) -> dict[str, Any]:
    return {
        "id": t["id"],
        "attempt": t["attempt"],
        "success": t["success"],
        "reward": t["reward"],
        "failure_reason": t["failure_reason"],
        "step_count": len(steps),
        "summary": steps_summary(steps),
        "messages": episode_messages(system, steps),
    }


def improved(first: Row, next_: Row) -> bool | None:
    """Did the next attempt do better: success where the first failed, else a
    higher reward; None when the outcomes cannot be compared."""
    if first["success"] is not None and next_["success"] is not None and first["success"] != next_["success"]:
        return bool(next_["success"])
    if first["reward"] is not None and next_["reward"] is not None:
        return bool(next_["reward"] > first["reward"])
    if first["success"] is not None and next_["success"] is not None:
        return False
    return None


def attempt_row(first: Row, first_steps: Sequence[Row], next_: Row, next_steps: Sequence[Row]) -> dict[str, Any]:
    """The first attempt (its own conversation), the reflection on it, and the next
    attempt as a conversation conditioned on that reflection."""
    reflection = attempt_reflection(first, first_steps)
    task = next_["task"]
    conditioned = f"{task}\n\nReflection on the previous attempt:\n{reflection}"
    return {
        "task": task,
        "first": attempt_part(first, first_steps, first["task"]),
        "reflection": reflection,
        "next": attempt_part(next_, next_steps, conditioned),
        "improved": improved(first, next_),
    }
