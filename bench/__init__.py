"""Benchmarks of the Reflexa server, run as modules (`python -m bench.ingest`).

They start real server processes against throwaway databases and write their
results into their own marked section of docs/benchmarks.md. They measure; they
never assert on timings (that is what a benchmark is for, not a test).

What the benchmarks share: bench.databases (throwaway SQLite and PostgreSQL
databases), bench.processes (uvicorn servers and `reflexa worker` processes),
bench.cpu (who used the CPU during a measured window), bench.latency (percentiles),
bench.machine (what the run measured on), bench.output (`--out` and the marked
sections) and bench.agent_states (the synthetic agent states every benchmark sends).
"""

from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
