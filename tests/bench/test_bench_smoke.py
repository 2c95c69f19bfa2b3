"""Every benchmark `python -m bench` runs, end to end at its smallest size (`--smoke`:
SQLite, seconds each), through the documented entry point, in a subprocess: it
exits 0 and writes its own section with the headings and table rows it always has.
Nothing here looks at a timing (a benchmark measures; a test does not judge speed).

The runs share the benchmarks' gitignored cache under bench/results/ (the ONNX
export of the packaged model and the encoded corpus chunks) with every other run.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from bench.__main__ import BENCHMARKS
from bench.common.output import DOC_HEADER

REPO = Path(__file__).resolve().parents[2]
OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}

# Per benchmark: the headings its section always has, and rows (regexes, one table
# line each) that the smoke sizes must produce.
EXPECTED: dict[str, tuple[list[str], list[str]]] = {
    "ingest": (
        ["## Ingest", "### SQLite, 1 uvicorn process", "### Raw floor (SQLAlchemy core, one process)"],
        # a client count is flagged ⚠ when other work used the machine during its level
        [rf"\| {n}( ⚠)? \| [\d,]+ \|" for n in (1, 4, 16)] + [r"\| sqlite \| [\d,]+ \|"],
    ),
    "retrieval": (
        [
            "## Retrieval",
            "### Latency, cache-miss path (query embedding included)",
            "### Latency, cache-hit path (the same queries repeated)",
            "### Raw floor breakdown (one process, no HTTP)",
            "### Throughput, 2 concurrent clients",
            "### Batch retrieve throughput",
            "### Index build, memory, population",
            "### Ingest to searchable (in-process worker on)",
            "### mem0 on the same workload",
            "### Against the aims",
        ],
        [
            r"\| 300 \| exact",
            r"\| 300 \| miss \|",
            r"\| 300 \| hit \|",
            *(rf"\| 300 \| {mode} \| [\d,]+ \|" for mode in ("batch of 8", "batch of 16", "single, 1 client", "floor")),
        ],
    ),
    "freshness": (
        [
            "## Freshness (ingest to searchable)",
            "### Searchable items/s against the encoder",
            "### Lag under paced ingest, 1 core busy",
            "### An awaited job against another namespace's backlog",
            "### Against the aims",
        ],
        [
            r"\| 1 \| 10 \(20\) \| [\d.]+ \|",  # a searchable round: 2 five-step episodes, two texts a step
            r"\| all \| 10 \(20\) \|",
            r"\| [\d.]+ \| [\d.]+ \| \d+ \| \d+ \| [\d.]+ \|",  # a lag level
            r"\| read-your-writes \(token\) \| [\d.]+ \|",
            r"\| polled \(no token\) \| [\d.]+ \|",
        ],
    ),
    "reflect": (
        [
            "## Reflection workers",
            "### Draining a backlog",
            "### Raw floor (same reflector work in one process: no HTTP, queue or SQL)",
            "### Queue lag under steady ingest (sqlite, 1 process × concurrency 1)",
        ],
        [
            r"\| sqlite \| 1 process × concurrency 1 \| \d+ \|",
            r"\| sqlite \| 1 process × concurrency 1 \| `trajectory.closed` \| 24 \|",
            r"\| \*\*total\*\* \|",
            r"\| [\d.]+ \| [\d.]+ \| \d+ \| [\d.]+ \|",  # a lag level
        ],
    ),
    "distill": (
        [
            "## Distillation: teacher contexts and dataset export",
            "### Setup: memory and snapshot",
            "### Teacher contexts (POST …/distill/contexts)",
            "### Raw floor for contexts (one process, no HTTP)",
            "### Dataset export (GET …/export)",
            "### Against the issue",
        ],
        [
            r"\| sqlite \| 24 \(120\) \|",  # the background memory
            r"\| sqlite \| batch 1( ⚠)? \| 8 \| 40 \| 160 \|",  # 8 trajectories × 5 steps × (1 + 3 teachers)
            r"\| sqlite \| batch 1 \| 40 \| \d+ \|",  # its floor
            *(rf"\| sqlite \| {d} \| {f} \| [\d,]+ \|" for d in ("trajectories", "sft") for f in ("jsonl", "parquet")),
        ],
    ),
    "advantages": (
        [
            "## Shaped advantages and teacher scoring",
            "### POST /v1/distill/advantages",
            "### Where the server's time goes (in process, ms p50)",
            "### Raw floor (one process, no HTTP)",
            "### Teacher scoring (POST …/distill/teacher_logprobs)",
            "### Against the issue",
        ],
        [
            # each method over HTTP, each body: 2 groups × 4 trajectories × 64 tokens
            *(
                rf"\| {m}( \([^|]*\))?( ⚠)? \| {body} \| 8 × 64 \| [\d.]+ \|"
                for m in ("grpo", "token_signal", "direct_opd", "step_shaping", "horizon_agreement")
                for body in ("JSON", "binary")
            ),
            r"\| grpo \| [\d.]+ \| [\d.]+ \| [\d.]+ \|",  # its floor (and its stages)
            r"\| token_ids \| 4 × 8 \| 8 \| 1 \|",  # teacher scoring: 4 items × 8 tokens, one scoring call
            r"\| text \| 4 × 8 \| 9 \| 1 \|",  # … after text contexts (8 words and a BOS)
        ],
    ),
    "verl_advantages": (
        [
            "## verl batch advantages (client splitting)",
            "### Through the client (prepare → split requests → write-back)",
            "### Raw floor (numpy on the padded tensors, one process)",
        ],
        [
            # 4 prompts × 4 rollouts × 128 padded positions, one request each
            *(
                rf"\| {m} \| {body} \| 16 × 128 \| [\d,]+ \| 2,048 \| 1 \|"
                for m in ("grpo", "token_signal")
                for body in ("JSON", "binary")
            ),
            *(rf"\| {m} \| [\d.,]+ \| [\d,]+ \|" for m in ("grpo", "token_signal")),
        ],
    ),
    "ui": (
        ["## Operator UI: page render times"],
        [
            rf"\| {page} \| [\d.]+ \| [\d.]+ \| [\d.]+ \| [\d.]+ \| [\d.]+ \| \d+ \|"
            for page in (
                "overview",
                "trajectories",
                "reflections",
                "review queue",
                "jobs \\(failed\\)",
                "retrieval log",
            )
        ]
        + [r"\| search by state \| [\d.]+ \|"],
    ),
}


def _section(doc: str, name: str) -> str:
    found = re.findall(rf"<!-- bench:{name}:start -->\n(.*?)\n<!-- bench:{name}:end -->", doc, re.DOTALL)
    assert len(found) == 1, f"expected one {name} section, found {len(found)}"
    return found[0]


def _tables_are_whole(section: str) -> None:
    """Every row of every table has as many cells as its header."""
    width = None
    for line in section.splitlines():
        if not line.startswith("|"):
            width = None
        elif width is None:
            width = line.count("|")
        else:
            assert line.count("|") == width, f"ragged table row: {line}"


def test_every_benchmark_has_expectations() -> None:
    assert set(EXPECTED) == set(BENCHMARKS)


@pytest.mark.slow
@pytest.mark.parametrize("name", BENCHMARKS)
def test_smoke_run_writes_its_section(name: str, tmp_path: Path) -> None:
    out = tmp_path / "benchmarks.md"
    proc = subprocess.run(
        [sys.executable, "-m", "bench", "--smoke", "--only", name, "--out", str(out)],
        cwd=REPO,
        env={**os.environ, **OFFLINE},
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stderr[-6000:]
    assert f"results: {out}" in proc.stderr
    doc = out.read_text()
    assert doc.startswith(DOC_HEADER.split("\n", 1)[0])
    section = _section(doc, name)
    assert f"--smoke --out {out}" in section  # the reproducing command
    headings, rows = EXPECTED[name]
    lines = section.splitlines()
    for heading in headings:
        assert heading in lines, f"{heading!r} missing from the {name} section"
    for row in rows:
        assert any(re.match(row, line) for line in lines), f"no row matching {row!r} in the {name} section"
    _tables_are_whole(section)
    for other in set(BENCHMARKS) - {name}:
        assert f"<!-- bench:{other}:start -->" not in doc
