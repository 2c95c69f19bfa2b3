"""The plain context of a step: the one prompt an agent policy is trained and run
on. The distill contexts (POST …/distill/contexts: `plain`, and every teacher
context built on it) and the SFT dataset (GET …/export?dataset=sft, context=plain)
both render it here, from one template, so SFT-then-RL trains and rolls out on the
same prompt.

The system message is the task (the template's `system.txt`); then for each
earlier step a user message (its observation, with its structured state data as
compact JSON, after the previous action's result and error) and an assistant
message (its action: the text, or a tool call as compact JSON with sorted keys);
last, a user message with the current observation. Two history windows, applied
in this order, drop the oldest earlier steps: at most `history_steps` steps, then
at most `history_max_chars` characters of turns; the first user message kept says
how many were dropped ("(2 earlier steps omitted)").

Pure: no I/O, no database.
"""

from __future__ import annotations

import bisect
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from domain.contexts.templates import ContextTemplate

Message = dict[str, str]  # {"role": "system" | "user" | "assistant", "content": str}

DEFAULT_HISTORY_MAX_CHARS = 16_000


def action_text(action: Any) -> str:
    """An action as the agent emitted it: the text, or a tool call as compact JSON
    (sorted keys: PostgreSQL's JSONB does not keep key order)."""
    if isinstance(action, str):
        return action
    return json.dumps(action, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def result_text(result: str | None, error: str | None) -> str:
    parts = [result] if result else []
    if error:
        parts.append(f"Error: {error}")
    return "\n".join(parts)


@dataclass(frozen=True)
class HistoryStep:
    """What the plain context shows of a step."""

    observation: str
    action: Any
    result: str | None
    error: str | None
    data: dict[str, Any] | None = None


def observation_text(template: ContextTemplate, observation: str, data: dict[str, Any] | None) -> str:
    """What the agent observed: the text, and its structured state as compact JSON."""
    if not data:
        return observation
    return template.fill("state_data", observation=observation, data=action_text(data))


class PlainHistory:
    """The plain contexts of one trajectory's steps (built once, then any step's
    messages in time proportional to the history shown)."""

    def __init__(self, template: ContextTemplate, task: str, steps: Sequence[HistoryStep]) -> None:
        self.template = template
        self.system = template.fill("system", task=task)
        self.users: list[str] = []
        for i, s in enumerate(steps):
            before = result_text(steps[i - 1].result, steps[i - 1].error) if i else ""
            seen = observation_text(template, s.observation, s.data)
            if before:
                self.users.append(template.fill("observation_after", result=before, observation=seen))
            else:
                self.users.append(template.fill("observation", observation=seen))
        self.assistants = [action_text(s.action) for s in steps]
        self.prefix = [0]
        for user, assistant in zip(self.users, self.assistants, strict=True):
            self.prefix.append(self.prefix[-1] + len(user) + len(assistant))

    def messages(
        self, position: int, budget: int = DEFAULT_HISTORY_MAX_CHARS, most_steps: int | None = None
    ) -> tuple[list[Message], int]:
        """(the messages at step `position`, earlier steps omitted): at most
        `most_steps` earlier steps (None: any number), of at most `budget` characters."""
        floor = 0 if most_steps is None else max(0, position - most_steps)
        # the first kept step s >= floor: the smallest with prefix[position] - prefix[s] <= budget
        start = bisect.bisect_left(self.prefix, self.prefix[position] - budget, floor, position + 1)
        omitted = start
        out: list[Message] = [{"role": "system", "content": self.system}]
        for j in range(start, position):
            out.append({"role": "user", "content": self.users[j]})
            out.append({"role": "assistant", "content": self.assistants[j]})
        out.append({"role": "user", "content": self.users[position]})
        marker = self.marker(omitted)
        if marker is not None:
            out[1] = {"role": "user", "content": f"{marker}\n\n{out[1]['content']}"}
        return out, omitted

    def marker(self, omitted: int) -> str | None:
        """The line that opens the first kept turn when earlier steps were dropped."""
        return self.template.fill("omitted", count=omitted) if omitted else None


def transcript(template: ContextTemplate, messages: Sequence[Message]) -> str:
    """The messages as one plain text (`[role]` headings)."""
    return "\n\n".join(template.fill("turn", role=m["role"], content=m["content"]) for m in messages)
