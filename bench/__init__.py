"""Benchmarks of the Reflexa server, as suites (`python -m bench`, or one suite:
`python -m bench.ingest`).

Each suite is a package, bench/<suite>/, with `main.py` (`main(argv)`: `--quick`,
`--smoke`, `--out PATH.md`), a `report.py` that renders its section (and imports
nothing from main), and modules for its workload and its measured parts. What the
suites share lives in bench/common (databases, processes, cpu, latency, machine,
output, plots, pyspy, agent_states). The suites start real server processes against
throwaway databases and call the HTTP API; the in-process raw floors call public
names of the server packages only. They measure; they never assert on timings.

Results: each suite's generated section lives in docs/benchmarks/<suite>.md (what
`--out` rewrites); docs/benchmarks.md holds the prose and links to them.
"""

from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
