"""The bodies of POST /v1/distill/advantages, in and out: JSON (the default) or the
binary layout of service.distill.advantages.binary, chosen by Content-Type and Accept.

A JSON body is parsed once. simdjson parses it first: each per-token list of
numbers is copied into a numpy array by simdjson's C++ (no Python float is made),
and pydantic validates the rest (ids, params, the structure) with those lists left
out, so no Python code runs per token. A body simdjson reads differently from
orjson, or whose lists are not plain numbers, goes to the orjson path instead (a
byte order mark, a list that may hold a list, any error): there each list becomes
a numpy array in one call. Both give the same request to the bit (a property test
compares them). The answers to bad input are the ones FastAPI's own body
validation gave, to the letter:

- anything orjson refuses (NaN, Infinity, lone surrogates, invalid UTF-8 or JSON)
  and any body that may hold a JSON true / false inside a list (numpy would read it
  as a number, pydantic's strict float refuses it) take the slow path: the standard
  library's parser, the app-wide storable check and pydantic on the whole body,
  exactly as FastAPI does for a declared body model;
- a list numpy cannot read as plain numbers (a string, a null, a nested list, a
  float in `mask`) is left in the body for pydantic, which names it as before;
- what depends on meaning (lengths, masks 0/1, log-probs <= 0) is checked by the
  service on arrays, whichever way they came.

The answer is written by orjson from numpy (its small parts through the response
model's own serializer): the same JSON, number for number, as the response model gave.
"""

from __future__ import annotations

import json
import queue
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import orjson
import simdjson
from fastapi import Response
from fastapi.exceptions import RequestValidationError
from pydantic import ValidationError
from starlette.exceptions import HTTPException

from domain.errors import InvalidInput
from service.distill.advantages.binary import MEDIA_TYPE, read, write
from service.distill.advantages.schemas import AdvantagesRequest, AdvantagesResponse
from service.limits.storable import check_json
from service.settings import Limits

FLOAT_COLUMN = ("float32", "float64")
INT_COLUMN = ("int8", "uint8", "int16", "int32", "int64")
LOGPROB_KINDS = ("student", "rollout", "ref")  # one list each
NAMED_KINDS = ("teacher", "pre", "post")  # one list, or {NAME: list}
FLOAT_FIELDS = ("teacher_entropy", "advantages")  # on the trajectory itself
INT_FIELDS = ("mask", "token_steps")
RESPONSE_COLUMNS = ("advantages", "token_rewards", "is_weights", "kl")  # per token in the answer


def _float_series(value: Any) -> np.ndarray | None:
    """A JSON list of numbers as float64 (ints allowed, as pydantic's strict float
    allows them); None when it holds anything else (left for pydantic to name)."""
    if type(value) is not list:
        return None
    try:
        arr = np.asarray(value)  # dtype inferred: a string, a null or nesting shows in it
    except (ValueError, TypeError, OverflowError):
        return None
    if arr.ndim != 1 or arr.dtype.kind not in "fi":
        return None
    return arr.astype(np.float64, copy=False)


class _SlowPath(Exception):
    """The body needs the slow path to be answered as before."""


def _int_series(value: Any) -> np.ndarray | None:
    """A JSON list of integers as int64; None otherwise (a float, even 1.0, is pydantic's int_type)."""
    if type(value) is not list:
        return None
    if not value:
        return np.zeros(0, dtype=np.int64)
    try:
        arr = np.asarray(value)
    except (ValueError, TypeError, OverflowError):
        return None
    if arr.dtype.kind == "f":
        # orjson reads an integer past 64 bits as a float: the standard library keeps
        # it an int, which the service refuses by its own rule (int64), not int_type.
        raise _SlowPath
    return arr if arr.ndim == 1 and arr.dtype == np.int64 else None


def _where_an_item_starts(raw: bytes, word: bytes, *, or_at_start: bool) -> bool:
    """Whether `word` stands where a list item may start: after `[` or `,` (whitespace
    between), or, with `or_at_start`, first in the body. A match inside a string only
    costs the slower path its caller chooses."""
    i = raw.find(word)
    while i != -1:
        j = i - 1
        while j >= 0 and raw[j] in b" \t\r\n":
            j -= 1
        if (j < 0 and or_at_start) or (j >= 0 and raw[j] in b"[,"):
            return True
        i = raw.find(word, i + len(word))
    return False


