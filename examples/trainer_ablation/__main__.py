"""python -m examples.trainer_ablation [--smoke] [--out DIR] [--seeds 0,1,2,3,4] [--conditions a,b]

Starts a throwaway Reflexa (`reflexa serve` defaults: SQLite, the packaged MiniLM,
the in-process worker), warms up one policy per seed, then runs every condition
for every seed from that seed's warm-up checkpoint, each in a namespace of its
own. Writes checkpoints/warmup-s<seed>.pt and warmup.json once per seed (a rerun
loads them), runs/<condition>-s<seed>.json as each run ends (a rerun skips runs
already written from the same checkpoint; --fresh redoes everything), summary.md
(the table) and success.png (the plot) under --out (default
examples/results/trainer_ablation).
The design is in docs/trainers.md, "Does it help?".
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

import torch
from reflexa import Client

from examples.common.server import EmbeddedServer
from examples.trainer_ablation import report, warmup
from examples.trainer_ablation.conditions import CONDITIONS
from examples.trainer_ablation.doors import make_family
from examples.trainer_ablation.loop import Run, Size
from examples.trainer_ablation.policy import make_policy, parameters

DEFAULT_OUT = Path("examples/results/trainer_ablation")
FULL = Size()
SMOKE = Size(updates=2, tasks_per_update=2, rollouts_per_task=2, eval_every=1)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m examples.trainer_ablation", description=__doc__.splitlines()[0])
    p.add_argument("--smoke", action="store_true", help="the test size: 1 seed, 2 updates, tiny groups (< 2 min)")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
    p.add_argument("--seeds", default=None, help="comma-separated (default 0,1,2,3,4; smoke: 0)")
    p.add_argument("--conditions", default=",".join(CONDITIONS), help=f"comma-separated of {', '.join(CONDITIONS)}")
    p.add_argument("--fresh", action="store_true", help="rerun runs already written under --out")
    p.add_argument("--threads", type=int, default=1, help="torch threads (1: reproducible)")
    args = p.parse_args(argv)
    unknown = set(args.conditions.split(",")) - set(CONDITIONS)
    if unknown:
        p.error(f"unknown conditions: {', '.join(sorted(unknown))}")
    return args


def warm_up_id(path: Path) -> str:
    """The checkpoint a run started from: the first 16 hex digits of its file's SHA-256."""
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16]


def commit() -> str | None:
    """The checkout's commit, recorded with every run (None outside a git checkout)."""
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return None
    return out.stdout.strip() or None


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    started_at = commit()  # the code every run of this invocation ran
    torch.set_num_threads(args.threads)
    torch.use_deterministic_algorithms(True)
    size = SMOKE if args.smoke else FULL
    seeds = [int(s) for s in (args.seeds or ("0" if args.smoke else "0,1,2,3,4")).split(",")]
    names = args.conditions.split(",")
    warm = warmup.SMOKE if args.smoke else warmup.FULL
    runs_dir = args.out / "runs"
    runs_dir.mkdir(parents=True, exist_ok=True)
    checkpoints = args.out / "checkpoints"
    checkpoints.mkdir(exist_ok=True)
    warm_path = args.out / "warmup.json"
    warm_reports: dict[str, dict[str, object]] = json.loads(warm_path.read_text()) if warm_path.exists() else {}
    with EmbeddedServer() as server, Client(server.url, server.admin_key, timeout=300) as client:
        for seed in seeds:
            family = make_family(seed)
            policy = make_policy(seed)
            saved = checkpoints / f"warmup-s{seed}.pt"
            if saved.exists() and str(seed) in warm_reports and not args.fresh:
                # The warm-up reads memory a worker writes; rerun, it does not give the same
                # checkpoint twice (docs/trainers.md), so every condition starts from this file.
                policy.model.load_state_dict(torch.load(saved, weights_only=True))
                print(f"seed {seed}: warm-up kept {saved}", flush=True)
            else:
                started = time.perf_counter()
                w = warmup.warm_up(client, policy, seed, warm, namespace_prefix=f"warmup-s{seed}")
                warm_reports[str(seed)] = {**asdict(w), "seconds": round(time.perf_counter() - started, 1)}
                print(f"seed {seed}: policy of {parameters(policy)} parameters; warm-up {w}", flush=True)
                torch.save(policy.model.state_dict(), saved)
                warm_path.write_text(json.dumps(warm_reports, indent=1, sort_keys=True))
            start_from = warm_up_id(saved)
            checkpoint = {k: v.clone() for k, v in policy.model.state_dict().items()}
            for name in names:
                path = runs_dir / f"{name}-s{seed}.json"
                kept = json.loads(path.read_text()) if path.exists() and not args.fresh else None
                if kept is not None and kept.get("warmup") == start_from:
                    print(f"  {name}: kept {path}", flush=True)
                    continue
                if kept is not None:
                    print(f"  {name}: {path} started from another warm-up; run again", flush=True)
                policy.model.load_state_dict(checkpoint)
                namespace = f"{name.replace('_', '-')}-s{seed}"
                client.create_namespace(namespace)
                run = Run(client, namespace, CONDITIONS[name], seed, family, policy, size)
                started = time.perf_counter()
                result = run.run()
                path.write_text(json.dumps({**result.as_json(), "commit": started_at, "warmup": start_from}, indent=1))
                print(
                    f"  {name}: training success {[round(s, 2) for _, s in result.evaluations]}, "
                    f"never-trained {result.held_out:.2f} ({time.perf_counter() - started:.0f} s)",
                    flush=True,
                )
    runs = [json.loads(p.read_text()) for p in sorted(runs_dir.glob("*.json"))]
    runs = [r for r in runs if r["condition"] in names and r["seed"] in seeds]
    summary = report.summarise(runs, size.updates, size.eval_every)
    text = report.table(summary, size.updates)
    (args.out / "summary.md").write_text(text)
    report.plot(runs, args.out / "success.png")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
