"""How trajectories are shown to the model: the `{steps}` and `{outcome}` texts the
prompts are written against. The prompts cite steps by the `[index]` shown here and
refer to the "caused failure" mark, so every reflector renders through these
functions rather than its own format.

Steps are plain mappings with the store's `Step` column names (index, observation,
state_data, internal_state, action, result, error, reward, done, truncated,
caused_failure); missing keys are simply not shown.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

DEFAULT_FIELD_CHARS = 1_500


def shorten(text: str, max_chars: int) -> str:
    """`text` cut to about `max_chars`, keeping its head and tail: observations often
    end with what matters (an error message, the last lines of a page)."""
    if len(text) <= max_chars:
        return text
    head = max_chars * 2 // 3
    tail = max_chars - head
    return f"{text[:head]} …[{len(text) - head - tail} characters cut]… {text[-tail:]}"


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)


def render_step(step: Mapping[str, Any], *, max_field_chars: int = DEFAULT_FIELD_CHARS) -> str:
    """One step as an `[index] …` block, one field per line."""
    lines = [f"[{step.get('index', '?')}] observation: {shorten(_text(step.get('observation', '')), max_field_chars)}"]
    labelled = (
        ("state data", "state_data"),
        ("thought", "internal_state"),
        ("action", "action"),
        ("result", "result"),
        ("error", "error"),
    )
    for label, key in labelled:
        value = step.get(key)
        if value is not None and value != "":
            lines.append(f"    {label}: {shorten(_text(value), max_field_chars)}")
    flags = []
    if step.get("reward") is not None:
        flags.append(f"reward {step['reward']:g}")
    flags += [
        label
        for key, label in (("done", "done"), ("truncated", "truncated"), ("caused_failure", "caused failure"))
        if step.get(key)
    ]
    if flags:
        lines.append("    " + " | ".join(flags))
    return "\n".join(lines)


def render_steps(steps: Iterable[Mapping[str, Any]], *, max_field_chars: int = DEFAULT_FIELD_CHARS) -> str:
    """All steps, in the order given, separated by blank lines; "(no steps)" for none."""
    blocks = [render_step(step, max_field_chars=max_field_chars) for step in steps]
    return "\n\n".join(blocks) if blocks else "(no steps)"


def render_outcome(success: bool | None, reward: float | None = None, failure_reason: str | None = None) -> str:
    """The `{outcome}` line: success or failure (or unknown), reward, failure reason."""
    parts = ["success" if success else "failure" if success is False else "outcome not reported"]
    if reward is not None:
        parts.append(f"reward {reward:g}")
    if failure_reason:
        parts.append(f"failure reason: {failure_reason}")
    return ", ".join(parts)
