"""The binary body of POST /v1/distill/advantages (docs/trainers.md, "The binary
body"), for trainers that hold their per-token values as numpy arrays or torch
tensors: the per-token arrays go as raw little-endian columns after a JSON header,
and the answer's per-token values come back the same way, as float64 numpy arrays.
Needs numpy (the rest of the client does not).

    b"RXA1" · uint32 LE header length · header JSON {"tokens", "arrays", "request"|"response"} · the columns

A column holds one field's values of every trajectory, concatenated in request order
(groups, then trajectories); ``tokens`` gives each trajectory's count. Only fields
every trajectory sends become columns; anything else stays in the header as JSON.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from reflexa.models import BatchDiagnostics, Diagnostics

MEDIA_TYPE = "application/x-reflexa-advantages"
MAGIC = b"RXA1"
_PREFIX = struct.Struct("<4sI")
_FLOATS = {np.dtype("<f4"): "float32", np.dtype("<f8"): "float64"}
_INTS = {
    np.dtype("?"): "bool",
    np.dtype("i1"): "int8",
    np.dtype("u1"): "uint8",
    np.dtype("<i2"): "int16",
    np.dtype("<i4"): "int32",
    np.dtype("<i8"): "int64",
}
TRAJECTORY_FIELDS = ("mask", "token_steps", "teacher_entropy", "advantages")
INT_FIELDS = ("mask", "token_steps")
SINGLE_LOGPROBS = ("student", "rollout", "ref")
RESPONSE_COLUMNS = ("advantages", "token_rewards", "is_weights", "kl")


def _array(value: Any) -> np.ndarray | None:
    """A 1-d numpy view of a per-token value (a list, an array, a CPU torch tensor), or None."""
    if value is None or isinstance(value, int | float | str | Mapping):
        return None
    if hasattr(value, "detach"):  # torch: no copy for a CPU tensor
        value = value.detach().cpu().numpy()
    arr = np.asarray(value)
    return arr if arr.ndim == 1 else None


def _series(traj: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """A trajectory's per-token values by column name (logprobs.teacher.NAME for a named one)."""
    out = {}
    for field in TRAJECTORY_FIELDS:
        arr = _array(traj.get(field))
        if arr is not None:
            out[field] = arr
    for kind, value in (traj.get("logprobs") or {}).items():
        if isinstance(value, Mapping) and kind not in SINGLE_LOGPROBS:
            for name, series in value.items():
                arr = _array(series)
                if arr is not None:
                    out[f"{kind}.{name}"] = arr
        else:
            arr = _array(value)
            if arr is not None:
                out[kind] = arr
    return {(k if k in TRAJECTORY_FIELDS else f"logprobs.{k}"): v for k, v in out.items()}


def _column_dtype(field: str, parts: list[np.ndarray]) -> np.dtype:
    """The column's dtype: the arrays' own where the format takes it (float32 stays
    float32: exact, half the bytes), else float64 / int64 (a list's values, exactly)."""
    kinds = {p.dtype for p in parts}
    table = _INTS if field in INT_FIELDS else _FLOATS
    if len(kinds) == 1 and next(iter(kinds)).newbyteorder("<") in table:
        return next(iter(kinds)).newbyteorder("<")
    return np.dtype("<i8") if field in INT_FIELDS else np.dtype("<f8")


def _narrow(field: str, values: np.ndarray) -> np.ndarray:
    """An integer column in fewer bytes when its values allow (a 0/1 mask as uint8,
    steps as int32): the same numbers, a quarter to an eighth of the bytes. A value out
    of range keeps the wide type, so the server still sees it and names it."""
    if values.dtype.kind not in "iu" or values.itemsize == 1 or not len(values):
        return values
    low, high = int(values.min()), int(values.max())
    if field == "mask" and low >= 0 and high <= 1:
        return values.astype(np.uint8)
    if low >= -(2**31) and high < 2**31 and values.itemsize > 4:
        return values.astype("<i4")
    return values


def _without(traj: Mapping[str, Any], columns: Sequence[str]) -> dict[str, Any]:
    """The trajectory as JSON for the header: its column fields left out, lists as lists."""
    out = {k: v for k, v in traj.items() if k not in columns}
    logprobs = dict(traj.get("logprobs") or {})
    for column in columns:
        parts = column.split(".")
        if parts[0] == "logprobs":
            if len(parts) == 3:
                named = dict(logprobs[parts[1]])
                del named[parts[2]]
                logprobs[parts[1]] = named
                if not named:
                    del logprobs[parts[1]]
            else:
                del logprobs[parts[1]]
    if "logprobs" in traj:
        if logprobs:
            out["logprobs"] = logprobs
        else:
            del out["logprobs"]
    return _plain(out)


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if hasattr(value, "tolist"):  # a numpy array or scalar, a tensor left in the header
        return value.tolist()
    return value


