"""Versioned context templates: one folder per template under templates/ (next to
this module), a `manifest.json` ({"name", "version", "description"}) and one
`string.Template` file per part (the plain context's turns, and one per teacher
kind of service.distill).

A released version is never edited: a change of wording is a new version (or a new
template), so the `template_version` a response echoes ("default@1") names the exact
words a trainer's contexts were built from. Loading checks that every part exists
and uses exactly the placeholders the builders fill (a misspelt `${name}` fails at
load, not silently in a context).
"""

from __future__ import annotations

import json
import re
import string
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

ROOT = Path(__file__).resolve().parent / "templates"
NAME_PATTERN = re.compile(r"^[a-z0-9][a-z0-9_-]{0,62}$")
VERSION_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,31}$")

# part -> the placeholders it must use, exactly.
PARTS: dict[str, frozenset[str]] = {
    "system": frozenset({"task"}),  # the system message of every context
    "observation": frozenset({"observation"}),  # a user turn: the step's observation
    "observation_after": frozenset({"result", "observation"}),  # … after the previous action's result
    "state_data": frozenset({"observation", "data"}),  # an observation with structured state (compact JSON)
    "omitted": frozenset({"count"}),  # the history budget's marker
    "turn": frozenset({"role", "content"}),  # one message in the plain-text rendering
    "privileged": frozenset({"system", "block"}),  # a teacher's system message: the plain one + the block
    "memory": frozenset({"items"}),
    "hindsight": frozenset({"horizon", "events"}),
    "evidence_card": frozenset({"card"}),
    "reflection": frozenset({"task", "failure_reason", "failed_steps", "outcome"}),
    "attempt_summary": frozenset({"attempts"}),
}


class TemplateError(ValueError):
    """A template folder that is missing or malformed."""


@dataclass(frozen=True)
class ContextTemplate:
    name: str
    version: str
    parts: dict[str, string.Template]
    # part -> its text split at its placeholders (`_pieces`), once
    pieces: dict[str, tuple[tuple[str, str], ...]] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "pieces", {part: _pieces(tpl) for part, tpl in self.parts.items()})

    @property
    def id(self) -> str:
        """`name@version`: what a response echoes as its template_version."""
        return f"{self.name}@{self.version}"

    def fill(self, part: str, **values: object) -> str:
        """`string.Template.substitute` of the part: the same text (KeyError for a
        placeholder without a value), from the pieces split at load instead of a scan
        of the template per call; a teacher-contexts request fills ~10k parts."""
        out = []
        for literal, name in self.pieces[part]:
            out.append(literal)
            if name:
                out.append(str(values[name]))
        return "".join(out)


def _pieces(tpl: string.Template) -> tuple[tuple[str, str], ...]:
    """The template's text as (literal, placeholder name) pairs in order, the last
    one's name empty: the text up to each placeholder, `$$` already made `$`. Only for
    a valid template (load_template checks `is_valid` first)."""
    pieces: list[tuple[str, str]] = []
    literal: list[str] = []
    at = 0
    for m in tpl.pattern.finditer(tpl.template):
        literal.append(tpl.template[at : m.start()])
        at = m.end()
        name = m.group("named") or m.group("braced")
        if name is not None:
            pieces.append(("".join(literal), name))
            literal = []
        elif m.group("escaped") is not None:
            literal.append(tpl.delimiter)
        else:
            raise TemplateError(f"a malformed placeholder at {m.start()}")
    literal.append(tpl.template[at:])
    pieces.append(("".join(literal), ""))
    return tuple(pieces)


def available() -> list[str]:
    """The template names shipped with the server."""
    return sorted(p.name for p in ROOT.iterdir() if (p / "manifest.json").is_file() and NAME_PATTERN.match(p.name))


@lru_cache(maxsize=16)
def load_template(name: str) -> ContextTemplate:
    """The named template (KeyError: there is none by that name; TemplateError: its
    files are malformed)."""
    if not NAME_PATTERN.match(name) or name not in available():
        raise KeyError(name)
    folder = ROOT / name
    try:
        manifest = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise TemplateError(f"template {name!r}: manifest.json is unreadable ({exc})") from exc
    version = manifest.get("version")
    if manifest.get("name") != name or not isinstance(version, str) or not VERSION_PATTERN.match(version):
        raise TemplateError(f"template {name!r}: manifest.json needs name {name!r} and a version string")
    parts: dict[str, string.Template] = {}
    for part, wanted in PARTS.items():
        path = folder / f"{part}.txt"
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise TemplateError(f"template {name!r}: {part}.txt is missing ({exc})") from exc
        text = text[:-1] if text.endswith("\n") else text  # files end with a newline; contexts do not
        tpl = string.Template(text)
        if not tpl.is_valid():
            raise TemplateError(f"template {name!r}: {part}.txt has a malformed placeholder ($$ is a literal $)")
        used = frozenset(tpl.get_identifiers())
        if used != wanted:
            raise TemplateError(
                f"template {name!r}: {part}.txt uses {sorted(used)}, the builders fill exactly {sorted(wanted)}"
            )
        parts[part] = tpl
    return ContextTemplate(name=name, version=version, parts=parts)
