"""The on-disk container of a VectorIndex: one file, written atomically, verified
before anything in it is trusted.

    MAGIC | u64 header length | header (JSON) | arrays (raw, C order) | faiss index | sha256

The header holds the caller's metadata (config, backend kind) and the name, dtype
and shape of each array; the faiss index, if any, runs from the end of the arrays
to the checksum and is streamed through faiss' own serialiser (no second in-memory
copy of a multi-GB index). The trailing sha256 covers every byte before it, so a
truncated, partially written or bit-flipped file is rejected before faiss parses
it: faiss reading garbage can allocate absurd sizes or return a silently wrong
index. Writing goes to a temporary file in the same directory, fsync, then rename:
a crash leaves either the old file or the new one, never a mix.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
import uuid
from pathlib import Path
from typing import Any, BinaryIO

import faiss
import numpy as np

MAGIC = b"RFXVEC\x00\x01"
_LENGTH = struct.Struct("<Q")
_DIGEST = 32
_CHUNK = 16 << 20
_DTYPES = {"<i8", "<f4"}


class CorruptIndexError(ValueError):
    """The file is not a complete, intact vector index written by this module."""


def write(path: Path, meta: dict[str, Any], arrays: dict[str, np.ndarray], index: faiss.Index | None) -> None:
    """Atomically replace `path` with a container holding meta, arrays and index."""
    path = Path(path)
    for name, array in arrays.items():
        if array.dtype.str not in _DTYPES:
            raise TypeError(f"array {name!r} has unsupported dtype {array.dtype.str}")
    header = json.dumps(
        {
            "meta": meta,
            "arrays": [{"name": n, "dtype": a.dtype.str, "shape": list(a.shape)} for n, a in arrays.items()],
            "faiss": index is not None,
        }
    ).encode()
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    try:
        with open(tmp, "wb") as f:
            digest = hashlib.sha256()

            def put(data: bytes | memoryview) -> None:
                f.write(data)
                digest.update(data)

            put(MAGIC)
            put(_LENGTH.pack(len(header)))
            put(header)
            for array in arrays.values():
                put(_bytes_of(array))
            if index is not None:
                faiss.write_index(index, faiss.PyCallbackIOWriter(put))
            f.write(digest.digest())
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)


def read(path: Path) -> tuple[dict[str, Any], dict[str, np.ndarray], faiss.Index | None]:
    """(meta, arrays, index) of a container; CorruptIndexError if it is not intact."""
    path = Path(path)
    size = path.stat().st_size
    minimum = len(MAGIC) + _LENGTH.size + _DIGEST
    if size < minimum:
        raise CorruptIndexError(f"{path}: {size} bytes, too short to be a vector index")
    with open(path, "rb") as f:
        if f.read(len(MAGIC)) != MAGIC:
            raise CorruptIndexError(f"{path}: not a vector index file (bad magic)")
        _verify_checksum(f, path, size)
        f.seek(len(MAGIC))
        (header_len,) = _LENGTH.unpack(f.read(_LENGTH.size))
        if header_len > size - minimum:
            raise CorruptIndexError(f"{path}: header length {header_len} exceeds the file")
        try:
            header = json.loads(f.read(header_len))
            arrays = {spec["name"]: _read_array(f, spec) for spec in header["arrays"]}
            meta = header["meta"]
            has_index = header["faiss"]
        except (ValueError, KeyError, TypeError) as exc:
            raise CorruptIndexError(f"{path}: malformed header: {exc}") from exc
        end = size - _DIGEST
        index = _read_index(f, end, path) if has_index else None
        if f.tell() != end:
            raise CorruptIndexError(f"{path}: {end - f.tell()} unexpected bytes before the checksum")
    return meta, arrays, index


def _verify_checksum(f: BinaryIO, path: Path, size: int) -> None:
    digest = hashlib.sha256(MAGIC)
    remaining = size - len(MAGIC) - _DIGEST
    while remaining:
        chunk = f.read(min(_CHUNK, remaining))
        if not chunk:
            raise CorruptIndexError(f"{path}: file shrank while being read")
        digest.update(chunk)
        remaining -= len(chunk)
    if f.read(_DIGEST) != digest.digest():
        raise CorruptIndexError(f"{path}: checksum mismatch (truncated or corrupted)")


def _read_array(f: BinaryIO, spec: dict[str, Any]) -> np.ndarray:
    if spec["dtype"] not in _DTYPES:
        raise ValueError(f"unsupported dtype {spec['dtype']!r}")
    array = np.empty([int(n) for n in spec["shape"]], dtype=np.dtype(spec["dtype"]))
    if f.readinto(_bytes_of(array)) != array.nbytes:
        raise ValueError(f"array {spec['name']!r} is cut short")
    return array


def _bytes_of(array: np.ndarray) -> memoryview:
    """A flat byte view of an array (also of an empty one, which memoryview.cast
    refuses)."""
    return memoryview(np.ascontiguousarray(array).reshape(-1).view(np.uint8))


def _read_index(f: BinaryIO, end: int, path: Path) -> faiss.Index:
    def read_upto(n: int) -> bytes:
        """Never past the checksum: faiss must not mistake it for index data."""
        return f.read(max(0, min(n, end - f.tell())))

    try:
        return faiss.read_index(faiss.PyCallbackIOReader(read_upto))
    except RuntimeError as exc:
        raise CorruptIndexError(f"{path}: faiss could not read the index: {exc}") from exc


def _fsync_dir(directory: Path) -> None:
    """Make the rename itself durable (POSIX: the directory entry is data too)."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