def encode_request(method: str, groups: Sequence[Mapping[str, Any]], params: Mapping[str, Any] | None = None) -> bytes:
    """The binary body for these groups (dicts as for ``Client.distill_advantages``,
    per-token values as arrays, tensors or lists)."""
    import json

    trajectories = [t for g in groups for t in g["trajectories"]]
    series = [_series(t) for t in trajectories]
    shared = [c for c in series[0] if all(c in s for s in series)] if series else []
    tokens = [len(s[shared[0]]) if shared else 0 for s in series]
    for t, s in enumerate(series):
        for column in shared:
            if len(s[column]) != tokens[t]:
                shared.remove(column)  # lengths disagree: leave it in the header; the server names it
                break
    columns = {}
    for column in shared:
        parts = [s[column] for s in series]
        dtype = _column_dtype(column, parts)
        joined = np.concatenate([p.astype(dtype, copy=False) for p in parts]) if parts else np.zeros(0, dtype)
        columns[column] = _narrow(column, joined)
    request = {
        "method": method,
        "params": _plain(dict(params)) if params is not None else None,
        "groups": [
            {
                **{k: v for k, v in g.items() if k != "trajectories"},
                "trajectories": [_without(t, shared) for t in g["trajectories"]],
            }
            for g in groups
        ],
    }
    header = json.dumps(
        {
            "tokens": tokens,
            "arrays": [{"field": f, "dtype": {**_FLOATS, **_INTS}[c.dtype]} for f, c in columns.items()],
            "request": request,
        },
        separators=(",", ":"),
        allow_nan=False,
    ).encode()
    return b"".join([_PREFIX.pack(MAGIC, len(header)), header, *(c.data for c in columns.values())])


@dataclass(frozen=True)
class ArrayAdvantages:
    """The binary answer: ``response`` is the JSON answer without its per-token fields
    (``advantages``, ``token_rewards``, ``is_weights``, ``kl`` are absent from each
    trajectory); ``columns`` holds them, float64, every trajectory's concatenated in
    request order, ``offsets[t]:offsets[t + 1]`` trajectory t's."""

    response: dict[str, Any]
    columns: dict[str, np.ndarray]
    offsets: np.ndarray

    @property
    def advantages(self) -> np.ndarray:
        return self.columns["advantages"]

    @property
    def diagnostics(self) -> Diagnostics:
        """The answer's diagnostics, as the JSON call's model."""
        return Diagnostics.model_validate(self.response["diagnostics"])

    @property
    def requests(self) -> list[BatchDiagnostics]:
        """As ``BatchedAdvantagesResponse.requests``: one request's batch diagnostics."""
        return [self.diagnostics.batch]

    def trajectory(self, t: int) -> dict[str, Any]:
        """Trajectory t of the answer as in the JSON answer, its per-token fields as arrays (None when absent)."""
        lo, hi = int(self.offsets[t]), int(self.offsets[t + 1])
        cols = {f: (self.columns[f][lo:hi] if f in self.columns else None) for f in RESPONSE_COLUMNS}
        return {**self.response["trajectories"][t], **cols}


def decode_response(raw: bytes) -> ArrayAdvantages:
    """The binary answer's header and float64 columns (views of ``raw``, no copy)."""
    import json

    if len(raw) < _PREFIX.size:
        raise ValueError(f"a binary answer of {len(raw)} bytes")
    magic, size = _PREFIX.unpack_from(raw)
    if magic != MAGIC:
        raise ValueError(f"a binary answer starting with {magic!r}, not {MAGIC!r}")
    header = json.loads(raw[_PREFIX.size : _PREFIX.size + size])
    tokens = header["tokens"]
    total = sum(tokens)
    columns = {}
    offset = _PREFIX.size + size
    for spec in header["arrays"]:
        dtype = np.dtype({"float64": "<f8", "float32": "<f4"}[spec["dtype"]])
        columns[spec["field"]] = np.frombuffer(raw, dtype=dtype, count=total, offset=offset)
        offset += total * dtype.itemsize
    if offset != len(raw):
        raise ValueError(f"a binary answer of {len(raw)} bytes; its header says {offset}")
    offsets = np.zeros(len(tokens) + 1, dtype=np.int64)
    np.cumsum(tokens, out=offsets[1:])
    return ArrayAdvantages(response=header["response"], columns=columns, offsets=offsets)
