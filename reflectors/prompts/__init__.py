"""Versioned prompts: one file per prompt version, `<name>.v<version>.md`.

A released version is never edited: a change of wording is a new file, so every
reflection can name the exact prompt that produced it (`Prompt.id`, stored as its
reflector version) and prompt changes can be compared on the same trajectories.

File layout:

    <!--
    free text for maintainers (what the prompt is for, its answer schema), and one
    line per placeholder:  {name}: what the reflector must put there
    -->
    === system ===
    the system message, sent verbatim (braces need no escaping)
    === user ===
    the user message template, filled with str.format_map ({{ }} for literal braces)

The comment block is stripped before sending. Loading checks that the documented
placeholders are exactly those the template uses.
"""

from __future__ import annotations

import json
import re
import string
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Any

from reflectors.llm_client.answers import Message

_FILE_NAME = re.compile(r"^(?P<name>[a-z][a-z0-9_]*)\.v(?P<version>[1-9][0-9]*)\.md$")
_DOCUMENTED = re.compile(r"^\s*\{(?P<name>[a-z_][a-z0-9_]*)\}:\s*(?P<doc>\S.*)$", re.MULTILINE)
_SECTIONS = re.compile(r"^=== system ===\n(?P<system>.*?)\n=== user ===\n(?P<user>.*)$", re.DOTALL)


class PromptError(ValueError):
    """A prompt file that is missing or malformed, or values that do not fit it."""


@dataclass(frozen=True)
class Prompt:
    name: str
    version: int
    system: str
    user_template: str
    placeholders: dict[str, str]
    """placeholder -> its documentation from the file's comment block."""

    @property
    def id(self) -> str:
        """`name.vN`: what a reflection records as the prompt that produced it."""
        return f"{self.name}.v{self.version}"

    def render(self, **values: Any) -> list[Message]:
        """The chat messages: the system part and the filled user template.

        Every placeholder must be given and nothing else (a misspelt name fails here,
        not silently in the model's answer). Strings go in as they are, None as
        "(none)", anything else as indented JSON.
        """
        missing = sorted(set(self.placeholders) - set(values))
        unknown = sorted(set(values) - set(self.placeholders))
        if missing or unknown:
            raise PromptError(f"prompt {self.id}: missing values {missing}, unknown values {unknown}")
        text = {key: _as_text(value) for key, value in values.items()}
        return [
            {"role": "system", "content": self.system},
            {"role": "user", "content": self.user_template.format_map(text)},
        ]


def _as_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if value is None:
        return "(none)"
    return json.dumps(value, ensure_ascii=False, indent=2, default=str)


def available_prompts() -> list[tuple[str, int]]:
    """Every (name, version) shipped, sorted."""
    found = []
    for entry in resources.files(__package__).iterdir():
        match = _FILE_NAME.match(entry.name)
        if match:
            found.append((match["name"], int(match["version"])))
    return sorted(found)


@lru_cache(maxsize=64)
def load_prompt(name: str, version: int) -> Prompt:
    """The prompt `name` at `version`, parsed and checked (cached: files never change
    while a process runs)."""
    path = resources.files(__package__) / f"{name}.v{version}.md"
    if not path.is_file():
        raise PromptError(f"no prompt {name}.v{version}; available: {available_prompts()}")
    return parse_prompt(name, version, path.read_text(encoding="utf-8"))


def parse_prompt(name: str, version: int, text: str) -> Prompt:
    """Parse a prompt file's text (see the module docstring for the layout)."""
    where = f"prompt {name}.v{version}"
    if not text.startswith("<!--") or "-->" not in text:
        raise PromptError(f"{where}: must start with a <!-- … --> comment documenting its placeholders")
    comment, body = text[4:].split("-->", 1)
    sections = _SECTIONS.match(body.strip("\n") + "\n")
    if sections is None:
        raise PromptError(f"{where}: expected a '=== system ===' section followed by a '=== user ===' section")
    system, user = sections["system"].strip(), sections["user"].strip()
    documented = {m["name"]: m["doc"].strip() for m in _DOCUMENTED.finditer(comment)}
    try:
        used = {field for _, field, _, _ in string.Formatter().parse(user) if field is not None}
    except ValueError as exc:
        raise PromptError(f"{where}: user template does not parse ({exc}); double literal braces") from exc
    if not all(field.isidentifier() for field in used):
        raise PromptError(f"{where}: placeholders must be plain names, got {sorted(used)}")
    if set(documented) != used:
        raise PromptError(
            f"{where}: placeholders documented {sorted(documented)} but used {sorted(used)}; document each one"
        )
    return Prompt(name=name, version=version, system=system, user_template=user, placeholders=documented)