def _may_hold_bool_items(raw: bytes) -> bool:
    """A `true` or `false` that may be an item of a list (numpy reads it as 1 / 0)."""
    return any(_where_an_item_starts(raw, word, or_at_start=True) for word in (b"true", b"false"))


# (group index, trajectory index, field, name): where an array goes back into the model;
# field is "logprobs.<kind>" or a trajectory field; name is a {NAME: list} key, else None.
Slot = tuple[int, int, str, str | None]


def _trajectory_slots(doc: Any) -> Iterator[tuple[int, int, dict[str, Any]]]:
    groups = doc.get("groups") if isinstance(doc, dict) else None
    for gi, group in enumerate(groups if isinstance(groups, list) else ()):
        trajectories = group.get("trajectories") if isinstance(group, dict) else None
        for ti, traj in enumerate(trajectories if isinstance(trajectories, list) else ()):
            if isinstance(traj, dict):
                yield gi, ti, traj


def _take_json_arrays(doc: Any) -> dict[Slot, np.ndarray]:
    """Every per-token list numpy reads as plain numbers, replaced in `doc` by [] (which
    the schema accepts) and returned by where it goes back."""
    taken: dict[Slot, np.ndarray] = {}

    def take(holder: dict[str, Any], key: str, slot: Slot, reader: Any) -> None:
        arr = reader(holder.get(key))
        if arr is not None:
            taken[slot] = arr
            holder[key] = []

    for gi, ti, traj in _trajectory_slots(doc):
        for field in FLOAT_FIELDS:
            take(traj, field, (gi, ti, field, None), _float_series)
        for field in INT_FIELDS:
            take(traj, field, (gi, ti, field, None), _int_series)
        lp = traj.get("logprobs")
        if not isinstance(lp, dict):
            continue
        for kind in LOGPROB_KINDS + NAMED_KINDS:
            value = lp.get(kind)
            if isinstance(value, dict):
                for name in value:
                    take(value, name, (gi, ti, f"logprobs.{kind}", name), _float_series)
            else:
                take(lp, kind, (gi, ti, f"logprobs.{kind}", None), _float_series)
    return taken


class _Fallback(Exception):
    """simdjson's reading may differ from orjson's here: take the orjson path."""


_BOM = b"\xef\xbb\xbf"  # simdjson skips it, orjson refuses the body
# Parsers kept for reuse (one per core of the reference machine): each keeps buffers
# the size of the largest body it parsed, so a thread pool must not keep one each.
PARSERS_KEPT = 2
_PARSERS: queue.SimpleQueue[simdjson.Parser] = queue.SimpleQueue()


def _may_nest_lists(raw: bytes) -> bool:
    """A `[` that may open a list inside a list, which simdjson's as_buffer would
    flatten where the schema refuses it."""
    return _where_an_item_starts(raw, b"[", or_at_start=False)


def _plain(value: Any) -> Any:
    if isinstance(value, simdjson.Object):
        return value.as_dict()
    if isinstance(value, simdjson.Array):
        return value.as_list()
    return value


def _unique_items(element: simdjson.Object) -> Iterator[tuple[str, Any]]:
    """An object's members, lazily (`items()` would make Python lists of them all);
    a repeated key (orjson keeps the last) takes the orjson path."""
    keys = list(element.keys())
    if len(set(keys)) != len(keys):
        raise _Fallback
    for key in keys:
        yield key, element[key]


