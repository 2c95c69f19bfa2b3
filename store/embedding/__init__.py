"""Text embedding behind one small interface (`Embedder`), with the backends Reflexa
ships and the one function that picks among them.

Backends: "onnx" (the default: sentence-transformers' vectors from onnxruntime, no
torch in the serving process), "torch" (sentence-transformers itself), "openai" (any
OpenAI-compatible endpoint) and "hashing" (model-free, for tests). Backend modules
are imported only when chosen, so choosing ONNX never imports torch and choosing
hashing imports no ML library at all.

Building an embedder loads a model: do it once per process (at start-up) and hold
the instance; every embedder is safe to share between threads.
"""

from __future__ import annotations

import logging
from pathlib import Path

from store.embedding.base import Embedder, EmbeddingError, EmbeddingUnavailable
from store.embedding.cache import CachedEmbedder
from store.embedding.hashing import HashingEmbedder
from store.embedding.local_model import DEFAULT_MODEL_NAME, LocalModel, default_model_path, describe_model

__all__ = [
    "BACKENDS",
    "DEFAULT_MODEL_NAME",
    "CachedEmbedder",
    "Embedder",
    "EmbeddingError",
    "EmbeddingUnavailable",
    "HashingEmbedder",
    "LocalModel",
    "build_embedder",
    "default_model_path",
    "describe_model",
]

log = logging.getLogger(__name__)

BACKENDS = ("onnx", "torch", "openai", "hashing")


def build_embedder(
    backend: str = "onnx",
    *,
    model_path: str | Path | None = None,
    cache_dir: Path,
    threads: int = 1,
    idle_threads: int = 0,
    batch_size: int = 64,
    cache_size: int = 100_000,
    openai_base_url: str | None = None,
    openai_api_key: str | None = None,
    openai_model: str | None = None,
    openai_dim: int | None = None,
    openai_timeout: float = 30.0,
    openai_max_retries: int = 5,
) -> Embedder:
    """Build the embedder named by `backend`, wrapped in a CachedEmbedder of
    `cache_size` entries unless `cache_size` is 0.

    `model_path` (None: the packaged all-MiniLM-L6-v2) is used by "onnx" and
    "torch"; `cache_dir` holds the ONNX export (made on first use, shared by all
    processes). If the ONNX backend cannot be built (onnxruntime missing, an export
    failure, a model pipeline it does not reproduce) the torch backend is used, with
    a warning: the vectors are the same, only slower. `threads` is the intra-op
    thread count of onnxruntime or torch; `idle_threads` (ONNX only) the count for
    an encode that finds the machine idle (store/embedding/onnx.py; 0: off). The `openai_*` arguments configure the
    "openai" backend; base URL, model and dim are required for it.
    """
    if backend not in BACKENDS:
        raise ValueError(f"unknown embedding backend {backend!r}; choose one of {', '.join(BACKENDS)}")
    if cache_size < 0:
        raise ValueError("cache_size must be 0 (no cache) or more")
    if idle_threads < 0:
        raise ValueError("idle_threads must be 0 (off) or more")
    embedder: Embedder
    if backend == "hashing":
        embedder = HashingEmbedder()
    elif backend == "openai":
        embedder = _build_openai(
            openai_base_url, openai_api_key, openai_model, openai_dim, openai_timeout, openai_max_retries
        )
    elif backend == "torch":
        embedder = _build_torch(describe_model(model_path), threads, batch_size)
    else:
        model = describe_model(model_path)
        try:
            embedder = _build_onnx(model, cache_dir, threads, idle_threads, batch_size)
        except Exception as exc:  # any failure of the optional fast path falls back to the reference one
            log.warning("ONNX embedding backend unavailable (%s); falling back to torch, which is slower", exc)
            embedder = _build_torch(model, threads, batch_size)
    return CachedEmbedder(embedder, cache_size) if cache_size else embedder


def _build_onnx(model: LocalModel, cache_dir: Path, threads: int, idle_threads: int, batch_size: int) -> Embedder:
    """Export once (or reuse the export), then load it; an export on disk that does
    not load (truncated, corrupted) is exported again rather than trusted."""
    from store.embedding.onnx import OnnxEmbedder, check_reproducible
    from store.embedding.onnx_export import export_onnx

    check_reproducible(model)  # before spending seconds on an export that cannot be used
    onnx_file = export_onnx(model, cache_dir)
    try:
        return OnnxEmbedder(model, onnx_file, threads=threads, idle_threads=idle_threads, batch_size=batch_size)
    except EmbeddingError as exc:
        log.warning("%s; exporting it again", exc)
        onnx_file = export_onnx(model, cache_dir, unusable=onnx_file.stat())
        return OnnxEmbedder(model, onnx_file, threads=threads, idle_threads=idle_threads, batch_size=batch_size)


def _build_torch(model: LocalModel, threads: int, batch_size: int) -> Embedder:
    from store.embedding.sentence import SentenceEmbedder

    return SentenceEmbedder(model, threads=threads, batch_size=batch_size)


def _build_openai(
    base_url: str | None,
    api_key: str | None,
    model: str | None,
    dim: int | None,
    timeout: float,
    max_retries: int,
) -> Embedder:
    from store.embedding.openai_compat import OpenAICompatEmbedder

    if base_url is None or model is None or dim is None:
        given = {"openai_base_url": base_url, "openai_model": model, "openai_dim": dim}
        raise ValueError(f"the openai embedding backend needs {', '.join(k for k, v in given.items() if v is None)}")
    return OpenAICompatEmbedder(
        base_url=base_url, api_key=api_key, model=model, dim=dim, timeout=timeout, max_retries=max_retries
    )
