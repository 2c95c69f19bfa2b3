"""The learning-curve figure: success rate and episode length per block, mean ± std
across runs, one line per agent."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only: experiments run headless
import matplotlib.pyplot as plt  # noqa: E402

from examples.common.stats import Curve  # noqa: E402

COLORS = {"reflexa": "tab:blue", "reflexa-llm": "tab:purple", "memoryless": "tab:orange", "random": "tab:gray"}


def plot_curves(curves: Sequence[Curve], title: str, path: Path) -> Path:
    fig, (ax_s, ax_l) = plt.subplots(1, 2, figsize=(10, 3.8))
    for c in curves:
        x = [(i + 1) * c.block for i in range(len(c.success))]
        color = COLORS.get(c.agent)
        for ax, points in ((ax_s, c.success), (ax_l, c.steps)):
            mean = [p.mean for p in points]
            lo = [p.mean - p.std for p in points]
            hi = [p.mean + p.std for p in points]
            ax.plot(x, mean, marker="o", label=c.agent, color=color)
            ax.fill_between(x, lo, hi, alpha=0.15, color=color)
    ax_s.set(xlabel="episodes", ylabel=f"success rate per {curves[0].block} episodes", ylim=(-0.02, 1.02))
    ax_l.set(xlabel="episodes", ylabel="mean episode length (steps)")
    ax_s.legend(loc="best")
    for ax in (ax_s, ax_l):
        ax.grid(alpha=0.3)
    runs = curves[0].runs
    fig.suptitle(f"{title} ({runs} run{'s' if runs != 1 else ''}, mean ± std)")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