class _SimdReader:
    """One body's walk: the per-token lists as numpy arrays, the rest as Python."""

    def __init__(self) -> None:
        self.taken: dict[Slot, np.ndarray] = {}

    def take(self, value: Any, slot: Slot, of_type: str) -> Any:
        if not isinstance(value, simdjson.Array):
            return _plain(value)  # not a list: pydantic names it, as on the orjson path
        try:
            buffer = value.as_buffer(of_type=of_type)
        except (TypeError, ValueError):  # not all numbers of that type: the orjson path decides
            raise _Fallback from None
        self.taken[slot] = np.frombuffer(buffer, dtype=np.float64 if of_type == "d" else np.int64)
        return []

    def logprobs(self, gi: int, ti: int, element: Any) -> Any:
        if not isinstance(element, simdjson.Object):
            return _plain(element)
        out: dict[str, Any] = {}
        for kind, value in _unique_items(element):
            if kind not in LOGPROB_KINDS + NAMED_KINDS:
                out[kind] = _plain(value)
            elif isinstance(value, simdjson.Object):
                field = f"logprobs.{kind}"
                out[kind] = {name: self.take(v, (gi, ti, field, name), "d") for name, v in _unique_items(value)}
            else:
                out[kind] = self.take(value, (gi, ti, f"logprobs.{kind}", None), "d")
        return out

    def trajectory(self, gi: int, ti: int, element: Any) -> Any:
        if not isinstance(element, simdjson.Object):
            return _plain(element)
        out: dict[str, Any] = {}
        for key, value in _unique_items(element):
            if key in FLOAT_FIELDS:
                out[key] = self.take(value, (gi, ti, key, None), "d")
            elif key in INT_FIELDS:
                out[key] = self.take(value, (gi, ti, key, None), "i")
            elif key == "logprobs":
                out[key] = self.logprobs(gi, ti, value)
            else:
                out[key] = _plain(value)
        return out

    def _members(self, element: simdjson.Object, list_key: str, item: Callable[[int, Any], Any]) -> dict[str, Any]:
        """The object's members as Python, each item of its `list_key` list read by `item`."""
        out: dict[str, Any] = {}
        for key, value in _unique_items(element):
            if key == list_key and isinstance(value, simdjson.Array):
                out[key] = [item(i, v) for i, v in enumerate(value)]
            else:
                out[key] = _plain(value)
        return out

    def group(self, gi: int, element: Any) -> Any:
        if not isinstance(element, simdjson.Object):
            return _plain(element)
        return self._members(element, "trajectories", lambda ti, t: self.trajectory(gi, ti, t))

    def body(self, root: Any) -> dict[str, Any]:
        if not isinstance(root, simdjson.Object):
            raise _Fallback
        return self._members(root, "groups", self.group)


def _simd_json_arrays(raw: bytes) -> tuple[dict[str, Any], dict[Slot, np.ndarray]]:
    """What `orjson.loads` and `_take_json_arrays` give, read by simdjson; _Fallback
    where the two readings could differ."""
    if raw.startswith(_BOM) or _may_nest_lists(raw):
        raise _Fallback
    try:
        parser = _PARSERS.get_nowait()
    except queue.Empty:
        parser = simdjson.Parser()
    reader = _SimdReader()
    try:
        root = parser.parse(raw)
        try:
            doc = reader.body(root)
        finally:
            del root  # the parser is reusable only once nothing refers into its document
    except (ValueError, TypeError, RuntimeError, UnicodeDecodeError):  # simdjson's errors: orjson words them
        raise _Fallback from None
    finally:
        if _PARSERS.qsize() < PARSERS_KEPT:
            _PARSERS.put(parser)
    return doc, reader.taken


def _put_arrays(body: AdvantagesRequest, arrays: dict[Slot, np.ndarray]) -> None:
    """The arrays back where pydantic validated [] (the service reads lists or arrays alike)."""
    for (gi, ti, field, name), arr in arrays.items():
        holder: Any = body.groups[gi].trajectories[ti]
        if field.startswith("logprobs."):
            holder, field = holder.logprobs, field.removeprefix("logprobs.")
        if name is None:
            setattr(holder, field, arr)
        else:
            getattr(holder, field)[name] = arr


def _validate(doc: Any) -> AdvantagesRequest:
    """pydantic's validation, its errors as FastAPI reports a declared body's."""
    try:
        return AdvantagesRequest.model_validate(doc)
    except ValidationError as exc:
        errors = [{**e, "loc": ("body", *e["loc"])} for e in exc.errors(include_url=False)]
        raise RequestValidationError(errors, body=doc) from None


