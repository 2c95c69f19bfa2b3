"""Write ``reflexa/_generated_models.py`` from the server's OpenAPI document.

Stdlib only, deterministic: the same document gives the same bytes. Every schema of
``components.schemas`` becomes one pydantic class, in the document's order (a base
before the classes deriving from it):

- a schema with ``additionalProperties: false`` is something the client sends: a
  ``RequestModel`` (unknown fields forbidden, NaN refused). Every field the server
  does not require also takes ``None``, meaning "left out": ``dump`` drops it, so the
  server's default applies. A field the server gives a default keeps it here;
- any other schema is something the client reads: a ``ResponseModel`` (unknown fields
  ignored, so a newer server's additions do not break this client), typed as the
  server types it;
- ``{items, next_cursor}`` pages are not classes: fields read them as ``Page[X]``;
- constraints (lengths, bounds, patterns), enums (``Literal``), defaults and
  descriptions are carried over.

The tables below hold what the document cannot say: the client's public class
names, the class hierarchy it keeps, hand-written behaviour (mixins from
``reflexa._model_rules``) and the names of enum types.
"""

from __future__ import annotations

import ast
from typing import Any

#: Server schema name -> the client's (public, older) class name.
RENAMES = {
    "BatchWritten": "BatchResult",
    "CapabilityCreate": "RewardCapabilityCreate",
    "CapabilityCreated": "RewardCapabilityCreated",
    "CapabilityRead": "RewardCapability",
    "CheckResponse": "CheckResult",
    "ContextsResponse": "ContextsResult",
    "CriterionCreate": "RubricCriterion",
    "CriterionRead": "RubricCriterionRead",
    "CriterionScoreRead": "CriterionScore",
    "EvidenceRead": "EvidenceLink",
    "FreezeRead": "FreezeState",
    "KeyRead": "Key",
    "LeakageRead": "LeakageApplied",
    "NamespaceRead": "Namespace",
    "OutcomeCreate": "Outcome",
    "RetrievalOutcomeCreate": "RetrievalOutcomeReport",
    "RetrievalOutcomeRead": "RetrievalOutcome",
    "RetrieveBatchResponse": "RetrieveBatchResult",
    "RetrieveResponse": "RetrieveResult",
    "RubricRead": "Rubric",
    "ScoreBatchRead": "RubricBatchScore",
    "ScoreBatchRequest": "RubricScoreBatchRequest",
    "ScoreItem": "RubricScoreItem",
    "ScoreRead": "RubricScore",
    "ScoreRequest": "RubricScoreRequest",
    "SnapshotRead": "Snapshot",
    "StageScoreRead": "StageScore",
    "StepCreate": "Step",
    "TaskStatsRead": "TaskStats",
    "TeacherEndpointRead": "TeacherEndpoint",
    "TeacherLogprobsResponse": "TeacherLogprobsResult",
    "TrajectoryRead": "Trajectory",
    "UtilityRead": "Utility",
}

#: Client class -> its base class (the document flattens inheritance): the subclass
#: states only the fields it adds or changes.
BASES = {
    "ContextTrajectory": "TrajectoryCreate",
    "KeyCreated": "Key",
    "RewardCapabilityCreated": "RewardCapability",
    "RubricScoreRequest": "RubricScoreItem",
    "TrajectoryWritten": "Trajectory",
}

#: Client class -> the mixin of ``reflexa._model_rules`` holding its hand-written
#: behaviour (validators the document cannot express, convenience properties).
MIXINS = {
    "BatchResult": "BatchCounts",
    "ContextTrajectory": "StoredOrInline",
    "RubricScoreItem": "OneTrajectory",
    "Step": "RolloutTokens",
    "TeacherContinuation": "OneContinuation",
    "TeacherLogprobsItem": "OneContext",
    "TeacherPrompt": "OnePrompt",
    "TeacherSpec": "TeacherKey",
}

#: Request fields whose server default is an empty list, kept as a list here
#: (never ``None``) so callers can extend it.
EMPTY_LIST = {("TrajectoryCreate", "steps"), ("ContextsRequest", "teachers"), ("TeacherContextsOptions", "teachers")}

