"""How the UI lays out a reflection's content: per kind, the fields an operator
reads first (in full, in the review queue) and the two short columns of the
reflections list (the situation, and what to do in it)."""

from __future__ import annotations

import json
from typing import Any

# Per kind, the fields shown first and in this order; any others follow, sorted.
LEAD_FIELDS: dict[str, tuple[str, ...]] = {
    "exemplar": ("observation", "internal_state", "action", "result", "reward", "return_to_go", "success"),
    "heuristic": ("trigger", "guideline", "rationale", "polarity"),
    "skill": ("name", "when_to_use", "preconditions", "parameters", "steps"),
    "rubric": ("name", "criteria"),
    "evidence_card": ("task", "success_rate", "worked", "failed", "failure_causes", "failure_reasons"),
}
# `text` is the plain rendering of the rest (shown as the item's title).
NOT_SHOWN = frozenset({"text"})
# Per kind, the list's columns: (when it applies, what to do); a missing field is blank.
COLUMNS: dict[str, tuple[str, str]] = {
    "exemplar": ("observation", "action"),
    "heuristic": ("trigger", "guideline"),
    "skill": ("when_to_use", "name"),
    "rubric": ("task", "name"),
    "evidence_card": ("task", "text"),  # its text says what worked and what failed
}


def as_text(value: Any) -> str:
    """A field's value as an operator reads it: text as is, anything else as JSON."""
    if value is None or value == [] or value == {}:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)


def content_fields(kind: str, content: dict[str, Any]) -> list[tuple[str, Any]]:
    """(name, value) of every shown field, the kind's lead fields first."""
    lead = [name for name in LEAD_FIELDS.get(kind, ()) if name in content]
    rest = sorted(name for name in content if name not in NOT_SHOWN and name not in lead)
    return [(name, content[name]) for name in (*lead, *rest)]


def content_columns(kind: str, content: dict[str, Any], task: str | None = None) -> tuple[str, str]:
    """The list's two columns for one item; a rubric's task is on the row, not in content."""
    situation, action = COLUMNS.get(kind, ("", ""))
    values = {**content, "task": content.get("task") or task}
    return as_text(values.get(situation)), as_text(values.get(action))
