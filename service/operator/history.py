"""A reflection's version history as an operator reads it: each edit as word-level
diffs of the content fields it changed, and runs of automatic votes that only move
a counter (a reflector merging the same item again) folded into one summary."""

from __future__ import annotations

import difflib
import json
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from service.reflections.schemas import ReflectionVersionRead

# A reflector's vote on an item that already exists (reflectors/prompted/pool.py).
AUTOMATIC = frozenset({"merge", "upvote", "downvote"})
# Content fields that only count votes: a change to them alone is not an edit.
COUNTERS = ("importance",)

Part = tuple[str, str]  # ("=" | "+" | "-", text)


def _value_text(value: Any) -> str:
    if value is None:
        return ""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)


def _words(text: str) -> list[str]:
    """Words with their trailing whitespace (leading whitespace its own token)."""
    return re.findall(r"^\s+|\S+\s*", text)


def word_diff(before: str, after: str) -> list[Part]:
    """The changes from `before` to `after`, word by word (whitespace does not count)."""
    a, b = _words(before), _words(after)
    matcher = difflib.SequenceMatcher(None, [w.rstrip() for w in a], [w.rstrip() for w in b], autojunk=False)
    parts: list[Part] = []

    def add(op: str, words: list[str]) -> None:
        text = "".join(words)
        if not text:
            return
        if parts and parts[-1][0] == op:
            parts[-1] = (op, parts[-1][1] + text)
        else:
            parts.append((op, text))

    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            add("=", b[j1:j2])
        else:
            add("-", a[i1:i2])
            add("+", b[j1:j2])
    return parts


@dataclass
class FieldDiff:
    field: str
    parts: list[Part]


@dataclass
class VersionEntry:
    version: ReflectionVersionRead
    diff: list[FieldDiff]  # the changed non-counter fields against the entry before; empty: none
    counters: dict[str, tuple[Any, Any]] = field(default_factory=dict)  # counter -> (before, after), when changed

    @property
    def counter_only(self) -> bool:
        return self.version.action in AUTOMATIC and not self.diff


@dataclass
class VoteRun:
    """Consecutive automatic votes that changed only counters, shown as one row."""

    entries: list[VersionEntry]  # oldest first

    @property
    def summary(self) -> str:
        actions = Counter(e.version.action for e in self.entries)
        said = [f"{n} {action}{'s' if n != 1 else ''}" for action, n in actions.most_common()]
        for name in COUNTERS:
            moves = [e.counters[name] for e in self.entries if name in e.counters]
            if moves:
                said.append(f"{name} {_value_text(moves[0][0]) or '—'}→{_value_text(moves[-1][1])}")
        return ", ".join(said)


def _entry(v: ReflectionVersionRead, previous: dict[str, Any] | None) -> VersionEntry:
    if previous is None:
        return VersionEntry(v, [])
    diffs, counters = [], {}
    for name in sorted(set(previous) | set(v.content), key=lambda n: (n == "text", n)):
        old, new = previous.get(name), v.content.get(name)
        if old == new:
            continue
        if name in COUNTERS:
            counters[name] = (old, new)
        else:
            diffs.append(FieldDiff(name, word_diff(_value_text(old), _value_text(new))))
    return VersionEntry(v, diffs, counters)


def history_rows(versions: list[ReflectionVersionRead]) -> list[VersionEntry | VoteRun]:
    """Oldest first; two or more consecutive counter-only votes become one VoteRun."""
    rows: list[VersionEntry | VoteRun] = []
    run: list[VersionEntry] = []
    previous: dict[str, Any] | None = None

    def flush() -> None:
        if len(run) > 1:
            rows.append(VoteRun(list(run)))
        else:
            rows.extend(run)
        run.clear()

    for v in versions:
        entry = _entry(v, previous)
        previous = v.content
        if entry.counter_only:
            run.append(entry)
            continue
        flush()
        rows.append(entry)
    flush()
    return rows