#: Response fields the server types as enums, read here as plain strings so that a
#: newer server's values (a new reflection kind) do not break this client.
PLAIN_STRINGS = {("ChatMessage", "role"), ("RetrievedItem", "kind"), ("RetrievedItem", "status")}

#: Names of enum types, by their values (in any order).
ENUM_NAMES = {
    "AdvantageMethod": ["grpo", "rloo", "token_signal", "direct_opd", "step_shaping", "horizon_agreement"],
    "ContextInclude": ["text", "messages", "parts"],
    "ContextRendering": ["text", "messages"],
    "CriterionMethod": ["rule", "llm", "skipped"],
    "ItemStatus": ["candidate", "active", "retired"],
    "Kind": ["exemplar", "heuristic", "skill", "rubric", "evidence_card"],
    "RenderFormat": ["text", "markdown", "json"],
    "Role": ["admin", "operator", "agent", "trainer"],
    "TeacherKind": ["memory", "hindsight", "evidence_card", "reflection", "attempt_summary"],
    "TrajectoryStatus": ["open", "closed"],
}

#: Enum types of query parameters: name -> (path, method, parameter).
PARAMETER_ENUMS = {
    "SortOrder": ("/v1/namespaces/{ns}/tasks", "get", "order"),
    "TaskGroupBy": ("/v1/namespaces/{ns}/tasks", "get", "group_by"),
    "TaskSort": ("/v1/namespaces/{ns}/tasks", "get", "sort"),
}

#: Patterns of the keys of a JSON object given a name of its own (``patternProperties``).
KEY_NAMES = {"^[A-Za-z0-9][A-Za-z0-9._:@-]{0,63}$": "SignalName"}

#: String patterns with a name of their own.
ID_PATTERN = "^[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}$"
ID_DESCRIPTION = "1-128 characters of letters, digits and . _ : @ -, starting with a letter or digit"

HEADER = '''\
# Generated from clients/python/openapi.json by `python clients/python/tools/generate.py`: do not edit.
"""The v1 schemas as the client sends and reads them, generated from the server's
OpenAPI document (see ``clients/python/tools/models_from_openapi.py`` for the rules).
Import them from :mod:`reflexa.models`, which adds what is not a schema."""
'''

CONSTRAINTS = [  # JSON Schema keyword -> pydantic Field argument, in the order written
    ("minLength", "min_length"),
    ("maxLength", "max_length"),
    ("minItems", "min_length"),
    ("maxItems", "max_length"),
    ("pattern", "pattern"),
    ("exclusiveMinimum", "gt"),
    ("minimum", "ge"),
    ("exclusiveMaximum", "lt"),
    ("maximum", "le"),
]


def _ref_name(ref: str) -> str:
    return ref.rsplit("/", 1)[-1]


def _literal(value: Any) -> str:
    """A Python literal for a JSON value (strings double-quoted, big ints with ``_``)."""
    if isinstance(value, bool) or value is None:
        return repr(value)
    if isinstance(value, int):
        return f"{value:_}" if abs(value) >= 10_000 else str(value)
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, str):
        text = repr(value)  # single quotes only where the text holds a double one, as ruff format
        return text if text[0] == '"' or '"' in value else f'"{text[1:-1]}"'
    if isinstance(value, list):
        return "[" + ", ".join(_literal(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_literal(k)}: {_literal(v)}" for k, v in value.items()) + "}"
    raise TypeError(f"no literal for {value!r}")


