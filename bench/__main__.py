"""Run every benchmark that keeps a section in docs/benchmarks.md.

    python -m bench [--quick] [--out docs/benchmarks.md]

A benchmark joins by exposing `main(argv) -> int` that accepts `--quick` and
`--out PATH.md` (replacing only its own marked section) and by being listed here.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path

BENCHMARKS = ("ingest", "retrieval")
DEFAULT_OUT = Path(__file__).resolve().parents[1] / "docs" / "benchmarks.md"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="each benchmark's short smoke run")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="markdown file to update")
    args = parser.parse_args(argv)
    worst = 0
    for name in BENCHMARKS:
        print(f"bench.{name}", file=sys.stderr, flush=True)
        module = importlib.import_module(f"bench.{name}")
        worst = max(worst, module.main([*(["--quick"] if args.quick else []), "--out", str(args.out)]))
    return worst


if __name__ == "__main__":
    sys.exit(main())
