"""One markdown row per experiment, per agent: success in the first block and over
the second half of the run (mean ± std across runs), with the mean episode length
and score over the second half.

    python -m examples.summarize examples/results/*.json
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path


def _mean_std(values: list[float]) -> str:
    std = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{statistics.fmean(values):.2f} ± {std:.2f}"


def row(path: Path) -> tuple[list[str], str]:
    data = json.loads(path.read_text())
    exp = data["experiment"]
    block = data["curves"][0]["block"]
    cells = [exp["env_name"], str(len(next(iter(data["results"].values()))))]
    agents = list(data["results"])
    for agent in agents:
        runs = data["results"][agent]
        half = len(runs[0]) // 2
        first = [statistics.fmean(e["success"] for e in r[:block]) for r in runs]
        last = [statistics.fmean(e["success"] for e in r[half:]) for r in runs]
        steps = [statistics.fmean(e["steps"] for e in r[half:]) for r in runs]
        score = [statistics.fmean(e["reward"] for e in r[half:]) for r in runs]
        cells.append(
            f"{_mean_std(first)} → **{_mean_std(last)}** "
            f"({statistics.fmean(steps):.1f} steps, score {statistics.fmean(score):.2f})"
        )
    return agents, "| " + " | ".join(cells) + " |"


def main(paths: list[str]) -> int:
    rows = [row(Path(p)) for p in paths]
    agents = rows[0][0]
    print("| experiment | runs | " + " | ".join(f"{a}: first block → second half" for a in agents) + " |")
    print("|---" * (2 + len(agents)) + "|")
    for _, line in rows:
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
