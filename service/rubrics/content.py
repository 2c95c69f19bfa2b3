"""Rubrics: weighted criteria for judging a trajectory or one of its stages
(RubricEM, CRPO). This module reads and checks a rubric's criteria; the rule engine
is in service/rubrics/checks.py and the scoring (weights, stages, judged verdicts) in
service/rubrics/scores.py. Pure: no I/O.

A rubric is a reflection of kind `rubric`; its content is

    {"name": str, "criteria": [{"id", "text", "weight", "check"?, "stage"?}], "text": …}

A criterion with a `check` is decided by that rule; one without is judged by an LLM.
The check types (and their fields) are the DESIGN.md names:

    regex         pattern, scope?, negate? (false), ignore_case? (false)
    contains      text, scope?, case_sensitive? (true)
    not_contains  text, scope?, case_sensitive? (true)
    json_path     path, scope?, op? (equals | not_equals | exists), value (not for exists)
    numeric       op (eq ne lt le gt ge between), value | min/max, scope?, path?, tolerance? (1e-6)
    tool_called   tool, min_times? (1), max_times? (null: no bound)
    max_steps     max_steps? and/or min_steps?

`scope` (what text a check reads; `target` is accepted as its older name) is one of
SCOPES. What the LLM rubrics reflector writes (written_checks.py) is
read too: criteria without an `id` get `c1`, `c2`, … by position, `json_field` is
json_path and `step_count` is max_steps, and `contains` may carry `negate`.

Any string of a check may hold the placeholder `{{label}}`: the ground truth of the
scored item (an OpenRLHF label, verl's ground_truth, a TRL dataset column), filled
in at scoring time (escaped inside a regex; as the value itself where a json_path
or numeric `value` is exactly the placeholder).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from domain.errors import InvalidInput

KIND = "rubric"
LABEL = "{{label}}"
MAX_CRITERIA = 100

SCOPES: tuple[str, ...] = (
    "final_answer",  # the explicit final answer, else the last step's action (a tool call as its JSON text)
    "final_action",  # the last step's action
    "final_result",  # the last step's result
    "any_step",  # any step's action, result or observation
    "any_action",
    "any_result",
    "any_observation",
)
CHECK_TYPES: tuple[str, ...] = (
    "regex",
    "contains",
    "not_contains",
    "json_path",
    "numeric",
    "tool_called",
    "max_steps",
)
LEGACY_TYPES = {"json_field": "json_path", "step_count": "max_steps"}  # what the rubrics reflector writes
JSON_OPS = ("equals", "not_equals", "exists")
NUMERIC_OPS = ("eq", "ne", "lt", "le", "gt", "ge", "between")
_NUMERIC_SYMBOLS = {"==": "eq", "!=": "ne", "<": "lt", "<=": "le", ">": "gt", ">=": "ge"}
_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}$")
_PATH_TOKEN = re.compile(r"""\[(\d+)\]|\[(['"])(.*?)\2\]|\.?([^.\[\]'"]+)""")


@dataclass(frozen=True)
class Criterion:
    """One criterion, checked and normalised: `check` holds every field of its type
    (defaults filled, the scope resolved), or is None for a judged criterion."""

    position: int  # its index in the rubric's criteria (errors name `criteria[position]`)
    id: str
    text: str
    weight: float
    check: Mapping[str, Any] | None = None
    stage: str | None = None

    @property
    def judged(self) -> bool:
        return self.check is None

    @property
    def field(self) -> str:
        return f"criteria[{self.position}]"


class _Fields:
    """Reads the fields of one check, each refused with a 422 naming it."""

    def __init__(self, check: Mapping[str, Any], where: str, kind: str) -> None:
        self.check = check
        self.where = where
        self.kind = kind
        self.used = {"type"}

    def _bad(self, name: str, message: str, rule: str) -> InvalidInput:
        return InvalidInput(f"{self.where}.{name} {message}", field=f"{self.where}.{name}", rule=rule)

    def get(self, name: str, types: tuple[type, ...], *, required: bool = False, default: Any = None) -> Any:
        self.used.add(name)
        if name not in self.check or self.check[name] is None:
            if required:
                raise self._bad(name, f"is required for a {self.kind} check", "required")
            return default
        value = self.check[name]
        if isinstance(value, bool) and bool not in types or not isinstance(value, types):
            names = " or ".join(sorted({t.__name__ for t in types}))
            raise self._bad(name, f"must be {names}, not {type(value).__name__}", "type")
        return value

    def text(self, name: str, *, required: bool = False) -> str | None:
        value = self.get(name, (str,), required=required)
        if value is not None and not value:
            raise self._bad(name, "must not be empty", "non_empty")
        return value  # type: ignore[no-any-return]

    def count(self, name: str, *, default: int | None = None, minimum: int = 0) -> int | None:
        value = self.get(name, (int,), default=default)
        if value is not None and value < minimum:
            raise self._bad(name, f"must be an integer >= {minimum}", f"ge_{minimum}")
        return value  # type: ignore[no-any-return]

    def scope(self) -> str:
        scope, target = self.check.get("scope"), self.check.get("target")
        self.used |= {"scope", "target"}
        if scope is not None and target is not None:
            raise self._bad("target", "is the older name of scope: give one of them", "one_of")
        name = "scope" if target is None else "target"
        value = scope if target is None else target
        if value is None:
            return "final_answer"
        if not isinstance(value, str) or value not in SCOPES:
            raise self._bad(name, f"must be one of {', '.join(SCOPES)}, not {value!r}", "known_scope")
        return value

    def done(self) -> None:
        extra = sorted(set(self.check) - self.used)
        if extra:
            raise self._bad(extra[0], f"is not a field of a {self.kind} check", "unknown_field")


def parse_json_path(path: str) -> tuple[str | int, ...]:
    """`$.a.b[0]`, `a.b.0`, `$['key with dots']` -> ('a', 'b', 0): a leading `$` is
    optional, numbers index lists. ValueError for anything else."""
    text = path.strip()
    if text.startswith("$"):
        text = text[1:]
    tokens: list[str | int] = []
    pos = 0
    while pos < len(text):
        match = _PATH_TOKEN.match(text, pos)
        if match is None or match.end() == pos or (match.group(4) is not None and tokens and text[pos] != "."):
            raise ValueError(f"cannot read the path at {text[pos:]!r}")
        if match.group(1) is not None:
            tokens.append(int(match.group(1)))
        elif match.group(3) is not None:
            tokens.append(match.group(3))
        else:
            name = match.group(4)
            tokens.append(int(name) if name.isdigit() else name)
        pos = match.end()
    return tuple(tokens)


def _regex(fields: _Fields, name: str, pattern: str) -> None:
    try:
        re.compile(pattern.replace(LABEL, "x"))
    except re.error as exc:
        raise fields._bad(name, f"does not compile as a regular expression: {exc}", "regex") from None


def _number_or_label(fields: _Fields, name: str, *, required: bool) -> float | str | None:
    value = fields.get(name, (int, float, str), required=required)
    if isinstance(value, str) and value != LABEL:
        raise fields._bad(name, f"must be a number or {LABEL!r}", "number")
    return value  # type: ignore[no-any-return]


def normalise_check(check: Any, where: str) -> dict[str, Any]:
    """The check with every field of its type filled in; InvalidInput naming
    `<where>.<field>` and the rule for anything wrong."""
    if not isinstance(check, Mapping):
        raise InvalidInput(f"{where} must be an object or null", field=where, rule="type")
    kind = check.get("type")
    if not isinstance(kind, str) or (kind not in CHECK_TYPES and kind not in LEGACY_TYPES):
        raise InvalidInput(
            f"{where}.type must be one of {', '.join(CHECK_TYPES)}, not {kind!r}",
            field=f"{where}.type",
            rule="known_check_type",
        )
    kind = LEGACY_TYPES.get(kind, kind)
    f = _Fields(check, where, kind)
    out: dict[str, Any]
    if kind == "regex":
        pattern = f.text("pattern", required=True)
        assert pattern is not None
        _regex(f, "pattern", pattern)
        out = {
            "scope": f.scope(),
            "pattern": pattern,
            "negate": f.get("negate", (bool,), default=False),
            "ignore_case": f.get("ignore_case", (bool,), default=False),
        }
    elif kind in ("contains", "not_contains"):
        negate = kind == "not_contains"
        if kind == "contains" and f.get("negate", (bool,), default=False):
            negate = True
        out = {
            "scope": f.scope(),
            "text": f.text("text", required=True),
            "case_sensitive": f.get("case_sensitive", (bool,), default=True),
            "negate": negate,
        }
        kind = "contains"
    elif kind == "json_path":
        path = f.get("path", (str,), required=True)
        try:
            tokens = parse_json_path(path)
        except ValueError as exc:
            raise f._bad("path", f"is not a JSON path like $.a.b[0]: {exc}", "json_path") from None
        op = f.get("op", (str,), default="equals")
        if op not in JSON_OPS:
            raise f._bad("op", f"must be one of {', '.join(JSON_OPS)}, not {op!r}", "known_op")
        f.used.add("value")
        if op != "exists" and "value" not in check:
            raise f._bad("value", f"is required for op {op}", "required")
        out = {"scope": f.scope(), "path": path, "tokens": tokens, "op": op, "value": check.get("value")}
    elif kind == "numeric":
        op = f.get("op", (str,), required=True)
        op = _NUMERIC_SYMBOLS.get(op, op)
        if op not in NUMERIC_OPS:
            raise f._bad("op", f"must be one of {', '.join(NUMERIC_OPS)}, not {op!r}", "known_op")
        path = f.get("path", (str,))
        tokens = None
        if path is not None:
            try:
                tokens = parse_json_path(path)
            except ValueError as exc:
                raise f._bad("path", f"is not a JSON path like $.a.b[0]: {exc}", "json_path") from None
        between = op == "between"
        value = _number_or_label(f, "value", required=not between)
        low = _number_or_label(f, "min", required=False)
        high = _number_or_label(f, "max", required=False)
        if between and low is None and high is None:
            raise f._bad("min", "or max is required for op between", "required")
        if not between and (low is not None or high is not None):
            raise f._bad("min" if low is not None else "max", "applies to op between only", "not_for_op")
        if between and value is not None:
            raise f._bad("value", "does not apply to op between (give min and max)", "not_for_op")
        if isinstance(low, int | float) and isinstance(high, int | float) and low > high:
            raise f._bad("min", f"is {low}, above max {high}", "min_le_max")
        tolerance = f.get("tolerance", (int, float), default=1e-6)
        if tolerance < 0:
            raise f._bad("tolerance", "must be >= 0", "ge_0")
        out = {
            "scope": f.scope(),
            "op": op,
            "value": value,
            "min": low,
            "max": high,
            "path": path,
            "tokens": tokens,
            "tolerance": float(tolerance),
        }
    elif kind == "tool_called":
        low = f.count("min_times", default=1)
        high = f.count("max_times")
        if high is not None and low is not None and low > high:
            raise f._bad("min_times", f"is {low}, above max_times {high}", "min_le_max")
        out = {"tool": f.text("tool", required=True), "min_times": low, "max_times": high}
    else:  # max_steps
        high = f.count("max_steps", minimum=0)
        low = f.count("min_steps")
        if high is None and low is None:
            raise f._bad("max_steps", "or min_steps is required", "required")
        if high is not None and low is not None and low > high:
            raise f._bad("min_steps", f"is {low}, above max_steps {high}", "min_le_max")
        out = {"max_steps": high, "min_steps": low}
    f.done()
    return {"type": kind, **out}


def stage_name(value: Any) -> str | None:
    """A step's `metadata.stage` as a stage name (a string, or an integer as text);
    anything else is no stage."""
    if isinstance(value, str) and value:
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return None


def parse_criteria(raw: Any, *, field: str = "criteria") -> list[Criterion]:
    """A rubric's criteria, checked: ids unique (missing ones become `c<n>`), weights
    finite, >= 0 and not all 0, known check types with their fields, regexes that
    compile, JSON paths that parse. InvalidInput names `criteria[i].<field>` and the rule."""
    if not isinstance(raw, Sequence) or isinstance(raw, str | bytes) or not raw:
        raise InvalidInput(f"{field} must be a non-empty list of criteria", field=field, rule="non_empty")
    if len(raw) > MAX_CRITERIA:
        raise InvalidInput(f"{field} has {len(raw)} criteria; at most {MAX_CRITERIA}", field=field, rule="max_items")
    out: list[Criterion] = []
    seen: dict[str, int] = {}
    for i, item in enumerate(raw):
        where = f"{field}[{i}]"
        if not isinstance(item, Mapping):
            raise InvalidInput(f"{where} must be an object", field=where, rule="type")
        id_ = item.get("id", f"c{i + 1}")
        if not isinstance(id_, str) or not _ID.match(id_):
            raise InvalidInput(
                f"{where}.id must be 1-128 letters, digits and . _ : @ -", field=f"{where}.id", rule="id_pattern"
            )
        if id_ in seen:
            raise InvalidInput(
                f"{where}.id {id_!r} is already the id of {field}[{seen[id_]}]", field=f"{where}.id", rule="unique"
            )
        seen[id_] = i
        text = item.get("text")
        if not isinstance(text, str) or not text.strip():
            raise InvalidInput(f"{where}.text must be a non-empty string", field=f"{where}.text", rule="non_empty")
        weight = item.get("weight")
        if isinstance(weight, bool) or not isinstance(weight, int | float) or weight != weight or weight < 0:
            raise InvalidInput(f"{where}.weight must be a number >= 0", field=f"{where}.weight", rule="ge_0")
        if weight == float("inf"):
            raise InvalidInput(f"{where}.weight must be finite", field=f"{where}.weight", rule="finite_number")
        stage = item.get("stage")
        if stage is not None and stage_name(stage) is None:
            raise InvalidInput(f"{where}.stage must be a non-empty string", field=f"{where}.stage", rule="type")
        check = item.get("check")
        normal = None if check is None else normalise_check(check, f"{where}.check")
        out.append(Criterion(i, id_, text, float(weight), normal, stage_name(stage)))
    if not any(c.weight > 0 for c in out):
        raise InvalidInput(
            f"{field}: the weights are all 0; at least one must be positive", field=field, rule="weights"
        )
    return out


def needs_label(criteria: Sequence[Criterion]) -> Criterion | None:
    """The first criterion whose check holds the `{{label}}` placeholder (None: none does)."""
    for c in criteria:
        if c.check is not None and any(isinstance(v, str) and LABEL in v for v in c.check.values()):
            return c
    return None


def reads_label_as_number(criteria: Sequence[Criterion]) -> Criterion | None:
    """The first numeric criterion whose `value`, `min` or `max` is the `{{label}}`
    placeholder (its label must then read as a number; None: none is)."""
    for c in criteria:
        check = c.check if c.check is not None and c.check["type"] == "numeric" else None
        if check is not None and any(check[name] == LABEL for name in ("value", "min", "max")):
            return c
    return None


def label_text(label: Any) -> str:
    """A label as the text the placeholder becomes: a string as it is, anything else as JSON."""
    return label if isinstance(label, str) else json.dumps(label, ensure_ascii=False, sort_keys=True)


def describe_check(check: Mapping[str, Any] | None) -> str:
    """One line for a rubric's text rendering and for rationales."""
    if check is None:
        return "judged"
    kind = check["type"]
    if kind == "regex":
        return f"rule: {'no ' if check['negate'] else ''}match of /{check['pattern']}/ in {check['scope']}"
    if kind == "contains":
        verb = "does not contain" if check["negate"] else "contains"
        return f"rule: {check['scope']} {verb} {check['text']!r}"
    if kind == "json_path":
        value = "" if check["op"] == "exists" else f" {check['value']!r}"
        return f"rule: {check['scope']} {check['path']} {check['op']}{value}"
    if kind == "numeric":
        where = check["scope"] + (f" {check['path']}" if check["path"] else "")
        if check["op"] == "between":
            return f"rule: number in {where} in [{check['min']}, {check['max']}]"
        return f"rule: number in {where} {check['op']} {check['value']}"
    if kind == "tool_called":
        upper = "any" if check["max_times"] is None else check["max_times"]
        return f"rule: tool {check['tool']} called {check['min_times']}..{upper} times"
    return f"rule: steps {check['min_steps'] or 0}..{'any' if check['max_steps'] is None else check['max_steps']}"


def rubric_text(name: str, criteria: Sequence[Criterion]) -> str:
    """The plain-text rendering every reflection carries (`text`)."""
    lines = [f"Rubric: {name}"]
    lines += [f"- [{c.weight:.2f}] {c.text} ({describe_check(c.check)})" for c in criteria]
    return "\n".join(lines)
