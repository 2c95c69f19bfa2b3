"""The mem0 side of the retrieval benchmark, run in a process of its own so that
mem0's imports (torch, sentence-transformers, qdrant-client, posthog) neither load
into the benchmark process nor count in its memory.

    python -m bench.retrieval.mem0 IN.json OUT.json

IN: {"model": dir, "items": [{"text", "action", "environment"}], "queries": [text],
"warmup": [text], "k": 10}. OUT: add and search timings, the item index of every
search hit (from the metadata stored with it), resident memory, the versions, and
how many connections reached the dummy LLM endpoint (must be 0: infer=False).

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


def run(spec: dict, work: Path) -> dict:
    os.environ.update(
        MEM0_TELEMETRY="False",
        MEM0_DIR=str(work / "home"),
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        TOKENIZERS_PARALLELISM="false",
    )
    trap = _Trap()
    started = time.perf_counter()
    from mem0 import Memory  # after the environment is set: mem0 reads it at import

    memory = Memory.from_config(
        {
            "embedder": {"provider": "huggingface", "config": {"model": spec["model"], "embedding_dims": 384}},
            "vector_store": {
                "provider": "faiss",
                "config": {
                    "path": str(work / "faiss"),
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
                    "openai_base_url": f"http://127.0.0.1:{trap.port}/v1",
                },
            },
            "history_db_path": str(work / "history.db"),
        }
    )
    init_s = time.perf_counter() - started
    import torch

    add_times = []
    for i, item in enumerate(spec["items"]):
        t0 = time.perf_counter()
        memory.add(
            item["text"],
            agent_id="bench",
            infer=False,
            metadata={"i": i, "action": item["action"], "environment": item["environment"]},
        )
        add_times.append(time.perf_counter() - t0)
    for q in spec["warmup"]:
        memory.search(q, top_k=spec["k"], filters={"agent_id": "bench"})
    search_times, hits = [], []
    for q in spec["queries"]:
        t0 = time.perf_counter()
        found = memory.search(q, top_k=spec["k"], filters={"agent_id": "bench"})
        search_times.append(time.perf_counter() - t0)
        hits.append([int(r["metadata"]["i"]) for r in found["results"]])
    rss, hwm = _rss_mb()
    return {
        "ok": True,
        "init_s": init_s,
        "add_s": add_times,
        "search_s": search_times,
        "hits": hits,
        "rss_mb": rss,
        "peak_rss_mb": hwm,
        "llm_connections": trap.connections,
        "torch_threads": torch.get_num_threads(),
        "versions": {
            name: _version(name) for name in ("mem0ai", "sentence-transformers", "torch", "faiss-cpu", "qdrant-client")
        },
    }


def main(argv: list[str]) -> int:
    spec = json.loads(Path(argv[0]).read_text())
    work = Path(tempfile.mkdtemp(prefix="reflexa_bench_mem0_"))
    try:
        out = run(spec, work)
    except Exception as exc:  # reported, not raised: the benchmark goes on without mem0
        import traceback

        out = {"ok": False, "error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()[-4000:]}
    finally:
        shutil.rmtree(work, ignore_errors=True)
    Path(argv[1]).write_text(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
