"""Embedding benchmark: what each way of embedding a state costs, and what the cheaper
ones lose in retrieval quality.

    python -m bench.embedding.encoders [--quick] [--cache-dir DIR]

Rows: sentence-transformers on torch and the ONNX Runtime export (1 and 2 intra-op
threads), the ONNX model with int8 dynamic quantisation (onnxruntime's defaults, one
scale per tensor, and with one scale per output channel), the cache-hit path in front
of ONNX, the model-free hashing embedder, and a static model2vec distillation of the
same model when the `model2vec` package is importable (it distils offline from the
local model directory; without it that row is skipped with a note).

Each row runs in a fresh process so that its load time and resident memory are its
own: "serving" is the peak after loading and the single queries (what an API process
holds), "peak" the peak after the corpus batch too; a process that never imports
torch shows what a serving process saves. Single-query latency is `encode([text])`
over distinct texts (no cache), p50 and p99; throughput is one `encode(corpus)` call
over the whole corpus. CPU time (all threads of the process) sits beside wall time
because the machine may be shared while this runs. Quality compares each
row's vectors with sentence-transformers' on the same texts: cosine per text, and
recall@10 of nearest-neighbour retrieval (held-out query states against the corpus;
the share of the reference top 10 that the row's top 10 finds).

The texts are agent states generated deterministically from a seed: household text
games, web shopping pages, shell sessions, grid worlds, tool calls and dungeon
games, each optionally followed by the agent's thought, 10 to ~300 tokens.

It prints a markdown table and writes no file (docs/benchmarks/embedding.md was written from its printout).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np
from tokenizers import Tokenizer

from bench import REPO
from bench.common.cpu import wait_for_quiet
from bench.common.machine import MachineFacts
from bench.common.processes import OFFLINE_ENV
from store.embedding import default_model_path


@dataclass(frozen=True)
class Config:
    corpus: int
    queries: int
    single: int


FULL = Config(corpus=2000, queries=200, single=300)
QUICK = Config(corpus=300, queries=40, single=60)


# -- the texts ------------------------------------------------------------------------

_ROOMS = ["kitchen", "living room", "bathroom", "bedroom", "hallway", "garage", "pantry", "study", "cellar"]
_RECEPTACLES = ["fridge", "countertop", "cabinet", "drawer", "sinkbasin", "microwave", "shelf", "desk", "sofa"]
_ITEMS = ["apple", "mug", "knife", "plate", "egg", "tomato", "keychain", "book", "pen", "cellphone", "lettuce"]
_PRODUCTS = [
    ("running shoes", ["size 8", "size 9", "size 10"], ["red", "black", "white"]),
    ("wireless headphones", ["over-ear", "in-ear"], ["black", "silver"]),
    ("coffee grinder", ["manual", "electric"], ["steel", "black"]),
    ("yoga mat", ["4mm", "6mm"], ["purple", "blue", "green"]),
    ("phone case", ["iPhone 15", "Pixel 8"], ["clear", "black"]),
    ("desk lamp", ["LED", "halogen"], ["white", "brass"]),
]
_SHELL = [
    ("pytest tests/", "E   ModuleNotFoundError: No module named '{mod}'"),
    ("python train.py --epochs 3", "RuntimeError: CUDA out of memory. Tried to allocate {n} MiB"),
    ("git push origin main", "! [rejected] main -> main (fetch first)\nerror: failed to push some refs"),
    ("pip install {mod}", "ERROR: Could not find a version that satisfies the requirement {mod}"),
    ("make build", "gcc: error: {mod}.c: No such file or directory"),
    ("docker compose up", "Error: port {n} is already allocated"),
    ("ls src/", "{mod}.py  utils.py  __init__.py  config.yaml"),
    ("cat config.yaml", "database:\n  host: localhost\n  port: {n}\n  name: {mod}"),
]
_MODULES = ["httpx", "numpy", "requests", "yaml", "parser", "tokenizer", "scheduler", "auth"]
_TOOLS = [
    ('{{"tool": "search", "arguments": {{"query": "{q}"}}}}', '{{"status": 200, "results": {n}}}'),
    ('{{"tool": "get_weather", "arguments": {{"city": "{q}"}}}}', '{{"status": 404, "error": "city not found"}}'),
    (
        '{{"tool": "send_email", "arguments": {{"to": "{q}@example.com"}}}}',
        '{{"status": 429, "error": "rate limited"}}',
    ),
    ('{{"tool": "sql", "arguments": {{"query": "SELECT * FROM {q}"}}}}', '{{"rows": {n}}}'),
]
_MONSTERS = ["goblin", "troll", "giant rat", "skeleton", "dark elf"]
_THOUGHTS = [
    "I should look for the {item} before going back.",
    "The last attempt failed because the door was locked; find the key first.",
    "This page does not have the right size, go back to the search results.",
    "The error suggests a missing dependency; install it and rerun the tests.",
    "Low health: drink a potion before attacking again.",
    "The API is rate limiting me, wait and retry with a smaller batch.",
]


def _household(rng: random.Random) -> str:
    seen = ", ".join(f"a {rng.choice(_RECEPTACLES)} {rng.randint(1, 6)}" for _ in range(rng.randint(2, 14)))
    item, place = rng.choice(_ITEMS), rng.choice(_RECEPTACLES)
    return rng.choice(
        [
            f"You are in the {rng.choice(_ROOMS)}. Looking quickly around you, you see {seen}.",
            f"You open the {place} {rng.randint(1, 4)}. In it, you see a {item} {rng.randint(1, 3)} and {seen}.",
            f"You pick up the {item} {rng.randint(1, 3)} from the {place} {rng.randint(1, 4)}.",
            f"Your task is to: put a {rng.choice(['hot', 'cool', 'clean'])} {item} in the {place}. You see {seen}.",
            "Nothing happens.",
        ]
    )


def _webshop(rng: random.Random) -> str:
    name, sizes, colours = rng.choice(_PRODUCTS)
    price = rng.randint(10, 150)
    if rng.random() < 0.5:
        hits = " ".join(
            f"{i}. {name.title()} model {rng.randint(100, 999)} ${rng.randint(10, 150)}.99"
            for i in range(1, rng.randint(3, 9))
        )
        return f"[Search] results for '{rng.choice(colours)} {name} under {price} dollars': {hits} [Next >]"
    return (
        f"Item page: {name.title()}. Options: {' '.join(f'[{s}]' for s in sizes)} "
        f"{' '.join(f'[{c}]' for c in colours)}. Price: ${price}.99. Rating: {rng.randint(1, 5)} stars. [Buy Now]"
    )


def _shell(rng: random.Random) -> str:
    command, output = rng.choice(_SHELL)
    fill = {"mod": rng.choice(_MODULES), "n": rng.randint(80, 9000)}
    return f"$ {command.format(**fill)}\n{output.format(**fill)}"


def _grid(rng: random.Random) -> str:
    cells = " ".join(f"({rng.randint(0, 9)},{rng.randint(0, 9)})=wall" for _ in range(rng.randint(2, 40)))
    return (
        f"maze 10x10: agent at ({rng.randint(0, 9)},{rng.randint(0, 9)}) facing "
        f"{rng.choice(['north', 'south', 'east', 'west'])}; key at ({rng.randint(0, 9)},{rng.randint(0, 9)}); {cells}"
    )


def _tool(rng: random.Random) -> str:
    call, result = rng.choice(_TOOLS)
    fill = {"q": rng.choice(["paris", "orders", "alice", "berlin", "users", "tokyo"]), "n": rng.randint(0, 50)}
    return f"action: {call.format(**fill)}\nobservation: {result.format(**fill)}"


def _dungeon(rng: random.Random) -> str:
    carried = rng.sample(["sword", "shield", "potion", "torch", "rope", "gold"], rng.randint(1, 5))
    return (
        f"The {rng.choice(_MONSTERS)} attacks you for {rng.randint(1, 9)} damage. HP: {rng.randint(1, 20)}/20. "
        f"Inventory: {', '.join(carried)}."
    )


_FAMILIES = (_household, _webshop, _shell, _grid, _tool, _dungeon)


def agent_states(count: int, seed: int, exclude: frozenset[str] = frozenset()) -> list[str]:
    """`count` distinct agent-state texts not in `exclude`, the same for the same seed
    on every machine. Distinct, because duplicates tie exactly in a nearest-neighbour
    search and would make recall measure tie-breaking instead of quality."""
    rng = random.Random(seed)
    texts: dict[str, None] = {}
    while len(texts) < count:
        text = rng.choice(_FAMILIES)(rng)
        if rng.random() < 0.4:
            text += "\nThought: " + rng.choice(_THOUGHTS).format(item=rng.choice(_ITEMS))
        if text not in exclude:
            texts[text] = None
    return list(texts)


# -- one row, in its own process --------------------------------------------------------


class _StaticModel:
    """A model2vec StaticModel behind the Embedder contract (float32, unit rows)."""

    def __init__(self, path: Path) -> None:
        from model2vec import StaticModel

        self._model = StaticModel.from_pretrained(str(path))
        self.name = "model2vec"
        self.dim = int(self._model.dim)

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        from store.embedding.base import normalise_rows

        return normalise_rows(self._model.encode(list(texts)))


def _load(row: str, threads: int, files: Path) -> Any:
    from store.embedding import CachedEmbedder, HashingEmbedder, describe_model

    if row == "hashing":
        return HashingEmbedder()
    if row == "model2vec":
        return _StaticModel(files / "model2vec")
    model = describe_model(None)
    if row == "torch":
        from store.embedding.sentence import SentenceEmbedder

        return SentenceEmbedder(model, threads=threads)
    from store.embedding.onnx import OnnxEmbedder

    onnx_file = files / (f"{row}.onnx" if row.startswith("onnx-int8") else "fp32.onnx")
    embedder = OnnxEmbedder(model, onnx_file, threads=threads)
    return CachedEmbedder(embedder) if row == "onnx-cache-hit" else embedder


def run_row(row: str, threads: int, files: Path, config: Config) -> None:
    """Measure one row and write its numbers (and, for 1 thread, its vectors) into
    `files`. CPU times sit next to wall times because the machine may be shared:
    CPU time per text is what a row costs whatever else runs."""
    corpus = agent_states(config.corpus, seed=1)
    queries = agent_states(config.queries, seed=2, exclude=frozenset(corpus))
    singles = agent_states(config.single, seed=3)
    started = time.perf_counter()
    embedder = _load(row, threads, files)
    load_s = time.perf_counter() - started
    embedder.encode(singles[:20])  # warm-up: first-run allocations and lazy initialisation
    if row == "onnx-cache-hit":
        embedder.encode(singles + corpus)  # every measured text below is then a hit, the batch too
    latencies = []
    cpu = time.process_time()
    for text in singles:
        tick = time.perf_counter()
        embedder.encode([text])
        latencies.append(time.perf_counter() - tick)
    single_cpu_s = time.process_time() - cpu
    serving_rss_mb = _peak_rss_mb()
    tick, cpu = time.perf_counter(), time.process_time()
    vectors = embedder.encode(corpus)
    batch_s, batch_cpu_s = time.perf_counter() - tick, time.process_time() - cpu
    if threads == 1:
        np.save(files / f"{row}.npy", np.concatenate([vectors, embedder.encode(queries)]))
    latencies.sort()
    stats = {
        "load_s": load_s,
        "serving_rss_mb": serving_rss_mb,
        "peak_rss_mb": _peak_rss_mb(),
        "torch_loaded": "torch" in sys.modules,
        "p50_ms": 1000 * statistics.median(latencies),
        "p99_ms": 1000 * latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))],
        "cpu_ms_per_query": 1000 * single_cpu_s / len(singles),
        "texts_per_s": len(corpus) / batch_s,
        "texts_per_cpu_s": len(corpus) / max(batch_cpu_s, 1e-9),
    }
    (files / f"{row}-{threads}.json").write_text(json.dumps(stats))


def _peak_rss_mb() -> float:
    """This process's peak resident memory. VmHWM, not getrusage's ru_maxrss: the
    latter survives exec, so a child would report the parent's peak if larger."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


