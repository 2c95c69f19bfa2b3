"""Streaming writers: rows in, bytes out, as they come, in bounded memory.

JSON lines: one orjson line per row, handed on in chunks of about CHUNK_BYTES.
Parquet: a `pyarrow.parquet.ParquetWriter` over an in-memory sink that is drained
after every row group, so what is held is one row group, never the file.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.parquet as pq

CHUNK_BYTES = 64 * 1024


def json_text(value: Any) -> str:
    """A JSON value as compact text with sorted keys (PostgreSQL's JSONB reorders
    keys, SQLite keeps them as sent: sorted, both engines write the same text)."""
    try:
        return orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()
    except orjson.JSONEncodeError:  # e.g. an integer beyond 64 bits, which JSON allows
        return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def _json_line(row: Mapping[str, Any]) -> bytes:
    try:
        return orjson.dumps(row, option=orjson.OPT_APPEND_NEWLINE | orjson.OPT_UTC_Z)
    except orjson.JSONEncodeError:
        return (json.dumps(row, ensure_ascii=False, separators=(",", ":"), default=_iso) + "\n").encode()


def _iso(value: Any) -> str:
    text = value.isoformat()
    return text[:-6] + "Z" if text.endswith("+00:00") else text


def jsonl_chunks(rows: Iterable[Mapping[str, Any]]) -> Iterator[bytes]:
    buffer = bytearray()
    for row in rows:
        buffer += _json_line(row)
        if len(buffer) >= CHUNK_BYTES:
            yield bytes(buffer)
            buffer.clear()
    if buffer:
        yield bytes(buffer)


# -- parquet ------------------------------------------------------------------------

Encode = Callable[[Any], Any]


def _encoder(t: pa.DataType) -> Encode | None:
    """How a Python value of Arrow type `t` becomes its storage value: JSON-typed
    values become JSON text, at any depth; None where nothing needs changing."""
    if isinstance(t, pa.JsonType):
        return lambda v: None if v is None else json_text(v)
    if pa.types.is_list(t):
        item = _encoder(t.value_type)
        if item is None:
            return None
        return lambda v: None if v is None else [item(x) for x in v]
    if pa.types.is_struct(t):
        fields = [(f.name, _encoder(f.type)) for f in t]
        if all(e is None for _, e in fields):
            return None
        return lambda v: None if v is None else {name: (e(v.get(name)) if e else v.get(name)) for name, e in fields}
    return None


def _storage_type(t: pa.DataType) -> pa.DataType:
    if isinstance(t, pa.JsonType):
        return t.storage_type
    if pa.types.is_list(t):
        return pa.list_(_storage_type(t.value_type))
    if pa.types.is_struct(t):
        return pa.struct([pa.field(f.name, _storage_type(f.type), f.nullable) for f in t])
    return t


class _DrainedSink:
    """A write-only file object that keeps what was written until `drain()`."""

    def __init__(self) -> None:
        self._chunks: list[bytes] = []
        self._position = 0
        self.closed = False

    def write(self, data: Any) -> int:
        chunk = bytes(data)
        self._chunks.append(chunk)
        self._position += len(chunk)
        return len(chunk)

    def tell(self) -> int:
        return self._position

    def flush(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True

    def drain(self) -> bytes:
        out = b"".join(self._chunks)
        self._chunks.clear()
        return out


class RowGroupEncoder:
    """Rows (dicts with the schema's keys) to an Arrow table of `schema`."""

    def __init__(self, schema: pa.Schema) -> None:
        self.schema = schema
        self._storage = pa.schema([pa.field(f.name, _storage_type(f.type), f.nullable) for f in schema])
        self._encoders = [(f.name, _encoder(f.type)) for f in schema]

    def table(self, rows: list[Mapping[str, Any]]) -> pa.Table:
        columns = {
            name: [encode(row.get(name)) for row in rows] if encode else [row.get(name) for row in rows]
            for name, encode in self._encoders
        }
        return pa.Table.from_pydict(columns, schema=self._storage).cast(self.schema)


def parquet_chunks(rows: Iterable[Mapping[str, Any]], schema: pa.Schema, *, row_group_rows: int) -> Iterator[bytes]:
    """A parquet file of `schema`, one row group per `row_group_rows` rows, handed on
    as each row group is written (an export of no rows is a valid, empty file)."""
    encoder = RowGroupEncoder(schema)
    sink = _DrainedSink()
    writer = pq.ParquetWriter(sink, schema, compression="zstd")
    try:
        batch: list[Mapping[str, Any]] = []
        for row in rows:
            batch.append(row)
            if len(batch) >= row_group_rows:
                writer.write_table(encoder.table(batch))
                batch = []
                yield sink.drain()
        if batch:
            writer.write_table(encoder.table(batch))
    finally:
        writer.close()
    yield sink.drain()
