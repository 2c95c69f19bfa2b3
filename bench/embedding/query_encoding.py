"""Query encoding: what encoding one text costs on ONNX Runtime, what each candidate
speed-up changes, and whether its vectors still give sentence-transformers' top 10.

    python -m bench.embedding.query_encoding [--quick] [--cache-dir DIR] [--skip-gate]
                                             [--out docs/benchmarks/query_encoding.md]

(~15 min on the shared 2-core machine, `--quick` ~4 min; the gate's reference model is a good part of it.)

The retrieval cache-miss path is ~90 % query encoding: one short text through
all-MiniLM-L6-v2 on one intra-op thread. Every candidate is measured in this one
process against the current code path, interleaved text by text (each text is encoded
by every variant in turn, the order rotating), so background load on a shared
machine hits all of them alike; the ratio columns are medians of the per-text ratios
to the current path. The CPU columns (the process's CPU time during the encode) are
the steadier measure of a one-thread variant when other processes share the cores.

Parts:

- Start-up: building the session from the raw export (ONNX Runtime optimises the
  graph at every start) against loading a model saved already optimised.
- Single-text latency (p50 / p99 per `encode([text])`), on held-out agent states
  (bench.common.agent_states, ~60 tokens) and on short queries (an agent's action or thought,
  3 to 20 tokens): the graph optimisation levels, the model saved optimised,
  `onnxruntime.transformers.optimizer`'s BERT fusions (Attention, EmbedLayerNorm,
  SkipLayerNorm, BiasGelu), the tokenizer's single-text path, padding to the
  tokenizer.json's 128 instead of to the text, and the raw floor: `session.run`
  alone on pre-tokenised input.
- Threads by load: one and two intra-op threads (spinning, spinning stopped after
  each run, no spinning), ORT_PARALLEL execution, and a prototype that takes two
  threads only when the rest of the machine is idle; as the machine was and with a
  CPU-burning process on one core.
- Micro-batching: N texts in one batch against N single encodes; then 2 and 4 client
  threads encoding concurrently, directly and through a coalescing prototype (a 2 ms
  window, batches of at most 8), on agent states and on short queries.
- Correctness gate: vectors of a few thousand texts (corpus states and held-out
  queries) from each adoptable candidate against sentence-transformers (torch): max
  abs difference, min cosine, and how many queries get the reference's top 10
  exactly (same neighbours, same order).

It prints markdown; `--out FILE.md` replaces the file's query_encoding section.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

import numpy as np
import onnxruntime
from tokenizers import Encoding, Tokenizer

from bench.common.agent_states import corpus_states, query_states
from bench.common.latency import percentile
from bench.common.machine import MachineFacts
from bench.common.output import add_out_option, write_section
from store.embedding import build_embedder, describe_model
from store.embedding.base import normalise_rows
from store.embedding.onnx import mean_pooled, runnable_tasks
from store.embedding.onnx_export import export_onnx

GraphLevel = onnxruntime.GraphOptimizationLevel
GAP_S = 0.05  # between encodes in the threads part
SPIN_STOP = {"session.force_spinning_stop": "1"}
NO_SPIN = {"session.intra_op.allow_spinning": "0"}


@dataclass(frozen=True)
class Config:
    states: int  # held-out agent states, single-text latency
    short: int  # short queries, single-text latency
    contention: int  # texts per condition in the threads-by-load part
    batch_rounds: int
    concurrent_s: float  # per client count, mode and round
    gate_corpus: int
    gate_queries: int


FULL = Config(
    states=200, short=100, contention=120, batch_rounds=30, concurrent_s=3.0, gate_corpus=2000, gate_queries=500
)
QUICK = Config(states=40, short=30, contention=30, batch_rounds=6, concurrent_s=1.0, gate_corpus=600, gate_queries=100)


# -- the texts ------------------------------------------------------------------------


def single_texts(config: Config) -> tuple[list[str], list[str]]:
    """(agent states, short queries): held-out states a retrieval would send, and the
    short texts of the same agents (actions, thoughts)."""
    states = query_states(config.states, 2000, 2000, seed=41)
    short: dict[str, None] = {}
    for state in query_states(4 * config.short, 2000, 2000, seed=42):
        short.setdefault(state.action if len(short) % 2 else state.thought, None)
    return [state.observation for state in states], list(short)[: config.short]


# -- sessions and encode paths ---------------------------------------------------------


def session(path: Path, *, threads: int = 1, level: GraphLevel = GraphLevel.ORT_ENABLE_ALL, **config: str) -> object:
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = int(config.pop("inter_op", "1"))
    if config.pop("parallel", ""):
        options.execution_mode = onnxruntime.ExecutionMode.ORT_PARALLEL
    options.graph_optimization_level = level
    options.log_severity_level = 3
    for key, value in config.items():
        options.add_session_config_entry(key, value)
    return onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def new_tokenizer() -> Tokenizer:
    tokenizer = Tokenizer.from_file(str(describe_model(None).path / "tokenizer.json"))
    tokenizer.no_padding()
    tokenizer.enable_truncation(describe_model(None).max_seq_length)
    return tokenizer


def current_path(sess: object, tokenizer: Tokenizer, pad_to: int = 0) -> Callable[[list[str]], np.ndarray]:
    """OnnxEmbedder's batch path on this session, for texts that fit one batch:
    `encode_batch`, then the server's own `store.embedding.onnx.mean_pooled` (one run,
    mean pooling). `pad_to` pads every text to that width first (`Encoding.pad`)."""
    input_names = {node.name for node in sess.get_inputs()}  # type: ignore[attr-defined]

    def encode(texts: list[str]) -> np.ndarray:
        encodings: list[Encoding] = tokenizer.encode_batch(texts)
        if pad_to:
            for encoding in encodings:
                encoding.pad(pad_to)
        return mean_pooled(sess, encodings, input_names)  # type: ignore[arg-type]

    return encode


def single_path(sess: object, tokenizer: Tokenizer) -> Callable[[list[str]], np.ndarray]:
    """One text without the batch machinery: `Tokenizer.encode`, ids straight into an
    array, an all-ones mask, a plain mean."""

    def encode(texts: list[str]) -> np.ndarray:
        (text,) = texts
        ids = np.array([tokenizer.encode(text).ids], dtype=np.int64)
        (hidden,) = sess.run(
            None, {"input_ids": ids, "attention_mask": np.ones_like(ids), "token_type_ids": np.zeros_like(ids)}
        )  # type: ignore[attr-defined]  # noqa: E501
        return normalise_rows(hidden.mean(axis=1))

    return encode


def floor_path(sess: object, tokenizer: Tokenizer, texts: list[str]) -> Callable[[int], object]:
    """`session.run` alone, on input tokenised and laid out beforehand."""
    feeds = []
    for text in texts:
        ids = np.array([tokenizer.encode(text).ids], dtype=np.int64)
        feeds.append({"input_ids": ids, "attention_mask": np.ones_like(ids), "token_type_ids": np.zeros_like(ids)})
    return lambda row: sess.run(None, feeds[row])  # type: ignore[attr-defined]


class LoadAdaptive:
    """Prototype of intra-op threads chosen by load: a one-thread session and a
    two-thread one whose pool stops spinning at the end of each run (left spinning,
    ONNX Runtime burns ~30 ms of a core after every run, which also makes the machine
    look busy to the next check); two threads only when no other encode of this
    object is running and /proc/loadavg counts no runnable task but the caller. A
    second session costs ~110 MB of resident memory (165 -> 274 MB measured)."""

    def __init__(self, path: Path, tokenizer: Tokenizer) -> None:
        self._one = current_path(session(path), tokenizer)
        self._two = current_path(session(path, threads=2, **SPIN_STOP), tokenizer)
        self._lock = threading.Lock()
        self._running = 0
        self.calls = 0
        self.two_calls = 0

    def __call__(self, texts: list[str]) -> np.ndarray:
        with self._lock:
            self._running += 1
            alone = self._running == 1
        try:
            two = alone and (runnable_tasks() or 0) <= 1
            self.calls += 1
            self.two_calls += two
            return (self._two if two else self._one)(texts)
        finally:
            with self._lock:
                self._running -= 1


# -- measuring ------------------------------------------------------------------------


@dataclass
class Row:
    """One variant's encodes: wall-clock and CPU seconds (the whole process, so a
    second intra-op thread counts), and per-text ratios to the baseline."""

    name: str
    seconds: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)
    ratios: list[float] = field(default_factory=list)
    cpu_ratios: list[float] = field(default_factory=list)

    def cells(self, with_cpu: bool = True) -> str:
        ratio = f"{statistics.median(self.ratios):.2f}x" if self.ratios else "1.00x"
        p50, p99 = percentile(self.seconds, 50) * 1000, percentile(self.seconds, 99) * 1000
        wall = f"{p50:.2f} / {p99:.1f} | {ratio}"
        if not with_cpu:
            return wall
        cpu_ratio = f"{statistics.median(self.cpu_ratios):.2f}x" if self.cpu_ratios else "1.00x"
        return f"{wall} | {1000 * statistics.median(self.cpu):.2f} | {cpu_ratio}"


def interleaved(
    variants: dict[str, Callable[[int], object]], count: int, baseline: str, passes: int = 1
) -> dict[str, Row]:
    """Each of `count` texts by every variant in turn (rotating the order); per-text
    ratios against `baseline` measured on the same text moments apart. CPU time is
    the steadier measure of a one-thread variant's cost when other processes share
    the cores (it does not count the time spent waiting for a core)."""
    rows = {name: Row(name) for name in variants}
    names = list(variants)
    for row in range(min(10, count)):  # warm-up
        for run in variants.values():
            run(row)
    for step in range(count * passes):
        row = step % count
        order = names[step % len(names) :] + names[: step % len(names)]
        took: dict[str, tuple[float, float]] = {}
        for name in order:
            cpu, tick = time.process_time(), time.perf_counter()
            variants[name](row)
            took[name] = (time.perf_counter() - tick, time.process_time() - cpu)
        for name in names:
            wall, cpu = took[name]
            rows[name].seconds.append(wall)
            rows[name].cpu.append(cpu)
            if name != baseline:
                rows[name].ratios.append(wall / took[baseline][0])
                rows[name].cpu_ratios.append(cpu / max(took[baseline][1], 1e-9))
    return rows


def startup(paths: dict[str, tuple[Path, GraphLevel]], reps: int = 5) -> dict[str, float]:
    took: dict[str, list[float]] = {name: [] for name in paths}
    for _ in range(reps):
        for name, (path, level) in paths.items():
            tick = time.perf_counter()
            session(path, level=level)
            took[name].append(time.perf_counter() - tick)
    return {name: statistics.median(values) for name, values in took.items()}


class Burner(contextlib.AbstractContextManager["Burner"]):
    """A process spinning on one core, standing in for a co-tenant."""

    def __enter__(self) -> Burner:
        self._process = subprocess.Popen([sys.executable, "-c", "while True: pass"])
        time.sleep(0.3)
        return self

    def __exit__(self, *exc: object) -> None:
        self._process.kill()
        self._process.wait()


class Coalescer:
    """Prototype micro-batching: the first caller waits up to `window_s` for others
    (at most `max_batch` texts), encodes them in one batch and hands each its row;
    callers arriving meanwhile form the next batch."""

    def __init__(self, encode: Callable[[list[str]], np.ndarray], window_s: float = 0.002, max_batch: int = 8) -> None:
        self._encode = encode
        self._window_s = window_s
        self._max_batch = max_batch
        self._cond = threading.Condition()
        self._pending: list[tuple[str, list[np.ndarray], threading.Event]] = []
        self._leading = False
        self.sizes: list[int] = []

    def encode(self, text: str) -> np.ndarray:
        slot: list[np.ndarray] = []
        done = threading.Event()
        with self._cond:
            self._pending.append((text, slot, done))
            self._cond.notify_all()
            lead = not self._leading
            if lead:
                self._leading = True
                deadline = time.perf_counter() + self._window_s
                while len(self._pending) < self._max_batch and (left := deadline - time.perf_counter()) > 0:
                    self._cond.wait(left)
                batch, self._pending = self._pending[: self._max_batch], self._pending[self._max_batch :]
                self._leading = False
        if lead:
            self.sizes.append(len(batch))
            vectors = self._encode([text for text, _, _ in batch])
            for (_, out, event), vector in zip(batch, vectors, strict=True):
                out.append(vector)
                event.set()
        done.wait()
        return slot[0]


def concurrent(
    encode_one: Callable[[str], object], texts: list[str], clients: int, seconds: float
) -> tuple[list[float], float]:
    """`clients` threads encoding distinct texts back to back for `seconds`: the
    per-request latencies and the requests per second."""
    latencies: list[float] = []
    stop = time.perf_counter() + seconds
    barrier = threading.Barrier(clients)

    def client(offset: int) -> None:
        row = offset
        barrier.wait()
        while time.perf_counter() < stop:
            tick = time.perf_counter()
            encode_one(texts[row % len(texts)])
            latencies.append(time.perf_counter() - tick)
            row += clients

    workers = [threading.Thread(target=client, args=(offset,)) for offset in range(clients)]
    started = time.perf_counter()
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return latencies, len(latencies) / (time.perf_counter() - started)


# -- the correctness gate ---------------------------------------------------------------


def top10(vectors: np.ndarray, corpus: int) -> np.ndarray:
    scores = vectors[corpus:].astype(np.float64) @ vectors[:corpus].astype(np.float64).T
    return np.argsort(-scores, axis=1, kind="stable")[:, :10]


def gate_cells(reference: np.ndarray, candidate: np.ndarray, corpus: int) -> str:
    ref_top, cand_top = top10(reference, corpus), top10(candidate, corpus)
    queries = len(ref_top)
    ordered = int((ref_top == cand_top).all(axis=1).sum())
    as_sets = sum(set(a) == set(b) for a, b in zip(ref_top, cand_top, strict=True))
    cosine = (reference.astype(np.float64) * candidate.astype(np.float64)).sum(axis=1)
    return (
        f"{np.abs(reference - candidate).max():.2e} | {cosine.min():.7f} | {ordered} / {queries} | "
        f"{as_sets} / {queries}"
    )


# -- the run --------------------------------------------------------------------------


def prepare(cache_dir: Path, files: Path) -> dict[str, Path]:
    """The raw export (the store's own, reused when cached), the ONNX Runtime
    optimised graph saved at extended level, and two BERT-fused graphs."""
    from onnxruntime.transformers import optimizer
    from onnxruntime.transformers.fusion_options import FusionOptions

    raw = export_onnx(describe_model(None), cache_dir)
    saved = files / "saved-extended.onnx"
    options = onnxruntime.SessionOptions()
    options.graph_optimization_level = GraphLevel.ORT_ENABLE_EXTENDED
    options.optimized_model_filepath = str(saved)
    options.log_severity_level = 3
    onnxruntime.InferenceSession(str(raw), options, providers=["CPUExecutionProvider"])
    paths = {"raw": raw, "saved": saved}
    for name, attention in (("fused", True), ("fused-no-attention", False)):
        fusion = FusionOptions("bert")
        fusion.enable_attention = attention
        fused = optimizer.optimize_model(
            str(raw), model_type="bert", num_heads=12, hidden_size=384, opt_level=0, optimization_options=fusion
        )
        fused.save_model_to_file(str(files / f"{name}.onnx"))
        paths[name] = files / f"{name}.onnx"
    return paths


def single_text_part(paths: dict[str, Path], states: list[str], short: list[str]) -> list[str]:
    tokenizer = new_tokenizer()
    base = session(paths["raw"])
    encoders: dict[str, Callable[[list[str]], np.ndarray]] = {
        "current code path (raw export, ORT_ENABLE_ALL, 1 thread)": current_path(base, tokenizer),
        "ORT_ENABLE_BASIC": current_path(session(paths["raw"], level=GraphLevel.ORT_ENABLE_BASIC), tokenizer),
        "ORT_ENABLE_EXTENDED": current_path(session(paths["raw"], level=GraphLevel.ORT_ENABLE_EXTENDED), tokenizer),
        "saved optimised model, loaded with optimisation off": current_path(
            session(paths["saved"], level=GraphLevel.ORT_DISABLE_ALL), tokenizer
        ),
        "BERT fusion (Attention, EmbedLayerNorm, SkipLayerNorm, BiasGelu)": current_path(
            session(paths["fused"]), tokenizer
        ),
        "BERT fusion without Attention": current_path(session(paths["fused-no-attention"]), tokenizer),
        "tokenizer single-text path (`encode`, no batch)": single_path(base, tokenizer),
        "padded to 128 (tokenizer.json's padding)": current_path(base, tokenizer, pad_to=128),
    }
    lines = [
        "| variant | states p50 / p99 ms | ratio | CPU ms | CPU ratio | short p50 / p99 ms | ratio | CPU ms "
        "| CPU ratio |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    results = []
    for texts in (states, short):
        variants: dict[str, Callable[[int], object]] = {
            name: (lambda row, encode=encode, texts=texts: encode([texts[row]])) for name, encode in encoders.items()
        }
        variants["floor: `session.run` alone, pre-tokenised"] = floor_path(base, tokenizer, texts)
        results.append(interleaved(variants, len(texts), baseline=next(iter(encoders))))
    for name in results[0]:
        lines.append(f"| {name} | {results[0][name].cells()} | {results[1][name].cells()} |")
    tokenise = interleaved(
        {
            "encode_batch([text])": lambda row: tokenizer.encode_batch([states[row]]),
            "encode(text)": lambda row: tokenizer.encode(states[row]),
        },
        len(states),
        baseline="encode_batch([text])",
        passes=3,
    )
    lines += [
        "",
        "Tokenizer alone (agent states): "
        + "; ".join(f"`{row.name}` p50 {percentile(row.seconds, 50) * 1e6:.0f} µs" for row in tokenise.values())
        + ".",
    ]
    return lines


def startup_part(paths: dict[str, Path]) -> list[str]:
    took = startup(
        {
            "raw export, optimised at load (ORT_ENABLE_ALL, current)": (paths["raw"], GraphLevel.ORT_ENABLE_ALL),
            "saved optimised model, optimisation off": (paths["saved"], GraphLevel.ORT_DISABLE_ALL),
            "saved optimised model, ORT_ENABLE_ALL again": (paths["saved"], GraphLevel.ORT_ENABLE_ALL),
            "BERT-fused model, ORT_ENABLE_ALL": (paths["fused"], GraphLevel.ORT_ENABLE_ALL),
        }
    )
    return [
        "| session from | build s (median of 5) |",
        "|---|---:|",
        *(f"| {name} | {seconds:.3f} |" for name, seconds in took.items()),
    ]


def threads_part(paths: dict[str, Path], states: list[str]) -> list[str]:
    """One encode every `GAP_S` (a sequential client's pace; it also lets a spinning
    worker of the previous variant stop before the next variant runs: ONNX Runtime's
    default pool spins ~30 ms of CPU after each run, which would otherwise land on
    whichever variant comes next)."""
    tokenizer = new_tokenizer()
    adaptive = LoadAdaptive(paths["raw"], tokenizer)
    encoders: dict[str, Callable[[list[str]], np.ndarray]] = {
        "1 thread (current)": current_path(session(paths["raw"]), tokenizer),
        "2 threads (pool spins after each run)": current_path(session(paths["raw"], threads=2), tokenizer),
        "2 threads, spinning stopped at the end of a run": current_path(
            session(paths["raw"], threads=2, **SPIN_STOP), tokenizer
        ),
        "2 threads, no spinning": current_path(session(paths["raw"], threads=2, **NO_SPIN), tokenizer),
        "ORT_PARALLEL, 2 inter-op threads": current_path(
            session(paths["raw"], parallel="1", inter_op="2", **SPIN_STOP), tokenizer
        ),
        "by load: 2 threads (spinning stopped) only when the other core is idle": adaptive,
    }

    def paced(encode: Callable[[list[str]], np.ndarray]) -> Callable[[int], object]:
        def run(row: int) -> object:
            time.sleep(GAP_S)
            return encode([states[row]])

        return run

    variants = {name: paced(encode) for name, encode in encoders.items()}
    lines = [
        f"One encode every ~{1000 * GAP_S:.0f} ms (a sequential client's pace; the gap is not counted); CPU is the "
        "whole process's during the encode.",
        "",
        "| threads | as the machine was: p50 / p99 ms | ratio | CPU ms | CPU ratio | one core busy (a spinning "
        "process): p50 / p99 ms | ratio | CPU ms | CPU ratio |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    shares: list[float] = []
    results: list[dict[str, Row]] = []
    for condition in (contextlib.nullcontext(), Burner()):
        adaptive.calls = adaptive.two_calls = 0
        with condition:
            results.append(interleaved(variants, len(states), baseline="1 thread (current)"))
        shares.append(adaptive.two_calls / max(adaptive.calls, 1))
    quiet, busy = results
    for name in variants:
        lines.append(f"| {name} | {quiet[name].cells()} | {busy[name].cells()} |")
    lines += [
        "",
        f"The by-load variant took two threads for {100 * shares[0]:.0f} % of the encodes as the machine was "
        f"and {100 * shares[1]:.0f} % with one core busy.",
    ]
    return lines


def batching_part(config: Config, cache_dir: Path, states: list[str], short: list[str]) -> list[str]:
    embedder = build_embedder("onnx", cache_dir=cache_dir, cache_size=0)
    lines = [
        "Sequential, one caller: one `encode` of N texts against N `encode([text])` calls (ms per text, "
        "median over rounds of distinct texts).",
        "",
        "| N | N single encodes, ms per text | one batch of N, ms per text | batch / singles |",
        "|---:|---:|---:|---:|",
    ]
    for n in (2, 4, 8):
        singles: list[float] = []
        batches: list[float] = []
        for round_ in range(config.batch_rounds):
            texts = [states[(round_ * n + k) % len(states)] for k in range(n)]
            order = [0, 1] if round_ % 2 else [1, 0]
            for which in order:
                tick = time.perf_counter()
                if which == 0:
                    for text in texts:
                        embedder.encode([text])
                    singles.append((time.perf_counter() - tick) / n)
                else:
                    embedder.encode(texts)
                    batches.append((time.perf_counter() - tick) / n)
        single_ms, batch_ms = 1000 * statistics.median(singles), 1000 * statistics.median(batches)
        lines.append(f"| {n} | {single_ms:.2f} | {batch_ms:.2f} | {batch_ms / single_ms:.2f}x |")
    lines += [
        "",
        f"Concurrent: client threads encoding one distinct text each, back to back, {config.concurrent_s:.0f} s per "
        "client count, mode and round, 3 rounds alternating the modes; direct = each calls `encode([text])`, "
        "coalesced = through the prototype (2 ms window, at most 8 texts).",
        "",
        "| texts | clients | mode | p50 ms | p99 ms | encodes/s | mean batch |",
        "|---|---:|---|---:|---:|---:|---:|",
    ]
    for label, texts, clients in (("states", states, 2), ("states", states, 4), ("short", short, 4)):
        coalescer = Coalescer(embedder.encode)
        modes: dict[str, Callable[[str], object]] = {
            "direct": lambda text: embedder.encode([text]),
            "coalesced": coalescer.encode,
        }
        latencies: dict[str, list[float]] = {mode: [] for mode in modes}
        rates: dict[str, list[float]] = {mode: [] for mode in modes}
        for round_ in range(3):
            for mode in list(modes)[:: 1 if round_ % 2 == 0 else -1]:
                seconds, rate = concurrent(modes[mode], texts, clients, config.concurrent_s)
                latencies[mode] += seconds
                rates[mode].append(rate)
        for mode in modes:
            batch = f"{statistics.mean(coalescer.sizes):.2f}" if mode == "coalesced" else "1"
            lines.append(
                f"| {label} | {clients} | {mode} | {1000 * percentile(latencies[mode], 50):.1f} | "
                f"{1000 * percentile(latencies[mode], 99):.1f} | {statistics.mean(rates[mode]):.0f} | {batch} |"
            )
    return lines


def gate_part(config: Config, paths: dict[str, Path]) -> list[str]:
    """Corpus vectors from each candidate's batched `encode`, query vectors from one
    `encode([query])` per query (what retrieval sends), against sentence-transformers."""
    from store.embedding.onnx import OnnxEmbedder
    from store.embedding.sentence import SentenceEmbedder

    model = describe_model(None)
    corpus = [state.observation for state in corpus_states(config.gate_corpus)]
    queries = [
        state.observation
        for state in query_states(config.gate_queries, config.gate_corpus, config.gate_corpus, seed=43)
    ]
    reference_embedder = SentenceEmbedder(model, threads=os.cpu_count() or 1)
    reference = np.concatenate([reference_embedder.encode(corpus), reference_embedder.encode(queries)])
    candidates = {
        "current code path (raw export)": OnnxEmbedder(model, paths["raw"]),
        "saved optimised model": OnnxEmbedder(model, paths["saved"]),
        "BERT fusion": OnnxEmbedder(model, paths["fused"]),
        "2 intra-op threads (the by-load variant's second session)": OnnxEmbedder(model, paths["raw"], threads=2),
    }
    lines = [
        f"{len(corpus)} corpus states, {len(queries)} held-out queries; sentence-transformers "
        f"{metadata.version('sentence-transformers')} on torch {metadata.version('torch')} is the reference.",
        "",
        "| candidate | max abs diff | min cosine | top-10 identical (order too) | top-10 same set |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, embedder in candidates.items():
        vectors = np.concatenate([embedder.encode(corpus), *(embedder.encode([query]) for query in queries)])
        lines.append(f"| {name} | {gate_cells(reference, vectors, len(corpus))} |")
    alone = np.concatenate([reference[: len(corpus)], *(reference_embedder.encode([query]) for query in queries)])
    lines.append(
        f"| sentence-transformers itself, queries one at a time | {gate_cells(reference, alone, len(corpus))} |"
    )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer texts and a smaller gate, for a smoke run")
    parser.add_argument("--cache-dir", type=Path, help="where to keep (or find) the ONNX export; default: a temp dir")
    parser.add_argument("--skip-gate", action="store_true", help="leave out the sentence-transformers comparison")
    add_out_option(parser, "query_encoding", "Without it the report is only printed.")
    args = parser.parse_args()
    config = QUICK if args.quick else FULL
    started = time.perf_counter()
    load = [os.getloadavg()[0]]
    with tempfile.TemporaryDirectory(prefix="reflexa_bench_query_encoding_") as tmp:
        files = Path(tmp)
        paths = prepare(args.cache_dir or files / "models", files)
        states, short = single_texts(config)
        parts: dict[str, list[str]] = {}
        for title, part in (
            ("Start-up", lambda: startup_part(paths)),
            ("Single-text encode", lambda: single_text_part(paths, states, short)),
            ("Threads by load", lambda: threads_part(paths, states[: config.contention])),
            ("Micro-batching", lambda: batching_part(config, paths["raw"].parent, states, short)),
            ("Correctness gate", lambda: gate_part(config, paths)),
        ):
            if title == "Correctness gate" and args.skip_gate:
                continue
            print(f"  measuring: {title}", file=sys.stderr, flush=True)
            parts[title] = part()
            load.append(os.getloadavg()[0])
    print(f"  done in {time.perf_counter() - started:.0f} s", file=sys.stderr, flush=True)
    body = report(config, states, short, parts, load, time.perf_counter() - started, args.quick)
    print(body)
    for out in args.out:
        if out.suffix == ".md":
            write_section(out, "query_encoding", body)


def report(
    config: Config,
    states: list[str],
    short: list[str],
    parts: dict[str, list[str]],
    load: list[float],
    took_s: float,
    quick: bool,
) -> str:
    tokenizer = new_tokenizer()
    state_tokens = [len(encoding.ids) for encoding in tokenizer.encode_batch(states)]
    short_tokens = [len(encoding.ids) for encoding in tokenizer.encode_batch(short)]
    facts = MachineFacts.collect(with_postgres=False)
    facts.packages = {
        name: metadata.version(name) for name in ("onnxruntime", "tokenizers", "sentence-transformers", "torch")
    }
    lines = [
        "## Query encoding",
        "",
        f"Reproduce: `python -m bench.embedding.query_encoding{' --quick' if quick else ''} "
        "--out docs/benchmarks/query_encoding.md` "
        f"(this run took {took_s / 60:.1f} min).",
        "",
        facts.markdown(),
        f"- Machine load (1-minute load average) at the start and after each part: "
        f"{', '.join(f'{value:.1f}' for value in load)}; the machine is shared, so read the ratio columns "
        "(median of per-text ratios to the current code path, measured moments apart) before the milliseconds.",
        f"- Texts: {len(states)} held-out agent states (tokens mean {np.mean(state_tokens):.0f}, median "
        f"{np.median(state_tokens):.0f}, max {max(state_tokens)}) and {len(short)} short queries (an action or a "
        f"thought; tokens mean {np.mean(short_tokens):.0f}, max {max(short_tokens)}), one `encode([text])` each "
        "per variant, interleaved.",
    ]
    for title, body in parts.items():
        lines += ["", f"### {title}", "", *body]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
