"""The rule engine of rubrics: a normalised check (service/rubrics/content.py) against a
trajectory, pass or fail with a one-line rationale. Pure: no I/O.

What a check reads (its `scope`):
- `final_answer`: the final answer — given explicitly with the score request, else
  the last step's action;
- `final_action` / `final_result`: the last step's action / result;
- `any_action`, `any_result`, `any_observation`: each step's action, result or
  observation; `any_step`: all three of every step.
A check over several texts passes when one of them matches; a negated check
(`not_contains`, `contains`/`regex` with `negate`, json_path `not_equals`) is the
negation of the whole: `not_contains` over `any_step` passes when no step's text
contains it. With no text at all (no steps, no final answer) nothing matches.

Text checks (regex with re.search, contains) read an action given as an object as
its JSON text (sorted keys, `", "` and `": "` separators — the same on every
engine). JSON checks read an object as itself and parse a string: the whole
string, else its last ```json fenced block, else the span from its first `{` (or
`[`) to its last `}` (or `]`). numeric reads the number at `path` (a number, or a
string that parses as one), else the text's stated answer (`answer_number`: its
last `\\boxed{…}`, else its last final-answer line — `#### 72`, `The answer is 72`,
`The final answer is 72`, `Final answer: 72` — and no number when that answer holds
none), else the whole text as a number, else the last number in the text
(`1,234.5` counts as 1234.5). A `{{label}}` bound is read by `label_number`: a
number, or a text that is a number or states one (boxed, final-answer line) —
never the last number of a worked solution. tool_called counts the tool calls
naming `tool` over all steps: an action object's `tool` or `name` or
`function.name`, or each entry of its `tool_calls` (OpenAI style, `function.name`
or `name`); a string action that is a JSON object is read as one. max_steps counts
the steps.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from service.rubrics.content import LABEL, label_text

MISSING: Any = object()  # no label was given
_NUMBER = re.compile(r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?")
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")
_WHOLE = re.compile(r"^[-+]?\d+$")
_FENCED_JSON = re.compile(r"```(?:json)?\s*\n(.*?)```", re.DOTALL)
_BOXED = re.compile(r"\\boxed\s*\{")
# A final-answer line: GSM8K's "#### 72", "The (final) answer is 72", "Final answer: 72"
# (case-insensitive; markdown emphasis and a colon may sit between the words and the number).
_FINAL_ANSWER = re.compile(r"####|\bthe\s+(?:final\s+)?answer\s+is\b|\bfinal\s+answer\s*:", re.IGNORECASE)


@dataclass(frozen=True)
class StepView:
    """What the rules read of a step."""

    index: int
    observation: str
    action: Any  # a string or a tool-call object
    result: str | None = None
    stage: str | None = None


@dataclass(frozen=True)
class Episode:
    """A trajectory (or one stage of it) as the rules see it."""

    task: str
    steps: tuple[StepView, ...]
    final_answer: Any = None  # explicit; None: the last step's action
    label: Any = MISSING


@dataclass(frozen=True)
class RuleResult:
    passed: bool
    rationale: str


def as_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if value is None:
        return ""
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def as_json(value: Any) -> tuple[bool, Any]:
    """(parsed, document): objects and numbers as they are, strings parsed."""
    if not isinstance(value, str):
        return value is not None, value
    text = value.strip()
    candidates = [text]
    fenced = _FENCED_JSON.findall(text)
    if fenced:
        candidates.append(fenced[-1].strip())
    for open_, close in (("{", "}"), ("[", "]")):
        start, end = text.find(open_), text.rfind(close)
        if 0 <= start < end:
            candidates.append(text[start : end + 1])
    for candidate in candidates:
        try:
            return True, json.loads(candidate)
        except ValueError:
            continue
    return False, None


def resolve(document: Any, tokens: Sequence[str | int]) -> tuple[bool, Any]:
    """(found, value) at the path's tokens."""
    node = document
    for token in tokens:
        if isinstance(node, Mapping):
            key = token if isinstance(token, str) else str(token)
            if key not in node:
                return False, None
            node = node[key]
        elif isinstance(node, list):
            index = token if isinstance(token, int) else int(token) if token.isdigit() else None
            if index is None or index >= len(node):
                return False, None
            node = node[index]
        else:
            return False, None
    return True, node


