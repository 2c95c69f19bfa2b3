"""The torch backend: sentence-transformers itself, the reference the ONNX backend is
checked against and the fallback when ONNX cannot be used.

It costs 650 MB to 1 GB of resident memory (ONNX: ~240 MB) and two to three times the
ONNX single-query latency, so it is chosen explicitly (backend "torch") or only when
the ONNX path fails.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

import numpy as np
import torch
from sentence_transformers import SentenceTransformer

from store.embedding.base import empty_matrix, text_list
from store.embedding.local_model import LocalModel


class SentenceEmbedder:
    """Embeds with SentenceTransformer on the CPU, normalised, in batches.

    `threads` sets torch's intra-op thread count, which is process-wide: the last
    torch backend built in a process decides it. Calls are serialised by a lock
    because the Hugging Face fast tokenizer behind sentence-transformers raises
    "Already borrowed" when two threads use it at once; torch already spreads one
    call over the cores, so concurrent calls would not run faster anyway.
    """

    def __init__(self, model: LocalModel, *, threads: int = 1, batch_size: int = 64) -> None:
        if threads < 1 or batch_size < 1:
            raise ValueError("threads and batch_size must be at least 1")
        torch.set_num_threads(threads)
        self._model = SentenceTransformer(str(model.path), device="cpu", local_files_only=True)
        self._model.eval()
        self._batch_size = batch_size
        self._lock = threading.Lock()
        self.name = model.name
        self.dim = int(self._model.get_embedding_dimension())

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        batch = text_list(texts)
        if not batch:
            return empty_matrix(self.dim)
        with self._lock:
            vectors = self._model.encode(
                batch,
                batch_size=self._batch_size,
                normalize_embeddings=True,
                convert_to_numpy=True,
                show_progress_bar=False,
            )
        return np.asarray(vectors, dtype=np.float32)