def _slow_json(raw: bytes, content_type: str | None, max_chars: int) -> AdvantagesRequest:
    """What FastAPI does with a body declared as AdvantagesRequest (and the app-wide
    storable check before it): for bodies the fast path cannot take."""
    doc: Any = raw
    if _is_json(content_type):
        try:
            doc = json.loads(raw)
        except json.JSONDecodeError as e:
            error = {"type": "json_invalid", "loc": ("body", e.pos), "msg": "JSON decode error", "input": {}}
            raise RequestValidationError([{**error, "ctx": {"error": e.msg}}], body=e.doc) from None
        except ValueError:  # not UTF-8: FastAPI's 400, which the app's handler words
            raise HTTPException(status_code=400, detail="There was an error parsing the body") from None
        check_json(doc, "", max_chars)
    return _validate(doc)


def _is_json(content_type: str | None) -> bool:
    media = (content_type or "").split(";")[0].strip().lower()
    return media.startswith("application/") and (media.endswith("/json") or media.endswith("+json"))


def _is_binary(content_type: str | None) -> bool:
    return (content_type or "").split(";")[0].strip().lower() == MEDIA_TYPE


def decode_json(raw: bytes, content_type: str | None, max_chars: int) -> AdvantagesRequest:
    if not raw:
        raise RequestValidationError([{"type": "missing", "loc": ("body",), "msg": "Field required", "input": None}])
    if not _is_json(content_type) or _may_hold_bool_items(raw):
        return _slow_json(raw, content_type, max_chars)
    try:
        doc, arrays = _simd_json_arrays(raw)
    except _Fallback:
        try:
            doc = orjson.loads(raw)
            arrays = _take_json_arrays(doc)
        except (orjson.JSONDecodeError, _SlowPath):
            return _slow_json(raw, content_type, max_chars)
    check_json(doc, "", max_chars)  # the storable check, on what is left (the taken arrays hold only numbers)
    body = _validate(doc)
    _put_arrays(body, arrays)
    return body


def _binary_fields() -> dict[str, tuple[str, ...]]:
    fields: dict[str, tuple[str, ...]] = {f"logprobs.{k}": FLOAT_COLUMN for k in LOGPROB_KINDS + NAMED_KINDS}
    fields |= {f: FLOAT_COLUMN for f in FLOAT_FIELDS}
    return fields | {"mask": ("bool", *INT_COLUMN), "token_steps": INT_COLUMN}


BINARY_FIELDS = _binary_fields()


def _column_slot(column: str, gi: int, ti: int) -> Slot:
    """'logprobs.teacher.h1' -> (gi, ti, 'logprobs.teacher', 'h1')."""
    parts = column.split(".", 2)
    if parts[0] == "logprobs":
        return gi, ti, f"logprobs.{parts[1]}", parts[2] if len(parts) > 2 else None
    return gi, ti, column, None


def _column_field(column: str) -> str:
    """The field a column fills: 'logprobs.teacher.h1' -> 'logprobs.teacher' (a name
    only after teacher, pre and post; the schema checks the name itself)."""
    parts = column.split(".", 2)
    if parts[0] != "logprobs" or len(parts) < 3:
        return column
    return ".".join(parts[:2]) if parts[1] in NAMED_KINDS else column


def _named_slot_free(present: Any, name: str) -> bool:
    return present is None or (isinstance(present, dict) and name not in present)


class _OpenNames(dict[str, tuple[str, ...]]):
    """BINARY_FIELDS, where `logprobs.teacher|pre|post.NAME` stands for any NAME (the
    schema checks the name itself)."""

    def __contains__(self, column: object) -> bool:
        return isinstance(column, str) and super().__contains__(_column_field(column))

    def __getitem__(self, column: str) -> tuple[str, ...]:
        return super().__getitem__(_column_field(column))


