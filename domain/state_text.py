"""How a state becomes text to embed. Used identically when indexing exemplars and
when embedding a retrieval query, so both sides of a match are built the same way.

Environment state and internal state are separate texts with separate vectors;
retrieval matches them jointly with weights (PRAXIS matches both), so a plan like
"find the key" never drowns the observation, nor the reverse.
"""

from __future__ import annotations

from typing import Any

from domain.settings import StateTextSettings


def _data_lines(data: Any, prefix: str = "") -> list[str]:
    """Structured state as sorted `key: value` lines (stable, order-independent)."""
    if isinstance(data, dict):
        lines: list[str] = []
        for key in sorted(data):
            lines += _data_lines(data[key], f"{prefix}{key}.")
        return lines
    if isinstance(data, list):
        if all(not isinstance(x, dict | list) for x in data):
            return [f"{prefix.rstrip('.')}: {', '.join(str(x) for x in data)}"]
        lines = []
        for i, item in enumerate(data):
            lines += _data_lines(item, f"{prefix}{i}.")
        return lines
    return [f"{prefix.rstrip('.')}: {data}"]


def state_text(settings: StateTextSettings, *, observation: str, data: dict[str, Any] | None, task: str | None) -> str:
    parts: list[str] = []
    for field in settings.fields:
        if field == "task" and task:
            parts.append(f"Task: {task}")
        elif field == "observation" and observation:
            parts.append(observation)
        elif field == "data" and data:
            parts.extend(_data_lines(data))
    return "\n".join(parts)[: settings.max_chars]


def internal_text(internal_state: str | None, max_chars: int) -> str | None:
    """The internal-state text, or None when there is nothing to match on."""
    if internal_state is None or not internal_state.strip():
        return None
    return internal_state.strip()[:max_chars]


def task_query_text(task: str) -> str:
    return f"Task: {task}"