def to_number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value) if math.isfinite(value) else None
    if isinstance(value, str):
        text = _THOUSANDS.sub("", value.strip())
        try:
            number = float(text)
        except ValueError:
            return None
        return number if math.isfinite(number) else None
    return None


def number_in_text(text: str) -> float | None:
    """The whole text as a number, else the last number in it."""
    whole = to_number(text)
    if whole is not None:
        return whole
    found = _NUMBER.findall(_THOUSANDS.sub("", text))
    return to_number(found[-1]) if found else None


def boxed(text: str) -> str | None:
    """The content of the text's last `\\boxed{…}` (braces balanced), None without one."""
    found = None
    for match in _BOXED.finditer(text):
        depth, start = 1, match.end()
        for i in range(start, len(text)):
            if text[i] == "{":
                depth += 1
            elif text[i] == "}":
                depth -= 1
                if depth == 0:
                    found = text[start:i]
                    break
    return found


def _numbers(text: str) -> list[str]:
    return _NUMBER.findall(_THOUSANDS.sub("", text))


def stated_number(text: str) -> tuple[bool, float | None]:
    """(whether the text states an answer, its number): its last `\\boxed{…}`, whose
    number is the one it holds (none unless exactly one), else the line after its last
    final-answer marker (see `_FINAL_ANSWER`), whose number is the first on it."""
    inside = boxed(text)
    if inside is not None:
        found = _numbers(inside)
        return True, to_number(found[0]) if len(found) == 1 else None
    markers = list(_FINAL_ANSWER.finditer(text))
    if not markers:
        return False, None
    found = _numbers(text[markers[-1].end() :].split("\n", 1)[0])
    return True, to_number(found[0]) if found else None


def answer_number(text: str) -> float | None:
    """The number a text answers with: its stated answer's (`stated_number`; none when it
    states one without a number), else the whole text as a number, else its last number."""
    stated, number = stated_number(text)
    return number if stated else number_in_text(text)


def label_number(label: Any) -> float | None:
    """A label as a number: a number, a numeric string, or a text stating its answer
    (`\\boxed{72}`, GSM8K's `#### 72`, `The answer is 72`); None otherwise (a worked
    solution without a final-answer line, an object, a word)."""
    if isinstance(label, str):
        whole = to_number(label)
        if whole is not None:
            return whole
        return stated_number(label)[1]
    return to_number(label)


def _whole(value: Any) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and _WHOLE.match(text := _THOUSANDS.sub("", value.strip())):
        return int(text)
    return None


def equal(got: Any, expected: Any) -> bool:
    """JSON equality, tolerant where a model's answer and a label differ in type only:
    a number and a numeric string compare as numbers, strings compare stripped."""
    if isinstance(got, bool) or isinstance(expected, bool):
        return got is expected if isinstance(got, bool) and isinstance(expected, bool) else False
    if isinstance(got, int | float | str) and isinstance(expected, int | float | str):
        if isinstance(got, str) and isinstance(expected, str):
            return got.strip() == expected.strip()
        whole_a, whole_b = _whole(got), _whole(expected)
        if whole_a is not None and whole_b is not None:
            return whole_a == whole_b  # whole numbers compare exactly, however large
        a, b = to_number(got), to_number(expected)
        return a is not None and b is not None and math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)
    return bool(got == expected)