def decode_binary(raw: bytes, limits: Limits) -> AdvantagesRequest:
    decoded = read(raw, "request", _OpenNames(BINARY_FIELDS), limits.max_advantage_tokens)
    doc, columns = decoded.body, decoded.columns
    slots = list(_trajectory_slots(doc))
    if len(slots) != len(decoded.tokens):
        _validate(doc)  # a request without its groups and trajectories as objects: pydantic names what is wrong
        raise InvalidInput(
            f"header.tokens has {len(decoded.tokens)} counts for {len(slots)} trajectories (one per trajectory, "
            "in request order)",
            field="header.tokens",
            rule="same_length",
        )
    offsets = np.zeros(len(slots) + 1, dtype=np.int64)
    np.cumsum(decoded.tokens, out=offsets[1:])
    for column, values in columns.items():
        if values.dtype.kind == "f":
            bad = np.flatnonzero(~np.isfinite(values))
            if len(bad):
                t = int(np.searchsorted(offsets, bad[0], side="right")) - 1
                gi, ti, _ = slots[t]
                where = f"groups[{gi}].trajectories[{ti}].{column}[{int(bad[0] - offsets[t])}]"
                raise InvalidInput(
                    f"{where} is {float(values[bad[0]])}; numbers must be finite", field=where, rule="finite_number"
                )
    arrays: dict[Slot, np.ndarray] = {}
    for t, (gi, ti, traj) in enumerate(slots):
        for column, values in columns.items():
            slot = _column_slot(column, gi, ti)
            field, name = slot[2], slot[3]
            holder = traj.get("logprobs") if field.startswith("logprobs.") else traj
            key = field.removeprefix("logprobs.")
            if field.startswith("logprobs."):
                if holder is None:
                    holder = traj["logprobs"] = {}
                elif not isinstance(holder, dict):
                    continue  # pydantic names it
            present = holder.get(key)
            if (name is None and present is not None) or (name is not None and not _named_slot_free(present, name)):
                where = f"groups[{gi}].trajectories[{ti}].{column}"
                raise InvalidInput(
                    f"{where} is sent both in the header and as a column; send it once",
                    field=where,
                    rule="binary_conflict",
                )
            if name is None:
                holder[key] = []
            else:
                holder.setdefault(key, {})[name] = []
            arrays[slot] = values[offsets[t] : offsets[t + 1]]
    check_json(doc, "", limits.max_text_chars)
    body = _validate(doc)
    _put_arrays(body, arrays)
    return body


def decode(raw: bytes, content_type: str | None, limits: Limits) -> AdvantagesRequest:
    if _is_binary(content_type):
        return decode_binary(raw, limits)
    return decode_json(raw, content_type, limits.max_text_chars)


def _skeleton(answer: AdvantagesResponse) -> tuple[dict[str, Any], list[dict[str, np.ndarray | None]]]:
    """The answer as JSON-ready Python through the response model's serializer, its
    per-token arrays (numpy views, as the service leaves them) held apart."""
    columns = []
    rows = []
    for traj in answer.trajectories:
        columns.append({f: getattr(traj, f) for f in RESPONSE_COLUMNS})
        rows.append(traj.model_copy(update=dict.fromkeys(RESPONSE_COLUMNS)))
    plain = AdvantagesResponse.__pydantic_serializer__.to_python(
        answer.model_copy(update={"trajectories": rows}), mode="json"
    )
    return plain, columns


def encode(answer: AdvantagesResponse, accept: str | None) -> Response:
    plain, columns = _skeleton(answer)
    if accept and MEDIA_TYPE in accept.lower():
        present = [f for f in RESPONSE_COLUMNS if columns and columns[0][f] is not None]
        for row in plain["trajectories"]:
            for f in RESPONSE_COLUMNS:
                del row[f]
        tokens = [len(c["advantages"]) for c in columns]  # type: ignore[arg-type]
        joined = {f: np.concatenate([c[f] for c in columns]).astype(np.float64, copy=False) for f in present}
        return Response(write(plain, "response", tokens, joined), media_type=MEDIA_TYPE)
    for row, cols in zip(plain["trajectories"], columns, strict=True):
        row.update(cols)
    return Response(orjson.dumps(plain, option=orjson.OPT_SERIALIZE_NUMPY), media_type="application/json")