class ModelWriter:
    def __init__(self, document: dict[str, Any]) -> None:
        self.schemas: dict[str, Any] = document["components"]["schemas"]
        self.paths: dict[str, Any] = document["paths"]
        self.imports: set[str] = set()
        self.enum_names = {frozenset(values): name for name, values in ENUM_NAMES.items()}
        self.enums_used: dict[str, list[str]] = {}
        self.key_names_used: set[str] = set()
        self.pages = {name: self._page_item(schema) for name, schema in self.schemas.items()}
        taken = set()
        for name in self.schemas:
            client = self.class_name(name)
            if client in taken:
                raise ValueError(f"two schemas would be named {client}")
            taken.add(client)

    # --- names ------------------------------------------------------------------------------

    def class_name(self, schema_name: str) -> str:
        return RENAMES.get(schema_name, schema_name)

    def _page_item(self, schema: dict[str, Any]) -> str | None:
        """The item schema of a page (``{items: [X], next_cursor}``), else None."""
        props = schema.get("properties", {})
        if "items" not in props or "next_cursor" not in props:
            return None
        ref = props["items"].get("items", {}).get("$ref")
        return _ref_name(ref) if ref else None

    def is_plain_page(self, name: str) -> bool:
        return self.pages[name] is not None and set(self.schemas[name]["properties"]) == {"items", "next_cursor"}

    def is_request(self, name: str) -> bool:
        return self.schemas[name].get("additionalProperties") is False

    # --- types ------------------------------------------------------------------------------

    def enum_type(self, values: list[str]) -> str:
        name = self.enum_names.get(frozenset(values))
        if name is None:
            self.imports.add("Literal")
            return "Literal[" + ", ".join(_literal(v) for v in values) + "]"
        self.enums_used.setdefault(name, values)
        return name

    def constraints(self, schema: dict[str, Any], integer: bool) -> list[str]:
        args = []
        for keyword, argument in CONSTRAINTS:
            if keyword in schema:
                value = schema[keyword]
                if keyword == "pattern" and value == ID_PATTERN:
                    continue  # carried by ClientId
                if isinstance(value, float) and integer and value.is_integer():
                    value = int(value)
                args.append(f"{argument}={_literal(value)}")
        return args

    def type_of(self, schema: dict[str, Any], hoisted: bool = False) -> tuple[str, list[str]]:
        """The type expression of ``schema`` and, when ``hoisted``, its own constraints
        (for the field's ``Field(...)``); nested constraints go into ``Annotated``."""
        if "$ref" in schema:
            name = _ref_name(schema["$ref"])
            if self.is_plain_page(name):
                return f"Page[{self.class_name(self.pages[name])}]", []
            return self.class_name(name), []
        if "anyOf" in schema:
            branches = [b for b in schema["anyOf"] if b.get("type") != "null"]
            nullable = len(branches) < len(schema["anyOf"])
            if len(branches) == 1:
                text, args = self.type_of(branches[0], hoisted)
            else:
                text, args = " | ".join(self.type_of(b)[0] for b in branches), []
            return (text + " | None" if nullable else text), args
        kind = schema.get("type")
        integer = kind == "integer"
        args = self.constraints(schema, integer)
        if "enum" in schema:
            text = self.enum_type(schema["enum"])
        elif kind == "string" and schema.get("format") == "date-time":
            self.imports.add("datetime")
            text = "datetime"
        elif kind == "string":
            text = "ClientId" if schema.get("pattern") == ID_PATTERN else "str"
        elif kind in ("integer", "number", "boolean"):
            text = {"integer": "int", "number": "float", "boolean": "bool"}[kind]
        elif kind == "array":
            text = f"list[{self.type_of(schema.get('items', {}))[0]}]"
        elif kind == "object":
            text = self.mapping_type(schema)
        elif kind is None:  # no constraint at all
            self.imports.add("Any")
            text = "Any"
        else:
            raise ValueError(f"no type for {schema!r}")
        if args and not hoisted:
            self.imports.update(("Annotated", "Field"))
            return f"Annotated[{text}, Field({', '.join(args)})]", []
        return text, args

    def mapping_type(self, schema: dict[str, Any]) -> str:
        if "patternProperties" in schema:
            ((pattern, values),) = schema["patternProperties"].items()
            self.imports.update(("Annotated", "Field"))
            key = KEY_NAMES.get(pattern) or f"Annotated[str, Field(pattern={_literal(pattern)})]"
            if pattern in KEY_NAMES:
                self.key_names_used.add(pattern)
            return f"dict[{key}, {self.type_of(values)[0]}]"
        values = schema.get("additionalProperties", True)
        if values is True or values == {}:
            self.imports.add("Any")
            return "dict[str, Any]"
        return f"dict[str, {self.type_of(values)[0]}]"

    # --- classes ----------------------------------------------------------------------------

    def field(self, class_name: str, name: str, schema: dict[str, Any], required: bool, request: bool) -> list[str]:
        if (class_name, name) in PLAIN_STRINGS:
            schema = {k: v for k, v in schema.items() if k != "enum"}
        text, args = self.type_of(schema, hoisted=True)
        nullable = text.endswith(" | None") or text == "Any"
        default: str | None = None
        factory: str | None = None
        if required and (request or not nullable):
            pass  # (a response field the server may send as null reads as None when missing)
        elif (class_name, name) in EMPTY_LIST:
            factory = "list"
        elif "default" in schema:
            value = schema["default"]
            if value in ([], {}):
                factory = "list" if value == [] else "dict"
            else:
                default = _literal(value)
            if request and not nullable:
                text += " | None"  # None: left out, the server's default applies
        elif not request and schema.get("type") in ("array", "object"):
            factory = "list" if schema["type"] == "array" else "dict"
        else:
            default = "None"
            if not nullable:
                text += " | None"
        description = schema.get("description")
        if description and description != ID_DESCRIPTION:  # ClientId's own
            args = [*args, f"description={_literal(description)}"]
        if factory:
            args = [f"default_factory={factory}", *args]
        elif default is not None and args:
            args = [default, *args]
        if args:
            self.imports.add("Field")
            return _wrap(f"    {name}: {text} = Field(", args, ")")
        if default is not None:
            return [f"    {name}: {text} = {default}"]
        return [f"    {name}: {text}"]

    def class_lines(self, schema_name: str) -> list[str]:
        schema = self.schemas[schema_name]
        name = self.class_name(schema_name)
        request = self.is_request(schema_name)
        props: dict[str, Any] = schema.get("properties", {})
        required = set(schema.get("required", []))
        inherited: dict[str, Any] = {}
        if name in BASES:
            base = BASES[name]
            base_schema = self.schemas[self._schema_of(base)]
            inherited = base_schema.get("properties", {})
            if set(inherited) - set(props):
                raise ValueError(f"{name} lacks fields of its base {base}: {sorted(set(inherited) - set(props))}")
            base_required = set(base_schema.get("required", []))
            # a field required in one and not the other is stated again
            inherited = {n: s for n, s in inherited.items() if (n in base_required) == (n in required)}
            bases = [base]
        elif self.pages[schema_name] is not None:
            bases = [f"Page[{self.class_name(self.pages[schema_name])}]"]
            inherited = {"items": props["items"], "next_cursor": props["next_cursor"]}
        else:
            bases = ["RequestModel" if request else "ResponseModel"]
        if name in MIXINS:
            bases.append(MIXINS[name])
        lines = [f"class {name}({', '.join(bases)}):"]
        body: list[str] = []
        if schema.get("description"):
            body += _docstring(schema["description"])
        fields = [n for n in props if inherited.get(n) != props[n]]
        if body and fields:
            body.append("")
        for field_name in fields:
            body += self.field(name, field_name, props[field_name], field_name in required, request)
        return lines + (body or ["    pass"])

    def _schema_of(self, client_name: str) -> str:
        for schema_name in self.schemas:
            if self.class_name(schema_name) == client_name:
                return schema_name
        raise KeyError(client_name)

    def order(self) -> list[str]:
        """Schemas in document order, each base before what derives from it."""
        done: list[str] = []

        def visit(schema_name: str) -> None:
            if schema_name in done:
                return
            name = self.class_name(schema_name)
            if name in BASES:
                visit(self._schema_of(BASES[name]))
            elif self.pages[schema_name] is not None and not self.is_plain_page(schema_name):
                visit(self.pages[schema_name])
            done.append(schema_name)

        for schema_name in self.schemas:
            if not self.is_plain_page(schema_name):
                visit(schema_name)
        return done

    def write(self) -> str:
        classes = [self.class_lines(name) for name in self.order()]
        aliases = [
            "ClientId = Annotated[",
            "    str,",
            "    Field(",
            f"        pattern={_literal(ID_PATTERN)},",
            f"        description={_literal(ID_DESCRIPTION)},",
            "    ),",
            "]",
        ]
        self.imports.update(("Annotated", "Field"))
        for pattern in sorted(self.key_names_used):
            aliases.append(f"{KEY_NAMES[pattern]} = Annotated[str, Field(pattern={_literal(pattern)})]")
        for name, (path, method, parameter) in PARAMETER_ENUMS.items():
            (param,) = (p for p in self.paths[path][method]["parameters"] if p["name"] == parameter)
            self.enums_used[name] = param["schema"]["enum"]
        for name in sorted(self.enums_used):
            aliases.append(f"{name} = Literal[{', '.join(_literal(v) for v in self.enums_used[name])}]")
            self.imports.add("Literal")
        rules = sorted({"Page", "RequestModel", "ResponseModel", *MIXINS.values()})
        typing_names = sorted(self.imports & {"Annotated", "Any", "Literal"})
        out = [HEADER, "from __future__ import annotations", ""]
        if "datetime" in self.imports:
            out.append("from datetime import datetime")
        out += [f"from typing import {', '.join(typing_names)}", "", "from pydantic import Field", ""]
        out += _wrap("from reflexa._model_rules import (", rules, ")", one_per_line=True)
        out += ["", *aliases]
        for lines in classes:
            out += ["", "", *lines]
        names = ["ClientId", *self.enums_used, *(KEY_NAMES[p] for p in self.key_names_used)]
        names += [self.class_name(n) for n in self.order()]
        all_names = sorted(names, key=lambda n: (n.lower(), n))
        out += ["", "", *_wrap("__all__ = [", [_literal(n) for n in all_names], "]", one_per_line=True)]
        return "\n".join(out) + "\n"


