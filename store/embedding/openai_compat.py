"""A backend for any OpenAI-compatible /v1/embeddings endpoint (OpenAI, vLLM, Ollama,
llama.cpp, text-embeddings-inference), for deployments that embed on a GPU server
or with a model too large for the API host.

The openai client does the HTTP, timeouts and retries (429, 408, 409, 5xx and
connection errors, honouring Retry-After). This module checks what comes back,
because servers that only claim compatibility do return wrong shapes, and turns
failures into EmbeddingError / EmbeddingUnavailable naming the endpoint.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import openai

from store.embedding.base import (
    EmbeddingError,
    EmbeddingUnavailable,
    empty_matrix,
    normalise_rows,
    text_list,
)


class OpenAICompatEmbedder:
    """Embeds through `POST {base_url}/embeddings`, `batch_size` texts per request.

    `dim` must be given: the index is sized before the first request, and every
    returned vector is checked against it. `name` is the server's model name.
    Vectors are re-normalised here because not every server normalises. Requests ask
    for `encoding_format="float"`, which every compatible server supports (the
    client would otherwise ask for base64, which several do not).
    """

    def __init__(
        self,
        *,
        base_url: str,
        model: str,
        dim: int,
        api_key: str | None = None,
        timeout: float = 30.0,
        max_retries: int = 5,
        batch_size: int = 256,
    ) -> None:
        if dim < 1 or batch_size < 1:
            raise ValueError("dim and batch_size must be at least 1")
        self.name = model
        self.dim = dim
        self._base_url = base_url
        self._batch_size = batch_size
        # Local servers need no key, but the client refuses to start without one.
        self._client = openai.OpenAI(
            base_url=base_url, api_key=api_key or "unused", timeout=timeout, max_retries=max_retries
        )

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        batch = text_list(texts)
        if not batch:
            return empty_matrix(self.dim)
        parts = [
            self._request(batch[start : start + self._batch_size]) for start in range(0, len(batch), self._batch_size)
        ]
        return normalise_rows(np.concatenate(parts))

    def _request(self, texts: list[str]) -> np.ndarray:
        try:
            response = self._client.embeddings.create(model=self.name, input=texts, encoding_format="float")
        except (openai.APIConnectionError, openai.RateLimitError, openai.InternalServerError) as exc:
            raise EmbeddingUnavailable(f"embedding endpoint {self._base_url} unavailable: {exc}") from exc
        except openai.APIStatusError as exc:
            if exc.status_code in (408, 409):
                raise EmbeddingUnavailable(f"embedding endpoint {self._base_url} unavailable: {exc}") from exc
            raise EmbeddingError(f"embedding endpoint {self._base_url} refused the request: {exc}") from exc
        except openai.APIError as exc:
            raise EmbeddingError(f"embedding endpoint {self._base_url} failed: {exc}") from exc
        except ValueError as exc:  # the client lets a JSON body that does not parse through as is
            raise EmbeddingError(f"embedding endpoint {self._base_url} answered with invalid JSON: {exc}") from exc
        return self._vectors(getattr(response, "data", None), len(texts))

    def _vectors(self, data: Any, expected: int) -> np.ndarray:
        """The response's vectors in input order, or an EmbeddingError saying what is
        wrong with it. The client builds response objects without validating them,
        so any field may be missing or of the wrong type here."""
        problem = f"malformed response from {self._base_url} (model {self.name!r})"
        if not isinstance(data, list) or len(data) != expected:
            count = len(data) if isinstance(data, list) else type(data).__name__
            raise EmbeddingError(f"{problem}: expected a `data` list of {expected} embeddings, got {count}")
        vectors = np.empty((expected, self.dim), dtype=np.float32)
        seen: set[int] = set()
        for position, item in enumerate(data):
            index = getattr(item, "index", position)
            embedding = getattr(item, "embedding", None)
            if not isinstance(index, int) or not 0 <= index < expected or index in seen:
                raise EmbeddingError(f"{problem}: item {position} has index {index!r}")
            if not isinstance(embedding, list) or len(embedding) != self.dim:
                got = len(embedding) if isinstance(embedding, list) else type(embedding).__name__
                raise EmbeddingError(f"{problem}: item {position} has an embedding of {got}, not {self.dim} floats")
            try:
                vectors[index] = np.asarray(embedding, dtype=np.float32)
            except (TypeError, ValueError) as exc:
                raise EmbeddingError(f"{problem}: item {position} has non-numeric values") from exc
            if not np.isfinite(vectors[index]).all():
                raise EmbeddingError(f"{problem}: item {position} has non-finite values")
            seen.add(index)
        return vectors
