"""Retrieval benchmark: end-to-end HTTP retrieve latency and throughput at 10k, 100k
and 1M indexed items, against the raw floor (the same encode + index search in one
process) and against mem0 on the same workload.

    python -m bench.retrieval [--sizes 10000,100000,1000000] [--quick | --smoke] [--skip-mem0] [--skip-lag]
                              [--out docs/benchmarks/retrieval.md] [--out results.json] [--profile DIR]

Server settings can be varied through the environment: the servers inherit every
`REFLEXA_*` variable (e.g. REFLEXA_WORKER__CONCURRENCY=2), and the report lists them.

What it does, per size N:

1. Populate a fresh SQLite database with N exemplar reflections in a bench namespace
   directly in SQL (core inserts in 5,000-row transactions: `reflections`, one
   `embeddings` row each, an evidence row each pointing at a synthetic source
   trajectory, and the `index_changes` feed rows a worker would append). Encoding
   1M texts on this CPU would take hours, so the first `--unique` (40k) states are
   real all-MiniLM-L6-v2 vectors of real generated texts (cached under
   bench/results/retrieval/, gitignored) and items past that reuse a state's text
   with its vector plus Gaussian noise (sigma per component, default 0.01), L2
   renormalised. Every item has the same timestamps and no outcomes, so the
   ranking's recency and utility factors are equal for all and the served order is
   the similarity order.
2. Start the real server (`python -m uvicorn service.app:create_app --factory`,
   in-process worker off) and send a first retrieve: it builds the namespace's index
   from the embeddings table, so its latency is the index build time; then the
   server's RSS. Stop it: it saves the index snapshot, which this process loads for
   the raw floor.
3. Start the server again (on the snapshot) and send sequential retrieves (k=10,
   keep-alive) of held-out query states it has never seen (the embedding cache
   misses), each followed by the raw floor for the same text in this process (the
   same ONNX encode on the server's thread settings, no cache, + a search of the same index), so both see
   the same background load; then the same queries again (the cache hits), then 4
   concurrent clients for a fixed window on fresh queries and on cached ones.
4. Recall@10 of the served items and of the raw index against exact brute force
   over the same vectors.

Then, on a fresh database with the in-process worker on: how fast closed
trajectories become searchable (a backlog drained), and the ingest-to-searchable
lag seen by a probe client while background ingest runs at half that rate, with and
without the consistency token. Last, mem0 (PyPI mem0ai, offline, infer=False, the
same local model, faiss) on a small set of the same texts and queries, in a
subprocess, next to Reflexa on the same items.

It measures and reports; it asserts nothing about timings.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import pickle
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from bench.common import plots
from bench.common.databases import databases
from bench.common.machine import MachineFacts
from bench.common.output import add_out_option, progress, write_section
from bench.common.processes import OFFLINE_ENV, server_embedder
from bench.retrieval.config import FULL, MAX_UNIQUE, QUICK, RESULTS, SECTION, SMOKE, Config
from bench.retrieval.corpora import CORPORA, agent_states_data
from bench.retrieval.data import load_data
from bench.retrieval.lag import run_lag
from bench.retrieval.report import Report, _versions, render_markdown
from bench.retrieval.size import run_size
from bench.retrieval.vs_mem0 import run_mem0

# -- main ------------------------------------------------------------------------------------------------


def run(
    cfg: Config,
    command: str,
    quick: bool,
    skip_mem0: bool,
    backend: str,
    profile_dir: Path | None = None,
    skip_lag: bool = False,
    corpus: str = "bench",
) -> Report:
    started = time.perf_counter()
    os.environ.update(OFFLINE_ENV)
    machine = MachineFacts.collect(with_postgres=backend == "postgres")
    data = load_data(cfg) if corpus == "bench" else agent_states_data(cfg)
    floor_enc = server_embedder()
    rep = Report(
        command, quick, asdict(cfg), machine, _versions(), backend, data.mean_chars, data.mean_tokens, corpus=corpus
    )
    rep.load_avg_start = os.getloadavg()[0]
    with databases() as dbs, tempfile.TemporaryDirectory(prefix="reflexa_bench_retrieval_") as tmp:
        work = Path(tmp)
        for n in cfg.sizes:
            rep.sizes.append(run_size(cfg, n, data, dbs, work, floor_enc, floor_enc.name, backend, profile_dir))
        if not skip_lag:
            rep.lag = run_lag(cfg, dbs, work, backend)
        if not skip_mem0 and corpus == "bench":  # bench.retrieval.vs_mem0 compares on either corpus
            rep.mem0 = run_mem0(cfg, data, work)
    rep.wall_s = time.perf_counter() - started
    rep.load_avg_end = os.getloadavg()[0]
    return rep


def _json_default(o: Any) -> Any:
    if isinstance(o, np.generic):
        return o.item()
    return str(o)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.retrieval", description=__doc__.split("\n\n")[0])
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="10k items, small mem0 set: a smoke run of ~5 minutes")
    size.add_argument("--smoke", action="store_true", help="300 items, 1 s windows: seconds, for tests/bench")
    parser.add_argument("--sizes", help="comma-separated item counts (default 10000,100000,1000000)")
    parser.add_argument("--skip-mem0", action="store_true", help="leave the mem0 comparison out")
    parser.add_argument(
        "--skip-lag",
        action="store_true",
        help="leave ingest-to-searchable out (bench.freshness measures it on `reflexa serve` defaults; "
        "--smoke always does)",
    )
    parser.add_argument("--unique", type=int, help="real encoded states (default 40000; quick 10000)")
    parser.add_argument("--sigma", type=float, help="noise per component of synthetic items (default 0.01)")
    parser.add_argument("--backend", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument(
        "--corpus",
        choices=CORPORA,
        default="bench",
        help="the items' and queries' texts (bench.retrieval.corpora): `bench`, the bench's own agent states "
        "(~66 tokens, several environments), or `agent-states`, one small world from a small vocabulary "
        "(~38 tokens); `agent-states` leaves the mem0 part to bench.retrieval.vs_mem0",
    )
    parser.add_argument(
        "--profile",
        type=Path,
        metavar="DIR",
        help="after each size's measured runs, repeat the sequential runs with py-spy on the server "
        "(GIL-held samples) and write raw profiles and a summary to DIR (needs py-spy)",
    )
    add_out_option(parser, SECTION, "The markdown is always printed.")
    args = parser.parse_args(argv)
    cfg = SMOKE if args.smoke else QUICK if args.quick else FULL
    changes: dict[str, Any] = {}
    if args.sizes:
        changes["sizes"] = tuple(int(s) for s in args.sizes.split(","))
    if args.unique:
        changes["unique"] = min(args.unique, MAX_UNIQUE)
    if args.sigma is not None:
        changes["sigma"] = args.sigma
    if args.skip_mem0 or args.corpus != "bench" or importlib.util.find_spec("mem0") is None:
        changes["mem0_items"] = 0  # nor Reflexa's side of the comparison
    if changes:
        cfg = Config(**{**asdict(cfg), **changes})
    command = (
        "python -m bench.retrieval"
        + (" --quick" if args.quick else "")
        + (" --smoke" if args.smoke else "")
        + (f" --sizes {args.sizes}" if args.sizes else "")
        + (f" --unique {args.unique}" if args.unique else "")
        + (" --skip-mem0" if args.skip_mem0 else "")
        + (" --skip-lag" if args.skip_lag else "")
        + (f" --backend {args.backend}" if args.backend != "sqlite" else "")
        + (f" --corpus {args.corpus}" if args.corpus != "bench" else "")
        + "".join(f" --out {p}" for p in args.out if p.suffix == ".md")
    )
    if args.profile:
        args.profile.mkdir(parents=True, exist_ok=True)
    # --smoke leaves the lag part to bench.freshness --smoke (tests/bench runs both): seconds saved.
    skip_lag = args.skip_lag or args.smoke
    rep = run(cfg, command, args.quick or args.smoke, args.skip_mem0, args.backend, args.profile, skip_lag, args.corpus)
    progress(f"done in {rep.wall_s / 60:.1f} min")
    if args.profile:
        summary = "\n".join(
            f"## {s.n:,} items\n\n### Cache miss\n\n{s.profile['miss']}\n\n### Cache hit\n\n{s.profile['hit']}\n"
            for s in rep.sizes
            if s.profile
        )
        (args.profile / "summary.md").write_text(summary)
        progress(summary)
    for path in args.out:
        if path.suffix == ".json":
            path.write_text(json.dumps(asdict(rep), indent=2, default=_json_default))
    if not args.smoke:  # a smoke run (tests/bench) keeps the last real run's pickle
        RESULTS.mkdir(parents=True, exist_ok=True)
        with open(RESULTS / "last-report.pickle", "wb") as f:  # re-render without re-running: render_markdown(load)
            pickle.dump(rep, f)
    for path in args.out:
        if path.suffix != ".json":
            rep.plots = plots.retrieval(rep, path.parent)
            write_section(path, SECTION, render_markdown(rep))
    print(render_markdown(rep))
    return 0


if __name__ == "__main__":
    from bench.retrieval import (
        main as retrieval,  # run as the importable module: its pickled report then loads anywhere
    )

    sys.exit(retrieval.main())
