"""A model-free embedder for unit tests and for trying the service without a model.

Signed feature hashing of lowercase word unigrams and bigrams: deterministic across
processes and machines (blake2b, not Python's salted hash()), instant to build, and
texts that share words get a positive cosine, which is enough for retrieval tests
to rank sensibly. It knows nothing of meaning: synonyms are unrelated.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence

import numpy as np

from store.embedding.base import empty_matrix, normalise_rows, text_list

_WORD = re.compile(r"\w+")
# Stands in for a text without words, so that it still gets a unit vector.
_NO_WORDS = "\0no-words"


class HashingEmbedder:
    """Feature-hashing embedder of `dim` dimensions (name "hashing-<dim>")."""

    def __init__(self, dim: int = 256) -> None:
        if dim < 2:
            raise ValueError("dim must be at least 2")
        self.dim = dim
        self.name = f"hashing-{dim}"

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        batch = text_list(texts)
        if not batch:
            return empty_matrix(self.dim)
        vectors = np.zeros((len(batch), self.dim), dtype=np.float32)
        for row, text in enumerate(batch):
            for feature in _features(text):
                code = int.from_bytes(hashlib.blake2b(feature.encode("utf-8"), digest_size=8).digest(), "little")
                vectors[row, code % self.dim] += 1.0 if code >> 63 else -1.0
        return normalise_rows(vectors)


def _features(text: str) -> list[str]:
    words = _WORD.findall(text.lower())
    bigrams = [f"{first} {second}" for first, second in zip(words, words[1:], strict=False)]
    return words + bigrams or [_NO_WORDS]
