"""The mem0 side of the retrieval benchmarks, in a long-lived process of its own so
that mem0's imports (torch, sentence-transformers, qdrant-client, posthog) neither
load into the benchmark process nor count in its memory. The benchmark drives it
over a pipe, one JSON line per request on stdin and one answer per line on stdout,
so that it can send each query to Reflexa and to mem0 in turn (bench.retrieval.vs_mem0):

    python -m bench.retrieval.mem0

    {"op": "init", "model": dir, "k": 10, "threads": None}
                                                   -> {"ok", "init_s", "versions", "torch_threads"}
    {"op": "add", "items": [{"text", "action", "environment"}]}
                                                   -> {"ok", "add_s": [per item]}
    {"op": "search", "text": q}                    -> {"ok", "hits": [item index], "search_s"}
    {"op": "stats"}                                -> {"ok", "rss_mb", "peak_rss_mb",
                                                       "llm_connections", "torch_threads"}

Items are numbered in the order they were added (the index is stored as metadata
and read back from every hit); `search_s` is mem0's own `Memory.search` time, in
this process. Anything the libraries print goes to stderr: stdout carries the
answers only. End of input ends the process (its work directory is removed). A
failed request answers {"ok": false, "error"} and the process goes on.

mem0 is configured to run offline: MEM0_TELEMETRY=False (no PostHog events, no
remote notice config), HF_HUB_OFFLINE, the huggingface embedder pointed at the
local model directory (sentence-transformers on torch, the same all-MiniLM-L6-v2),
the faiss vector store (flat inner-product index, cosine), `add(..., infer=False)`
so no LLM is used, and an "openai" LLM config whose base URL is a socket on
127.0.0.1 that only counts connections. spaCy is not installed, so mem0's BM25
lemmatisation and entity boosts are off (it logs that) and search is its semantic
path only; installing `mem0ai[nlp]` would make it download a spaCy model at run
time, which this machine cannot.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import sys
import tempfile
import threading
import time
from importlib import metadata
from pathlib import Path
from typing import Any, TextIO

VERSIONED = ("mem0ai", "sentence-transformers", "torch", "faiss-cpu", "qdrant-client")


def _rss_mb() -> tuple[float, float]:
    fields = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            fields[key] = int(value.split()[0]) / 1024
    return fields.get("VmRSS", 0.0), fields.get("VmHWM", 0.0)


def _version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "not installed"


class _Trap:
    """A listening socket standing in for the LLM endpoint: counts connections."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.connections = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            conn.close()


class Mem0Side:
    """One mem0 `Memory` (offline, faiss, infer=False) in a work directory."""

    def __init__(self, work: Path) -> None:
        self.work = work
        self.trap = _Trap()
        self.memory: Any = None
        self.k = 10
        self.added = 0

    def init(self, model: str, k: int, threads: int | None = None) -> dict[str, Any]:
        """`threads`: torch's intra-op threads (None: torch's default, one per core)."""
        os.environ.update(
            MEM0_TELEMETRY="False",
            MEM0_DIR=str(self.work / "home"),
            HF_HUB_OFFLINE="1",
            TRANSFORMERS_OFFLINE="1",
            TOKENIZERS_PARALLELISM="false",
        )
        started = time.perf_counter()
        from mem0 import Memory  # after the environment is set: mem0 reads it at import

        self.memory = Memory.from_config(
            {
                "embedder": {"provider": "huggingface", "config": {"model": model, "embedding_dims": 384}},
                "vector_store": {
                    "provider": "faiss",
                    "config": {
                        "path": str(self.work / "faiss"),
                        "collection_name": "bench",
                        "embedding_model_dims": 384,
                        "distance_strategy": "cosine",
                    },
                },
                "llm": {
                    "provider": "openai",
                    "config": {
                        "model": "never-called",
                        "api_key": "unused",
                        "openai_base_url": f"http://127.0.0.1:{self.trap.port}/v1",
                    },
                },
                "history_db_path": str(self.work / "history.db"),
            }
        )
        self.k = k
        import torch

        if threads:
            torch.set_num_threads(threads)
        return {
            "init_s": time.perf_counter() - started,
            "versions": {n: _version(n) for n in VERSIONED},
            "torch_threads": torch.get_num_threads(),
        }

    def add(self, items: list[dict[str, Any]]) -> dict[str, Any]:
        times = []
        for item in items:
            t0 = time.perf_counter()
            self.memory.add(
                item["text"],
                agent_id="bench",
                infer=False,
                metadata={"i": self.added, "action": item.get("action"), "environment": item.get("environment")},
            )
            times.append(time.perf_counter() - t0)
            self.added += 1
        return {"add_s": times}

    def search(self, text: str) -> dict[str, Any]:
        t0 = time.perf_counter()
        found = self.memory.search(text, top_k=self.k, filters={"agent_id": "bench"})
        elapsed = time.perf_counter() - t0
        return {"hits": [int(r["metadata"]["i"]) for r in found["results"]], "search_s": elapsed}

    def stats(self) -> dict[str, Any]:
        import torch

        rss, hwm = _rss_mb()
        return {
            "rss_mb": rss,
            "peak_rss_mb": hwm,
            "llm_connections": self.trap.connections,
            "torch_threads": torch.get_num_threads(),
        }

    def handle(self, request: dict[str, Any]) -> dict[str, Any]:
        op = request.get("op")
        if op == "init":
            return self.init(request["model"], int(request.get("k", 10)), request.get("threads"))
        if self.memory is None:
            raise RuntimeError("send init first")
        if op == "add":
            return self.add(request["items"])
        if op == "search":
            return self.search(request["text"])
        if op == "stats":
            return self.stats()
        raise ValueError(f"unknown op {op!r}")


def serve(requests: TextIO, answers: TextIO) -> None:
    work = Path(tempfile.mkdtemp(prefix="reflexa_bench_mem0_"))
    side = Mem0Side(work)
    try:
        for line in requests:
            if not line.strip():
                continue
            try:
                out = {"ok": True, **side.handle(json.loads(line))}
            except Exception as exc:  # answered, not raised: the benchmark decides what to do
                import traceback

                out = {
                    "ok": False,
                    "error": f"{type(exc).__name__}: {exc}",
                    "traceback": traceback.format_exc()[-4000:],
                }
            answers.write(json.dumps(out) + "\n")
            answers.flush()
    finally:
        side.trap.sock.close()
        shutil.rmtree(work, ignore_errors=True)


def main() -> int:
    # The answers get stdout's file to themselves; whatever mem0, torch or
    # transformers print (to fd 1 or sys.stdout) goes to stderr instead.
    answers = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    serve(sys.stdin, answers)
    return 0


if __name__ == "__main__":
    sys.exit(main())
