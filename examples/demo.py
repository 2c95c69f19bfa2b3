"""The Reflexa demo: an agent whose only memory is Reflexa gets better with experience.

    python examples/demo.py

Starts a throwaway Reflexa (``reflexa serve`` on a temporary data directory and a
free port), plays a short learning run on BabyAI GoToLocal (a fixed pool of worlds)
with the Reflexa agent and its two baselines (memoryless, random), prints the
learning curve and writes the plot (default ``docs/learning/demo.png``). Under a
minute on two cores. Needs ``pip install -e clients/python -e '.[examples]'``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script: make the `examples` package importable
    sys.path.insert(0, str(ROOT))

from examples.learning import main as learning_main  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python examples/demo.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--episodes", type=int, default=45)
    p.add_argument("--seed-count", type=int, default=1, help="independent runs")
    p.add_argument("--plot", type=Path, default=ROOT / "docs" / "learning" / "demo.png")
    p.add_argument("--out", type=Path, default=ROOT / "examples" / "results" / "demo")
    args = p.parse_args(argv)
    return learning_main(
        [
            "--env", "babyai-goto",
            "--view", "scene",
            "--regime", "pool",
            "--pool-size", "3",
            "--episodes", str(args.episodes),
            "--block", "9",
            "--seeds", str(args.seed_count),
            "--out", str(args.out),
            "--plot", str(args.plot),
        ]
    )  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
