"""The ONNX Runtime backend, the default for serving.

It gives the same vectors as sentence-transformers (min cosine 1.000000 on agent-state
texts) at a third to a half of torch's single-query latency (on the 2-core machine:
~4 ms against ~12 ms for a four-word state, ~9 ms against ~18 ms for a 30-token one),
in a process that never imports torch (~240 MB resident against ~650 MB to 1 GB).
Tokenisation uses the model's own fast tokenizer with its truncation length; pooling
is the model's mean over real tokens, done in numpy.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import onnxruntime
from tokenizers import Encoding, Tokenizer

from store.embedding.base import EmbeddingError, empty_matrix, normalise_rows, text_list
from store.embedding.local_model import LocalModel

# The pipelines this backend reproduces exactly; anything else (a Dense layer, CLS
# pooling) is refused so that build_embedder falls back to the torch backend.
_SUPPORTED_MODULES = {("Transformer", "Pooling"), ("Transformer", "Pooling", "Normalize")}
# Padded tokens per session run: bounds the memory a batch takes (see _batches).
_MAX_BATCH_TOKENS = 512
# The idle session's pool must not spin after a run: left spinning, it burns ~30 ms
# of a core after every encode, which also makes the next check see a busy machine.
_NO_SPIN = {"session.intra_op.allow_spinning": "0"}


def runnable_tasks() -> int | None:
    """Tasks runnable on the machine right now, the caller included (the fourth
    field of /proc/loadavg); None where there is no /proc/loadavg."""
    try:
        with open("/proc/loadavg", "rb") as handle:
            return int(handle.read().split()[3].split(b"/")[0])
    except (OSError, ValueError, IndexError):
        return None


def usable_cores() -> int:
    """The cores this process may run on (its affinity mask where the OS has one)."""
    affinity = getattr(os, "sched_getaffinity", None)
    return len(affinity(0)) if affinity is not None else (os.cpu_count() or 1)


def check_reproducible(model: LocalModel) -> None:
    """Raise EmbeddingError unless this backend gives the same vectors as
    sentence-transformers would for `model`."""
    if model.modules not in _SUPPORTED_MODULES or model.pooling != "mean":
        raise EmbeddingError(
            f"the ONNX backend reproduces Transformer + mean Pooling (+ Normalize) only; "
            f"{model.path} has modules {model.modules} with {model.pooling!r} pooling"
        )


def mean_pooled(session: onnxruntime.InferenceSession, encodings: list[Encoding], input_names: set[str]) -> np.ndarray:
    """Run one padded batch and mean-pool over the real tokens. Padding uses id 0
    whatever the vocabulary: masked positions influence neither attention nor
    the mean, so their ids do not matter."""
    width = max(len(encoding.ids) for encoding in encodings)
    shape = (len(encodings), width)
    input_ids = np.zeros(shape, dtype=np.int64)
    attention_mask = np.zeros(shape, dtype=np.int64)
    token_type_ids = np.zeros(shape, dtype=np.int64)
    for row, encoding in enumerate(encodings):
        length = len(encoding.ids)
        input_ids[row, :length] = encoding.ids
        attention_mask[row, :length] = encoding.attention_mask
        token_type_ids[row, :length] = encoding.type_ids
    feeds = {
        "input_ids": input_ids,
        "attention_mask": attention_mask,
        "token_type_ids": token_type_ids,
    }
    (hidden,) = session.run(None, {k: v for k, v in feeds.items() if k in input_names})
    mask = attention_mask.astype(np.float32)
    summed = np.einsum("bsd,bs->bd", hidden, mask)
    return normalise_rows(summed / np.maximum(mask.sum(axis=1, keepdims=True), 1.0))


class OnnxEmbedder:
    """Embeds with an exported transformer in an onnxruntime InferenceSession.

    `threads` is the session's intra-op thread count. The default of one is
    deliberate: on a shared 2-core machine one thread per query beat two (two
    degraded to ~100 ms p50 when the cores were busy, and spend 1.2-1.6x the CPU
    time per text); scale with processes or concurrent requests instead.

    `idle_threads` (more than `threads`) adds a second session with that many
    threads, its pool not spinning, for an encode that finds the machine idle
    enough: no other encode of this embedder running, and no more runnable tasks
    than usable cores, the caller included (/proc/loadavg). One other task is
    allowed on purpose: a retrieve's own lexical search runs beside its encode,
    and a non-spinning pool beside one busy core was measured even with one
    thread (docs/benchmarks.md, "Query encoding"). Against mem0 on a quiet 2-core
    machine it moved Reflexa from behind to level on dense-only search
    (docs/benchmarks.md, "Retrieval on a quiet machine"). Both sessions give the
    same vectors to the bit. The second session
    costs ~110 MB resident; without /proc/loadavg it is never built. Texts are
    grouped by token count before batching so each batch pads little. Safe to call
    from many threads: InferenceSession.run and the tokenizer's encode are both
    thread-safe once configured.

    One query's encode is within ~3 % of `session.run` alone on the same tokens, and
    ~80 % of that run is MatMuls (bench/embedding/query_encoding.py, docs/benchmarks.md "Query
    encoding"). Measured there and left out: onnxruntime.transformers' BERT fusions
    (same top 10, but ~10 % slower on agent states: its fp32 SkipLayerNormalization
    and Attention CPU kernels lose to the unfused ops), a model saved pre-optimised
    (onnxruntime's default level already fuses what it can here; it saves ~40 ms of
    start-up only), two threads chosen by load, and coalescing concurrent queries
    (a batch of agent states costs what its texts cost one by one).
    """

    def __init__(
        self, model: LocalModel, onnx_file: Path, *, threads: int = 1, idle_threads: int = 0, batch_size: int = 64
    ) -> None:
        check_reproducible(model)
        if threads < 1 or batch_size < 1:
            raise ValueError("threads and batch_size must be at least 1")
        if idle_threads < 0:
            raise ValueError("idle_threads must be 0 (off) or more")
        self.name = model.name
        self.dim = model.token_dim
        self._batch_size = batch_size
        self._tokenizer = Tokenizer.from_file(str(model.path / "tokenizer.json"))
        # MiniLM's tokenizer.json says: truncate at 128, pad every text to 128.
        # sentence-transformers ignores both for max_seq_length (256) and per-batch
        # padding, so must we: padding happens per batch below, to its longest text.
        self._tokenizer.no_padding()
        self._tokenizer.enable_truncation(model.max_seq_length)
        self._cores = usable_cores()
        # Taken only with cores to spare: never more threads than usable cores.
        self.idle_threads = min(idle_threads, self._cores)
        if self.idle_threads <= threads or runnable_tasks() is None:
            self.idle_threads = 0
        self._running = 0  # encodes of this embedder in flight
        self._running_lock = threading.Lock()
        self.idle_encodes = 0  # session runs on the idle session (a counter for metrics and tests)
        try:
            self._session = _session(onnx_file, threads)
            self._idle_session = _session(onnx_file, self.idle_threads, _NO_SPIN) if self.idle_threads else None
            self._input_names = {node.name for node in self._session.get_inputs()}
            probe = self._embed(self._tokenizer.encode_batch(["probe"]), self._session)
        except Exception as exc:  # onnxruntime's errors derive from Exception only
            raise EmbeddingError(f"ONNX model {onnx_file} is unusable: {exc}") from exc
        if probe.shape != (1, self.dim):
            raise EmbeddingError(f"ONNX model {onnx_file} gives vectors of shape {probe.shape[1:]}, not ({self.dim},)")

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        batch = text_list(texts)
        if not batch:
            return empty_matrix(self.dim)
        encodings = self._tokenizer.encode_batch(batch)
        vectors = np.empty((len(encodings), self.dim), dtype=np.float32)
        with self._running_lock:
            self._running += 1
        try:
            for rows in self._batches([len(encoding.ids) for encoding in encodings]):
                vectors[rows] = self._embed([encodings[i] for i in rows], self._pick())
        finally:
            with self._running_lock:
                self._running -= 1
        return vectors

    def _pick(self) -> onnxruntime.InferenceSession:
        """The session for the next run, chosen run by run: a long batch started on
        an idle machine goes back to one thread when a retrieve arrives."""
        if self._idle_session is None:
            return self._session
        with self._running_lock:
            if self._running == 1 and (runnable_tasks() or 0) <= self._cores:
                self.idle_encodes += 1
                return self._idle_session
        return self._session

    def _batches(self, lengths: list[int]) -> Iterator[list[int]]:
        """Row indices grouped longest first. A group ends at `batch_size` texts, at
        `_MAX_BATCH_TOKENS` padded tokens, or before a text under half the group's
        longest. Padding costs as much compute as real tokens (50 texts padded to a
        256-token outlier took 4.6 s instead of 0.6 s). Big runs buy nothing on a
        CPU: encoding agent states took the same or less CPU time at 512 tokens per
        run than at 4096 or 16384, while onnxruntime's memory arena keeps the peak of
        the biggest run for the life of the process (64 texts of up to 256 tokens per
        run: 820 MB resident; 512 tokens: 267 MB; the loaded model alone: 236 MB)."""
        batch: list[int] = []
        for row in sorted(range(len(lengths)), key=lengths.__getitem__, reverse=True):
            longest = lengths[batch[0]] if batch else 0
            if batch and (
                len(batch) == self._batch_size
                or (len(batch) + 1) * longest > _MAX_BATCH_TOKENS
                or 2 * lengths[row] < longest
            ):
                yield batch
                batch = []
            batch.append(row)
        yield batch

    def _embed(self, encodings: list[Encoding], session: onnxruntime.InferenceSession) -> np.ndarray:
        return mean_pooled(session, encodings, self._input_names)


def _session(onnx_file: Path, threads: int, config: dict[str, str] | None = None) -> onnxruntime.InferenceSession:
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.log_severity_level = 3  # warnings about unused initialisers are noise here
    for key, value in (config or {}).items():
        options.add_session_config_entry(key, value)
    return onnxruntime.InferenceSession(str(onnx_file), options, providers=["CPUExecutionProvider"])
