"""Where a benchmark's results go: the `--out` option every benchmark takes, and
replacing the benchmark's own marked section of a markdown file (docs/benchmarks.md)."""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

DOC_HEADER = """# Benchmarks

Measured results of the benchmarks in `bench/`, with the machine and the code they ran
on. Each benchmark writes and replaces only its own section, between
`<!-- bench:NAME:start -->` and `<!-- bench:NAME:end -->`; text outside the markers is
written by hand and kept. Numbers are from one machine at one time: compare rows of
the same run, and re-run before comparing against a change.

Run every benchmark (from the repository root, server dependencies installed,
PostgreSQL reachable at `REFLEXA_BENCH_PG_URL`, default
`postgresql+psycopg://postgres@127.0.0.1:5432/postgres`, which may create and drop
`reflexa_bench_*` databases):

    python -m bench                 # ingest, retrieval, reflect: full runs, updates docs/benchmarks.md
    python -m bench --quick         # smoke runs, into a temporary file

or one: `python -m bench.ingest --out docs/benchmarks.md`.
"""


def add_out_option(parser: argparse.ArgumentParser, section: str, without: str) -> None:
    """The `--out` every benchmark takes: markdown files get their section replaced,
    JSON files the raw results; `without` says what happens when none is given."""
    parser.add_argument(
        "--out",
        action="append",
        default=[],
        type=Path,
        help=f"a .md file (its {section} section is replaced) or a .json file; repeatable. {without}",
    )


def write_section(path: Path, name: str, body: str) -> None:
    """Replace the `name` section of a markdown file (append it when missing;
    create the file with DOC_HEADER when it does not exist)."""
    start, end = f"<!-- bench:{name}:start -->", f"<!-- bench:{name}:end -->"
    block = f"{start}\n{body.strip()}\n{end}"
    doc = path.read_text() if path.exists() else DOC_HEADER
    pattern = re.compile(re.escape(start) + r".*?" + re.escape(end), re.DOTALL)
    if pattern.search(doc):
        doc = pattern.sub(lambda _: block, doc, count=1)
    else:
        doc = doc.rstrip("\n") + "\n\n" + block + "\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(doc)


def write_outputs(
    paths: list[Path], section: str, results: dict[str, Any], markdown: str, json_default: Callable[[Any], Any] = str
) -> None:
    """Each `--out` path: a .json file gets the raw results, any other file the
    markdown as its `section`."""
    for path in paths:
        if path.suffix == ".json":
            path.write_text(json.dumps(results, indent=2, default=json_default))
        else:
            write_section(path, section, markdown)


def progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)
