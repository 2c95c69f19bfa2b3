"""Pure rendering of teacher contexts: the own-action guard, fitting a teacher's
privileged block into its character and token budgets, and adding it to the plain
context of the step (rendered by domain.contexts.plain, the one plain context the
SFT dataset shares).

No I/O and no database here: service.py loads, these functions shape.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from domain.contexts.templates import ContextTemplate

# -- small text helpers ---------------------------------------------------------


def clip(text: str, most: int) -> str:
    """Whitespace collapsed, at most `most` characters (an ellipsis marks a cut)."""
    flat = " ".join(text.split())
    return flat if len(flat) <= most else flat[: most - 1].rstrip() + "…"


def number(x: float) -> str:
    return f"{x:g}"


# -- the own-action guard ---------------------------------------------------------

MIN_ACTION_CHARS = 2
MARKERS = ("[action withheld]", "[withheld]", "[redacted]", "[...]")
_PUNCT = frozenset("{}[],:")
_TOKENS = re.compile(r"(\s+)|([{}\[\],:])|([^\s{}\[\],:]+)")


def _renderings(action: Any) -> set[str]:
    """The forms the action's text can take in a block: the string itself, or a tool
    call as JSON compact or spaced, keys sorted or as sent, non-ASCII escaped or not."""
    if isinstance(action, str):
        return {action}
    out = set()
    for sort in (True, False):
        for ascii_only in (True, False):
            for seps in ((",", ":"), (", ", ": ")):
                out.add(json.dumps(action, sort_keys=sort, separators=seps, ensure_ascii=ascii_only))
    return out


def _pattern(text: str) -> re.Pattern[str] | None:
    """A whole-word, case-insensitive pattern of the text in which any run of
    whitespace matches any other, and whitespace around JSON punctuation is optional."""
    text = re.sub(r"\s*([{}\[\],:])\s*", r"\1", text.strip())
    if len(text) < MIN_ACTION_CHARS:
        return None
    tokens = [m.group(0) for m in _TOKENS.finditer(text) if not m.group(0).isspace()]
    body = ""
    for previous, token in zip([None, *tokens], tokens, strict=False):
        if previous is not None:  # a separator between two words
            body += r"\s*" if previous in _PUNCT or token in _PUNCT else r"\s+"
        body += re.escape(token)
        if previous is None and re.match(r"\w", token):
            # "not after a word character", said after the first token rather than
            # before it: the same matches, but a pattern that starts with a literal
            # is searched for by that literal (~3x faster over a block of text)
            body += r"(?<!\w" + re.escape(token) + ")"
    end = r"(?!\w)" if re.match(r"\w", text[-1]) else ""
    return re.compile(body + end, re.IGNORECASE)


class ActionGuard:
    """Finds the step's own action in a text, as a whole word or phrase, whatever
    its case and spacing, and replaces every occurrence with a marker. Actions
    shorter than MIN_ACTION_CHARS are not guarded (one letter occurs everywhere)."""

    def __init__(self, action: Any) -> None:
        unique = {p.pattern: p for p in (_pattern(r) for r in sorted(_renderings(action))) if p is not None}
        self.patterns = [unique[key] for key in sorted(unique)]
        self.marker = next((m for m in MARKERS if not self.found(m)), "")

    def found(self, text: str) -> bool:
        return any(p.search(text) for p in self.patterns)

    def first(self, text: str) -> int | None:
        starts = [m.start() for p in self.patterns if (m := p.search(text))]
        return min(starts) if starts else None

    def _sub(self, text: str, marker: str) -> tuple[str, int]:
        found = 0
        for p in self.patterns:
            text, n = p.subn(marker, text)
            found += n
        return text, found

    def redact(self, text: str) -> tuple[str, int]:
        """(the text without the action, occurrences replaced)."""
        if not self.patterns:
            return text, 0
        total = 0
        for _ in range(3):  # a marker next to some text can complete a new occurrence (rare): again
            text, n = self._sub(text, self.marker)
            total += n
            if not n:
                return text, total
        while True:  # still there: delete (every pass shrinks the text, so this ends)
            text, n = self._sub(text, "")
            total += n
            if not n:
                return text, total


def guard_for(action: Any) -> ActionGuard:
    """`ActionGuard(action)`, one per distinct action: a guard depends on its action
    only and is never changed, and a rollout batch repeats few actions over its
    1,280 steps (compiling each step's patterns again was ~2 % of a request)."""
    return _guard(("text", action) if isinstance(action, str) else ("json", json.dumps(action)))


@functools.lru_cache(maxsize=4096)
def _guard(key: tuple[str, str]) -> ActionGuard:
    kind, text = key
    return ActionGuard(text if kind == "text" else json.loads(text))


# -- tokens ---------------------------------------------------------------------


class TokenCounter(Protocol):
    def count(self, text: str) -> int: ...

    def cut(self, text: str, most: int) -> str:
        """The longest prefix of `text` of at most `most` tokens."""
        ...


class HFTokenCounter:
    """A Hugging Face `tokenizers` tokenizer (a tokenizer.json), without special tokens."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer

    def count(self, text: str) -> int:
        return len(self.tokenizer.encode(text, add_special_tokens=False).ids)

    def cut(self, text: str, most: int) -> str:
        enc = self.tokenizer.encode(text, add_special_tokens=False)
        if len(enc.ids) <= most:
            return text
        n = most
        while n > 0:
            prefix = text[: enc.offsets[n - 1][1]]
            if self.count(prefix) <= most:
                return prefix
            n -= 1
        return ""


# -- the plain context (domain.contexts.plain) and a teacher's on it ---------------


def with_privileged(template: ContextTemplate, system: str, text: str, block: str) -> tuple[str, str]:
    """A teacher's (system message, text): the plain system message with the
    privileged block added, and the plain text (the transcript of the plain
    messages, `system` first) with its first turn rewritten to match."""
    teacher_system = template.fill("privileged", system=system, block=block)
    first = template.fill("turn", role="system", content=system)
    assert text.startswith(first), "the text is the transcript of messages with this system message first"
    return teacher_system, template.fill("turn", role="system", content=teacher_system) + text[len(first) :]


# -- privileged blocks within budgets ---------------------------------------------

EMPTY_SLOT = "(none)"


@dataclass(frozen=True)
class Piece:
    """One unit of a privileged block, kept or left out whole: an item, a step, a line."""

    text: str
    priority: int  # lower is kept longer
    item_id: str | None = None
    group: str | None = None  # a heading shown above the group's first kept piece


@dataclass(frozen=True)
class Draft:
    """A block before budgets: the template part, the placeholder the pieces fill
    (in display order) and the part's other values."""

    part: str
    slot: str
    pieces: tuple[Piece, ...]
    values: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Block:
    text: str
    item_ids: list[str]
    item_chars: dict[str, int]
    omitted: int  # pieces left out by the budgets
    redacted: int  # occurrences of the step's own action replaced
    tokens: int | None


def _slot_text(pieces: Sequence[Piece]) -> str:
    lines: list[str] = []
    group: str | None = None
    for p in pieces:
        if p.group is not None and p.group != group:
            lines.append(p.group)
        group = p.group
        lines.append(p.text)
    return "\n".join(lines) if lines else EMPTY_SLOT


def _cut(text: str, max_chars: int, guard: ActionGuard, tokens: TokenCounter | None, max_tokens: int | None) -> str:
    """Cut to the budgets; a cut can complete an occurrence of the action at the new
    end (cutting "go northward" to "go north"): cut that off too."""
    text = text[:max_chars]
    if tokens is not None and max_tokens is not None and tokens.count(text) > max_tokens:
        text = tokens.cut(text, max_tokens)
    while (at := guard.first(text)) is not None:
        text = text[:at]
    return text.rstrip()


def fit(
    template: ContextTemplate,
    draft: Draft,
    guard: ActionGuard,
    *,
    max_chars: int,
    tokens: TokenCounter | None = None,
    max_tokens: int | None = None,
    max_items: int | None = None,
) -> Block:
    """The privileged block within max_chars (and max_tokens when counted, and at
    most max_items pieces): pieces go in by priority while they fit whole (one that
    does not fit is left out, a smaller later one may still go in), shown in display
    order; the step's own action is replaced wherever it occurs; what cannot be made
    to fit is cut at the end."""
    redacted = 0
    pieces = []
    for p in draft.pieces:
        text, n = guard.redact(p.text)
        redacted += n
        pieces.append(Piece(text, p.priority, p.item_id, p.group))

    def render(chosen: Sequence[int]) -> str:
        kept = [pieces[i] for i in sorted(chosen)]
        return template.fill(draft.part, **draft.values, **{draft.slot: _slot_text(kept)})

    fixed = len(render([])) - len(EMPTY_SLOT)
    order = sorted(range(len(pieces)), key=lambda i: (pieces[i].priority, i))
    chosen: list[int] = []
    groups: set[str | None] = set()
    used = -1  # the slot's length: pieces and headings, one newline between lines
    for i in order:
        if max_items is not None and len(chosen) >= max_items:
            break
        p = pieces[i]
        cost = len(p.text) + 1
        if p.group is not None and p.group not in groups:
            cost += len(p.group) + 1
        if fixed + used + cost <= max_chars:
            chosen.append(i)
            used += cost
            groups.add(p.group)
    # (a heading shown twice because its group's pieces are not adjacent is counted
    # by the render below, which the cut keeps honest)
    if tokens is not None and max_tokens is not None and chosen and tokens.count(render(chosen)) > max_tokens:
        lo, hi = 0, len(chosen)  # the most pieces, in priority order, whose block fits the tokens
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if tokens.count(render(chosen[:mid])) <= max_tokens:
                lo = mid
            else:
                hi = mid - 1
        chosen = chosen[:lo]
    text, n = guard.redact(render(chosen))  # across pieces, and in the template's own words
    redacted += n
    over_tokens = tokens is not None and max_tokens is not None and tokens.count(text) > max_tokens
    if len(text) > max_chars or over_tokens:
        text = _cut(text, max_chars, guard, tokens, max_tokens)
    item_ids: list[str] = []
    item_chars: dict[str, int] = {}
    for i in sorted(chosen):
        item_id = pieces[i].item_id
        if item_id is None:
            continue
        if item_id not in item_chars:
            item_ids.append(item_id)
            item_chars[item_id] = 0
        item_chars[item_id] += len(pieces[i].text)
    return Block(
        text=text,
        item_ids=item_ids,
        item_chars=item_chars,
        omitted=len(pieces) - len(chosen),
        redacted=redacted,
        tokens=tokens.count(text) if tokens is not None else None,
    )
