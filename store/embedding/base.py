"""The contract every embedding backend keeps, and the errors they raise.

Retrieval compares vectors by inner product, so every backend returns float32 rows
of unit length; the index and the ranking code rely on that and never re-normalise.
A vector is only comparable with vectors from the same model, so each embedder
carries a `name` that is stored next to the vectors it made.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import numpy as np


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into unit-length float32 vectors; safe to call from many threads.

    `name` identifies the model and its pooling, not the backend that runs it: the
    ONNX and torch backends of one model report the same name because they give the
    same vectors, so switching backends does not invalidate stored vectors.
    """

    name: str
    dim: int

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """Return an (len(texts), dim) float32 array of L2-normalised rows, in input
        order; an empty input gives shape (0, dim)."""
        ...


class EmbeddingError(RuntimeError):
    """The backend cannot produce vectors for this input or configuration; retrying
    the same call will not help (a malformed response, an unusable model file)."""


class EmbeddingUnavailable(EmbeddingError):
    """The backend could not be reached or was overloaded (connection error, timeout,
    429, 5xx) after the client's own retries; the same call may succeed later."""


def text_list(texts: Sequence[str]) -> list[str]:
    """The texts as a list, refusing a bare string: a `str` is itself a sequence of
    strings, and embedding it character by character is never what a caller meant."""
    if isinstance(texts, str):
        raise TypeError("encode() takes a sequence of texts, not a single str; wrap it in a list")
    return list(texts)


def empty_matrix(dim: int) -> np.ndarray:
    """The (0, dim) result for an empty input, so callers can stack and index it
    like any other result."""
    return np.zeros((0, dim), dtype=np.float32)


def normalise_rows(matrix: np.ndarray) -> np.ndarray:
    """Scale each row to unit L2 length as float32. An all-zero row stays zero (it
    has no direction) rather than becoming NaN, which would poison an index."""
    rows = np.asarray(matrix, dtype=np.float32)
    norms = np.linalg.norm(rows, axis=1, keepdims=True)
    return rows / np.maximum(norms, np.float32(1e-12))
