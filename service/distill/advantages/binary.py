"""The compact binary body of POST /v1/distill/advantages (docs/trainers.md, "The
binary body"): a JSON header and the per-token arrays as raw little-endian columns,
so a trainer's tensors go over the wire as bytes, never as JSON numbers.

    bytes 0-3      b"RXA1"
    bytes 4-7      H, the header's length in bytes (uint32, little-endian)
    bytes 8-8+H    the header: UTF-8 JSON {"tokens": [n, …], "arrays": [{"field", "dtype"}, …], "<body>": {…}}
    then           each array of `arrays`, in that order, back to back: sum(tokens) items of
                   its dtype, little-endian; nothing after the last

`tokens` holds one count per trajectory (request order: groups, then trajectories);
a column holds the concatenation of every trajectory's values of its field, so
trajectory t owns items [sum(tokens[:t]), sum(tokens[:t+1])) of every column. The
request's header names its JSON body "request", the answer's "response".

This module reads and writes the layout only; what a field means, and which fields
and dtypes a request may send, is the caller's (service.distill.advantages.body).
Every malformed body is an InvalidInput naming what is wrong, never a 500.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import orjson

from domain.errors import InvalidInput

MEDIA_TYPE = "application/x-reflexa-advantages"
MAGIC = b"RXA1"
_PREFIX = struct.Struct("<4sI")
DTYPES = {
    "float32": np.dtype("<f4"),
    "float64": np.dtype("<f8"),
    "bool": np.dtype("?"),
    "int8": np.dtype("i1"),
    "uint8": np.dtype("u1"),
    "int16": np.dtype("<i2"),
    "int32": np.dtype("<i4"),
    "int64": np.dtype("<i8"),
}


@dataclass(frozen=True)
class Decoded:
    body: Any  # the header's JSON body, as parsed
    tokens: list[int]  # per trajectory
    columns: dict[str, np.ndarray]  # field -> (sum(tokens),) read-only view of the body's bytes


def _bad(message: str, field: str, rule: str) -> InvalidInput:
    return InvalidInput(message, field=field, rule=rule)


def read(raw: bytes, body_name: str, allowed: Mapping[str, Sequence[str]], max_tokens: int) -> Decoded:
    """The header and the columns of a binary body; `allowed` maps each field a
    column may carry to its accepted dtype names."""
    if len(raw) < _PREFIX.size:
        raise _bad(
            f"the body is {len(raw)} bytes; a binary body starts with {MAGIC!r} and a 4-byte header length",
            "body",
            "binary_truncated",
        )
    magic, size = _PREFIX.unpack_from(raw)
    if magic != MAGIC:
        raise _bad(f"the body starts with {magic!r}, not {MAGIC!r} (format version 1)", "body", "binary_magic")
    end = _PREFIX.size + size
    if end > len(raw):
        raise _bad(
            f"the header is {size} bytes but the body has only {len(raw) - _PREFIX.size} after its first 8",
            "body",
            "binary_truncated",
        )
    try:
        header = orjson.loads(raw[_PREFIX.size : end])
    except orjson.JSONDecodeError as exc:
        raise _bad(f"the header is not JSON in UTF-8: {exc}", "header", "binary_header") from None
    if not isinstance(header, dict) or set(header) != {"tokens", "arrays", body_name}:
        keys = sorted(header) if isinstance(header, dict) else type(header).__name__
        raise _bad(f'the header is {{"tokens", "arrays", "{body_name}"}}; got {keys}', "header", "binary_header")
    tokens = header["tokens"]
    if not isinstance(tokens, list) or not all(type(n) is int and n >= 0 for n in tokens):
        raise _bad("header.tokens is a list of token counts (integers >= 0)", "header.tokens", "binary_header")
    total = sum(tokens)
    if total > max_tokens:
        raise _bad(
            f"header.tokens sums to {total} tokens; at most {max_tokens} per request (split the batch by groups)",
            "header.tokens",
            "max_advantage_tokens",
        )
    arrays = header["arrays"]
    if not isinstance(arrays, list):
        raise _bad('header.arrays is a list of {"field", "dtype"}', "header.arrays", "binary_header")
    layout: list[tuple[str, np.dtype]] = []
    for i, spec in enumerate(arrays):
        where = f"header.arrays[{i}]"
        if not isinstance(spec, dict) or set(spec) != {"field", "dtype"}:
            raise _bad(f'{where} is {{"field", "dtype"}}', where, "binary_header")
        field, dtype = spec["field"], spec["dtype"]
        if field not in allowed:
            raise _bad(
                f"{where}.field is {field!r}; a column is one of {', '.join(sorted(allowed))}",
                f"{where}.field",
                "binary_field",
            )
        if any(field == seen for seen, _ in layout):
            raise _bad(f"{where}.field {field!r} appears twice", f"{where}.field", "unique")
        if dtype not in allowed[field]:
            raise _bad(
                f"{where}.dtype is {dtype!r}; {field} is one of {', '.join(allowed[field])}",
                f"{where}.dtype",
                "binary_dtype",
            )
        layout.append((field, DTYPES[dtype]))
    expected = sum(total * dtype.itemsize for _, dtype in layout)
    if len(raw) - end != expected:
        shape = ", ".join(f"{field} {total} × {dtype.itemsize}" for field, dtype in layout) or "no arrays"
        raise _bad(
            f"the arrays are {len(raw) - end} bytes; header.tokens and header.arrays say {expected} ({shape})",
            "body",
            "binary_truncated" if len(raw) - end < expected else "binary_trailing",
        )
    columns: dict[str, np.ndarray] = {}
    offset = end
    for field, dtype in layout:
        columns[field] = np.frombuffer(raw, dtype=dtype, count=total, offset=offset)
        offset += total * dtype.itemsize
    return Decoded(body=header[body_name], tokens=tokens, columns=columns)


def write(body: Any, body_name: str, tokens: Sequence[int], columns: Mapping[str, np.ndarray]) -> bytes:
    """A binary body: `columns` (field -> (sum(tokens),) array of a DTYPES dtype) after the header."""
    names = {dtype: name for name, dtype in DTYPES.items()}
    parts = [np.ascontiguousarray(col, dtype=col.dtype.newbyteorder("<")) for col in columns.values()]
    header = orjson.dumps(
        {
            "tokens": list(tokens),
            "arrays": [{"field": f, "dtype": names[c.dtype]} for f, c in zip(columns, parts, strict=True)],
            body_name: body,
        },
        option=orjson.OPT_SERIALIZE_NUMPY,
    )
    return b"".join([_PREFIX.pack(MAGIC, len(header)), header, *(p.data for p in parts)])