# -- the whole run ----------------------------------------------------------------------

ROWS = [
    ("torch", 1),
    ("torch", 2),
    ("onnx", 1),
    ("onnx", 2),
    ("onnx-int8", 1),
    ("onnx-int8-per-channel", 1),
    ("onnx-int8-per-channel", 2),
    ("onnx-cache-hit", 1),
    ("hashing", 1),
    ("model2vec", 1),
]


def prepare(files: Path, cache_dir: Path) -> dict[str, str]:
    """Export the fp32 ONNX model, quantise it, distil model2vec when possible; returns
    notes (preparation times, skips) for the report."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    from store.embedding import describe_model
    from store.embedding.onnx_export import export_onnx, onnx_path

    notes = {}
    model = describe_model(None)
    reused = onnx_path(model, cache_dir).exists()
    tick = time.perf_counter()
    exported = export_onnx(model, cache_dir)
    notes["onnx export"] = "reused" if reused else f"{time.perf_counter() - tick:.1f} s, once per model"
    (files / "fp32.onnx").symlink_to(exported)
    for row, per_channel in (("onnx-int8", False), ("onnx-int8-per-channel", True)):
        tick = time.perf_counter()
        quantised = files / f"{row}.onnx"
        quantize_dynamic(exported, quantised, weight_type=QuantType.QInt8, per_channel=per_channel)
        notes[row] = (
            f"quantised in {time.perf_counter() - tick:.1f} s; file {exported.stat().st_size / 2**20:.0f} MB -> "
            f"{quantised.stat().st_size / 2**20:.0f} MB"
        )
    if importlib.util.find_spec("model2vec") is None:
        notes["model2vec"] = "skipped: the model2vec package is not installed (it is not a Reflexa dependency)"
        return notes
    tick = time.perf_counter()
    distil = subprocess.run(
        [sys.executable, "-m", "bench.embedding.encoders", "--distil-model2vec", str(files / "model2vec")],
        cwd=REPO,
        env={**os.environ, **OFFLINE_ENV},
        capture_output=True,
        text=True,
        check=False,
    )
    if distil.returncode != 0:
        notes["model2vec"] = "skipped: offline distillation failed: " + distil.stderr.strip().splitlines()[-1]
    else:
        version = metadata.version("model2vec")
        notes["model2vec"] = (
            f"model2vec {version}, distilled offline (PCA to 256 dims) in {time.perf_counter() - tick:.0f} s"
        )
    return notes


def distil_model2vec(out: Path) -> None:
    from model2vec.distill import distill

    distill(model_name=str(default_model_path()), pca_dims=256).save_pretrained(str(out))


def recall_at_10(reference: np.ndarray, candidate: np.ndarray, corpus: int) -> float:
    """Mean share of each query's reference top 10 that the candidate's top 10 finds."""
    ref_top = np.argsort(-(reference[corpus:] @ reference[:corpus].T), axis=1)[:, :10]
    cand_top = np.argsort(-(candidate[corpus:] @ candidate[:corpus].T), axis=1)[:, :10]
    return float(np.mean([len(set(a) & set(b)) / 10 for a, b in zip(ref_top, cand_top, strict=True)]))


def report(files: Path, config: Config, notes: dict[str, str]) -> str:
    vectors = {path.stem: np.load(path).astype(np.float64) for path in files.glob("*.npy")}
    tokenizer = Tokenizer.from_file(str(default_model_path() / "tokenizer.json"))
    tokenizer.no_truncation()
    tokenizer.no_padding()
    tokens = np.array([len(encoding.ids) for encoding in tokenizer.encode_batch(agent_states(config.corpus, seed=1))])
    lines = [
        f"Corpus {config.corpus} agent states, {config.queries} held-out queries, {config.single} single queries; "
        f"tokens per corpus text: mean {tokens.mean():.0f}, median {np.median(tokens):.0f}, "
        f"{100 * (tokens > 256).mean():.1f} % over the 256-token truncation.",
        "Quality is against sentence-transformers (torch); int8 cosines are against the fp32 ONNX model.",
        "",
        "| row | threads | load s | RSS serving / peak MB | torch | single p50 / p99 ms | CPU ms per query "
        "| corpus texts/s | texts per CPU-s | cosine min / mean | recall@10 |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row, threads in ROWS:
        stats_file = files / f"{row}-{threads}.json"
        if not stats_file.exists():
            continue
        stats = json.loads(stats_file.read_text())
        quality = "as 1 thread | as 1 thread" if threads != 1 else _quality(row, vectors, config.corpus)
        lines.append(
            f"| {row} | {threads} | {stats['load_s']:.2f} | {stats['serving_rss_mb']:.0f} / "
            f"{stats['peak_rss_mb']:.0f} | {'yes' if stats['torch_loaded'] else 'no'} | "
            f"{stats['p50_ms']:.3f} / {stats['p99_ms']:.3f} | {stats['cpu_ms_per_query']:.3f} | "
            f"{stats['texts_per_s']:.0f} | {stats['texts_per_cpu_s']:.0f} | {quality} |"
        )
    lines += ["", *(f"- {name}: {note}" for name, note in notes.items())]
    return "\n".join(lines)


def _quality(row: str, vectors: dict[str, np.ndarray], corpus: int) -> str:
    """The cosine and recall@10 cells of `row`: cosine against the torch vectors (int8:
    against fp32 ONNX, the model it was quantised from), recall against torch."""
    candidate, reference = vectors[row], vectors["torch"]
    recall = f"{recall_at_10(reference, candidate, corpus):.3f}"
    if candidate.shape[1] != reference.shape[1]:
        return f"n/a (another vector space) | {recall}"
    cosines = (candidate * vectors["onnx" if row.startswith("onnx-int8") else "torch"]).sum(axis=1)
    return f"{cosines.min():.6f} / {cosines.mean():.6f} | {recall}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a smaller corpus, for a smoke run")
    parser.add_argument("--cache-dir", type=Path, help="where to keep (or find) the ONNX export; default: a temp dir")
    parser.add_argument("--row", nargs=2, metavar=("ROW", "THREADS"), help=argparse.SUPPRESS)
    parser.add_argument("--files", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--distil-model2vec", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    config = QUICK if args.quick else FULL
    if args.distil_model2vec:
        distil_model2vec(args.distil_model2vec)
        return
    if args.row:
        run_row(args.row[0], int(args.row[1]), args.files, config)
        return
    with tempfile.TemporaryDirectory(prefix="reflexa_bench_embedding_") as tmp:
        files = Path(tmp)
        notes = prepare(files, args.cache_dir or files / "models")
        cores = os.cpu_count() or 1
        for row, threads in ROWS:
            if row == "model2vec" and not (files / "model2vec").exists():
                continue
            wait_for_quiet(cores)
            print(f"  measuring {row} with {threads} thread(s)", file=sys.stderr, flush=True)
            module = "bench.embedding.encoders"
            command = [sys.executable, "-m", module, "--row", row, str(threads), "--files", str(files)]
            subprocess.run(
                command + (["--quick"] if args.quick else []),
                cwd=REPO,
                env={**os.environ, **OFFLINE_ENV},
                check=True,
            )
        facts = MachineFacts.collect(with_postgres=False)
        facts.packages = {name: metadata.version(name) for name in ("torch", "onnxruntime", "sentence-transformers")}
        print(f"## Embedding\n\n{facts.markdown()}\n\n{report(files, config, notes)}")


if __name__ == "__main__":
    main()
