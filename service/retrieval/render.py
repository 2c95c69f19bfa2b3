"""Ready-to-inject context blocks within a character budget.

Items go in rank order; an item that does not fit whole is left out (a cut-off
instruction is worse than none), and the block never exceeds `max_chars`.
"""

from __future__ import annotations

import json
from typing import Any

from service.retrieval.schemas import RenderOptions, RetrievedItem

_TITLES = {
    "exemplar": "Past experience in similar states",
    "heuristic": "Heuristics",
    "skill": "Skills",
    "rubric": "Rubrics",
    "evidence_card": "Evidence cards",
}


def _action(action: Any) -> str:
    return action if isinstance(action, str) else json.dumps(action, sort_keys=True)


def _exemplar_line(item: RetrievedItem, markdown: bool) -> str:
    c = item.content
    n, wins, losses = c.get("count", 1), c.get("success_count", 0), c.get("failure_count", 0)
    verdict = f"{wins}/{n} succeeded" + (f", {losses} failed" if losses else "")
    rtg = c.get("return_to_go")
    value = f", return-to-go {rtg:.2f}" if isinstance(rtg, int | float) else ""
    obs = " ".join(str(c.get("observation", "")).split())
    if len(obs) > 300:
        obs = obs[:297] + "..."
    bullet = "- " if markdown else "* "
    line = f"{bullet}In state: {obs}\n  Action: {_action(c.get('action'))} ({verdict}{value})"
    if c.get("result"):
        line += f"\n  Result: {' '.join(str(c['result']).split())[:200]}"
    return line


def _generic_line(item: RetrievedItem, markdown: bool) -> str:
    bullet = "- " if markdown else "* "
    return bullet + item.text.strip().replace("\n", "\n  ")


def render(items: list[RetrievedItem], options: RenderOptions) -> str:
    if options.format == "json":
        return _render_json(items, options.max_chars)
    markdown = options.format == "markdown"
    out = ""
    current_kind = None
    for item in items:
        header = ""
        if item.kind != current_kind:
            title = _TITLES.get(item.kind, item.kind)
            header = (
                (f"## {title}\n" if markdown else f"{title}:\n")
                if not out
                else (f"\n## {title}\n" if markdown else f"\n{title}:\n")
            )
        line = (_exemplar_line if item.kind == "exemplar" else _generic_line)(item, markdown)
        piece = header + line + "\n"
        if len(out) + len(piece) > options.max_chars:
            continue
        out += piece
        if header:
            current_kind = item.kind
    return out.rstrip("\n")


def _render_json(items: list[RetrievedItem], max_chars: int) -> str:
    kept: list[dict[str, Any]] = []
    for item in items:
        candidate = [*kept, {"kind": item.kind, "id": item.id, "content": item.content, "score": round(item.score, 4)}]
        if len(json.dumps(candidate)) > max_chars:
            continue
        kept = candidate
    return json.dumps(kept)