def _docstring(text: str) -> list[str]:
    text = text.strip().replace("\\", "\\\\").replace('"""', '\\"\\"\\"')
    lines = text.splitlines()
    if len(lines) == 1 and len(lines[0]) <= 110:
        return [f'    """{lines[0]}"""']
    return [f'    """{lines[0]}', *(f"    {line}" if line else "" for line in lines[1:]), '    """']


def _wrap(opening: str, args: list[str], closing: str, *, one_per_line: bool = False) -> list[str]:
    """``opening`` + the comma-separated args + ``closing``, as ruff format would lay it out."""
    flat = opening + ", ".join(args) + closing
    if len(flat) <= 120 and not one_per_line:
        return [flat]
    indent = " " * (len(opening) - len(opening.lstrip()) + 4)
    inner = indent + ", ".join(args)
    if len(inner) <= 120 and not one_per_line:
        return [opening, inner, closing.rjust(len(indent) - 4 + len(closing))]
    lines = [opening]
    for arg in args:
        if len(indent) + len(arg) + 1 > 120 and arg.startswith('description="'):
            lines += _split_string(indent, arg)
        else:
            lines.append(f"{indent}{arg},")
    lines.append(" " * (len(indent) - 4) + closing)
    return lines


def _split_string(indent: str, arg: str) -> list[str]:
    """A long ``description="..."`` as implicitly concatenated pieces."""
    prefix, text = "description=", ast.literal_eval(arg[len("description=") :])
    width = 118 - len(indent) - len(prefix)
    pieces: list[str] = []
    current = ""
    for word in text.split(" "):
        candidate = f"{current} {word}" if current else word
        if current and len(_literal(candidate + " ")) > width:
            pieces.append(current + " ")
            current = word
        else:
            current = candidate
    pieces.append(current)
    lines = [f"{indent}{prefix}{_literal(pieces[0])}"]
    lines += [f"{indent}{_literal(p)}" for p in pieces[1:]]
    lines[-1] += ","
    return lines


def generate(document: dict[str, Any]) -> str:
    return ModelWriter(document).write()
