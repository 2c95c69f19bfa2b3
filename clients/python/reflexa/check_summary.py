"""A pre-action check (:meth:`reflexa.Client.check_action`) as text for a model to
read: the risk with its interval, the safer alternatives, the heuristics that name
the action, the evidence. Shared by the MCP server's and LangGraph's check_action
tools, so a model reads the same answer through either."""

from __future__ import annotations

import json
from typing import Any

from reflexa.models import CheckResult

EVIDENCE_LINES = 5


def _action(action: Any) -> str:
    return action if isinstance(action, str) else json.dumps(action, sort_keys=True)


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.0%}"


def describe_check(result: CheckResult) -> str:
    r = result.risk
    if r.attempts == 0:
        lines = [
            f"No credited attempt of this action in states like this ({result.support} stored step(s) took it, "
            f"{result.states} similar state-action pair(s) considered): the risk is unknown, not low."
        ]
    else:
        lines = [
            f"Risk: {_pct(r.rate)} of credited attempts failed ({r.failures}/{r.attempts}; 95% interval "
            f"{_pct(r.low)}–{_pct(r.high)}){' — taken before in exactly this state' if result.exact_match else ''}."
        ]
        if r.attempts < 5:
            lines.append("Few attempts: treat the rate as uncertain (see the interval).")
    if result.alternatives:
        lines.append("Alternatives, best first (success rate, 95% lower bound, attempts):")
        lines += [
            f"- {_action(a.action)}: {_pct(a.success_rate)} (≥ {_pct(a.low)}, {a.attempts} attempt(s))"
            for a in result.alternatives
        ]
    if result.heuristics:
        lines.append("Heuristics that name this action:")
        lines += [f"- [{h.id}] {h.text}" for h in result.heuristics]
    if result.evidence:
        lines.append("Evidence (steps that took it):")
        for e in result.evidence[:EVIDENCE_LINES]:
            verdict = {True: "succeeded", False: "failed", None: "not credited"}[e.success]
            where = f"trajectory {e.trajectory_id} step {e.step_index}"
            lines.append(f"- {where}: {verdict}{f' → {e.result}' if e.result else ''}")
    return "\n".join(lines)