def scope_values(episode: Episode, scope: str) -> list[Any]:
    """The values a scope reads (strings, or action objects)."""
    steps = episode.steps
    last = steps[-1] if steps else None
    if scope == "final_answer":
        if episode.final_answer is not None:
            return [episode.final_answer]
        return [last.action] if last else []
    if scope == "final_action":
        return [last.action] if last else []
    if scope == "final_result":
        return [last.result] if last and last.result is not None else []
    out: list[Any] = []
    for s in steps:
        if scope in ("any_action", "any_step"):
            out.append(s.action)
        if scope in ("any_result", "any_step") and s.result is not None:
            out.append(s.result)
        if scope in ("any_observation", "any_step"):
            out.append(s.observation)
    return out


def tool_names(action: Any) -> list[str]:
    """The tools an action calls (see the module docstring)."""
    if isinstance(action, str) and action.lstrip().startswith("{"):
        try:
            action = json.loads(action)
        except ValueError:
            return []
    if not isinstance(action, Mapping):
        return []
    calls = action.get("tool_calls")
    if isinstance(calls, list):
        names = []
        for call in calls:
            if isinstance(call, Mapping):
                function = call.get("function")
                name = function.get("name") if isinstance(function, Mapping) else call.get("name", call.get("tool"))
                if isinstance(name, str):
                    names.append(name)
        return names
    for key in ("tool", "name"):
        if isinstance(action.get(key), str):
            return [action[key]]
    function = action.get("function")
    if isinstance(function, Mapping) and isinstance(function.get("name"), str):
        return [function["name"]]
    return []


def _fill(text: str, label: Any, *, regex: bool = False) -> str:
    if LABEL not in text or label is MISSING:  # (the service refuses a missing label before scoring)
        return text
    value = label_text(label)
    return text.replace(LABEL, re.escape(value) if regex else value)


def _expected(value: Any, label: Any) -> Any:
    if value == LABEL and label is not MISSING:
        return label
    return _fill(value, label) if isinstance(value, str) else value


def _shown(value: Any, limit: int = 60) -> str:
    text = as_text(value)
    return repr(text if len(text) <= limit else text[:limit] + "…")


def _regex(check: Mapping[str, Any], values: list[Any], label: Any) -> RuleResult:
    pattern = _fill(check["pattern"], label, regex=True)
    try:
        compiled = re.compile(pattern, re.IGNORECASE if check["ignore_case"] else 0)
    except re.error as exc:
        return RuleResult(False, f"the pattern /{pattern}/ does not compile with the label filled in: {exc}")
    found = next((v for v in values if compiled.search(as_text(v))), None)
    scope = check["scope"]
    if check["negate"]:
        passed = found is None
        why = f"no match of /{pattern}/ in {scope}" if passed else f"{scope} matches /{pattern}/"
    else:
        passed = found is not None
        why = f"{scope} matches /{pattern}/" if passed else f"no match of /{pattern}/ in {scope}"
    return RuleResult(passed, why)


def _contains(check: Mapping[str, Any], values: list[Any], label: Any) -> RuleResult:
    needle = _fill(check["text"], label)
    sensitive = check["case_sensitive"]
    wanted = needle if sensitive else needle.casefold()
    found = any(wanted in (as_text(v) if sensitive else as_text(v).casefold()) for v in values)
    scope = check["scope"]
    passed = found != check["negate"]
    return RuleResult(passed, f"{scope} {'contains' if found else 'does not contain'} {needle!r}")


def _json_path(check: Mapping[str, Any], values: list[Any], label: Any) -> RuleResult:
    path, op, scope = check["path"], check["op"], check["scope"]
    expected = _expected(check["value"], label)
    parsed = 0
    seen: list[Any] = []
    for value in values:
        ok, document = as_json(value)
        if not ok:
            continue
        parsed += 1
        found, got = resolve(document, check["tokens"])
        if found:
            seen.append(got)
    if not parsed:
        return RuleResult(op == "not_equals", f"{scope} holds no JSON")
    if op == "exists":
        return RuleResult(bool(seen), f"{path} {'exists' if seen else 'is missing'} in {scope}")
    hit = any(equal(got, expected) for got in seen)
    if not seen:
        why = f"{path} is missing in {scope}"
    elif hit:
        why = f"{path} equals {_shown(expected)} in {scope}"
    else:
        why = f"{path} is {_shown(seen[-1])} in {scope}, not {_shown(expected)}"
    return RuleResult(hit if op == "equals" else not hit, why)


