"""Run every benchmark suite that keeps a results file in docs/benchmarks/.

    python -m bench [--quick | --smoke] [--only SUITE] [--out PATH.md]

A suite joins by being a package bench/<suite>/ whose `main.py` exposes
`main(argv) -> int` that accepts `--quick`, `--smoke` and `--out PATH.md` (replacing
only its own marked section, plots written next to it), and by being listed here.
Without `--out`, each suite writes docs/benchmarks/<suite>.md. `--quick` runs every benchmark at smoke sizes and, unless
`--out` is given, writes to a temporary file: smoke numbers never land in the docs.
`--smoke` is smaller still (seconds per benchmark, SQLite only; what tests/bench
runs), likewise into a temporary file.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import tempfile
from pathlib import Path

BENCHMARKS = ("ingest", "retrieval", "freshness", "reflect", "distill", "advantages", "verl_advantages", "ui")
RESULTS_DIR = Path(__file__).resolve().parents[1] / "docs" / "benchmarks"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n\n")[0])
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="every benchmark's smoke run, into a temporary file")
    size.add_argument("--smoke", action="store_true", help="smaller still, SQLite only (tests/bench); likewise")
    parser.add_argument(
        "--out",
        type=Path,
        help="one markdown file for every suite (default: docs/benchmarks/<suite>.md; --quick, --smoke: a temp file)",
    )
    parser.add_argument("--only", action="append", choices=BENCHMARKS, help="run only this one (repeatable)")
    args = parser.parse_args(argv)
    small = ["--quick"] if args.quick else ["--smoke"] if args.smoke else []
    out = args.out
    if out is None and small:
        out = Path(tempfile.mkdtemp(prefix="reflexa_bench_quick_")) / "benchmarks.md"
    worst = 0
    for name in args.only or BENCHMARKS:
        print(f"bench.{name}", file=sys.stderr, flush=True)
        module = importlib.import_module(f"bench.{name}.main")
        worst = max(worst, module.main([*small, "--out", str(out or RESULTS_DIR / f"{name}.md")]))
    print(f"results: {out or RESULTS_DIR}", file=sys.stderr)
    return worst


if __name__ == "__main__":
    sys.exit(main())