def _compare(op: str, x: float, value: float | None, low: float | None, high: float | None, tol: float) -> bool:
    if op == "between":
        return (low is None or x >= low - tol) and (high is None or x <= high + tol)
    assert value is not None
    return {
        "eq": abs(x - value) <= tol,
        "ne": abs(x - value) > tol,
        "lt": x < value - tol,
        "le": x <= value + tol,
        "gt": x > value + tol,
        "ge": x >= value - tol,
    }[op]


def _numeric(check: Mapping[str, Any], values: list[Any], label: Any) -> RuleResult:
    bounds: dict[str, float | None] = {}
    for name in ("value", "min", "max"):
        raw = check[name]
        if raw == LABEL:  # (the service refuses a missing or non-numeric label before scoring)
            number = label_number(label) if label is not MISSING else None
            if number is None:
                why = "no label was given" if label is MISSING else f"the label {_shown(label)} is not a number"
                return RuleResult(False, why)
            bounds[name] = number
        else:
            bounds[name] = None if raw is None else float(raw)
    numbers: list[float] = []
    for value in values:
        if check["tokens"] is not None:
            ok, document = as_json(value)
            found, got = resolve(document, check["tokens"]) if ok else (False, None)
            number = to_number(got) if found else None
        else:
            number = answer_number(as_text(value))
        if number is not None:
            numbers.append(number)
    where = check["scope"] + (f" {check['path']}" if check["path"] else "")
    if not numbers:
        return RuleResult(False, f"no number in {where}")
    op, tol = check["op"], check["tolerance"]
    target = f"[{bounds['min']}, {bounds['max']}]" if op == "between" else f"{bounds['value']:g}"
    for x in numbers:
        if _compare(op, x, bounds["value"], bounds["min"], bounds["max"], tol):
            return RuleResult(True, f"{where} is {x:g}: {op} {target}")
    return RuleResult(False, f"{where} is {numbers[-1]:g}: not {op} {target}")


def _tool_called(check: Mapping[str, Any], episode: Episode) -> RuleResult:
    tool, low, high = check["tool"], check["min_times"], check["max_times"]
    count = sum(name == tool for s in episode.steps for name in tool_names(s.action))
    passed = count >= low and (high is None or count <= high)
    bound = f"{low}..{'any' if high is None else high}"
    return RuleResult(passed, f"tool {tool} called {count} time{'s' if count != 1 else ''} (wanted {bound})")


def _max_steps(check: Mapping[str, Any], episode: Episode) -> RuleResult:
    n, low, high = len(episode.steps), check["min_steps"], check["max_steps"]
    passed = (low is None or n >= low) and (high is None or n <= high)
    bound = f"{low or 0}..{'any' if high is None else high}"
    return RuleResult(passed, f"{n} step{'s' if n != 1 else ''} (wanted {bound})")


def evaluate(check: Mapping[str, Any], episode: Episode) -> RuleResult:
    """A normalised check against an episode."""
    kind = check["type"]
    if kind == "tool_called":
        return _tool_called(check, episode)
    if kind == "max_steps":
        return _max_steps(check, episode)
    values = scope_values(episode, check["scope"])
    if kind == "regex":
        return _regex(check, values, episode.label)
    if kind == "contains":
        return _contains(check, values, episode.label)
    if kind == "json_path":
        return _json_path(check, values, episode.label)
    return _numeric(check, values, episode.label)
