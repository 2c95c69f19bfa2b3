"""The ablation's numbers as pre-registered (docs/trainers.md, "Does it help?"):
per condition over seeds, updates to reach the success level (censored runs
counted at budget + eval interval and reported), never-trained success, seconds
per update and Reflexa's share, the signal diagnostics; mean and a 95 % t-interval;
the table, the verdict against grpo, and the plot of success against updates."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# The conditions in the order docs/trainers.md lists them (the table's rows).
_LISTED = ("grpo", "seed", "stepopsd", "turnsight", "prefix", "fade", "memory_inference")
ORDER = {name: i for i, name in enumerate(_LISTED)}
SUCCESS_LEVEL = 0.8
MARGIN = 5  # updates: a condition beats grpo only if it is at least this much faster
# Two-sided 95 % quantiles of Student's t, by degrees of freedom (1–30).
T95 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
    2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)  # fmt: skip


@dataclass(frozen=True)
class Interval:
    mean: float
    half: float  # half-width of the 95 % interval (nan with one value)
    n: int

    @property
    def low(self) -> float:
        return self.mean - self.half

    @property
    def high(self) -> float:
        return self.mean + self.half

    def __str__(self) -> str:
        if math.isnan(self.mean):
            return "n/a"
        return f"{self.mean:.3g} ± {self.half:.2g}" if not math.isnan(self.half) else f"{self.mean:.3g}"


def interval(values: Sequence[float]) -> Interval:
    """Mean and the 95 % t-interval half-width: t_{0.975, n-1} · s / √n."""
    xs = [v for v in values if v is not None and not math.isnan(v)]
    if not xs:
        return Interval(math.nan, math.nan, 0)
    if len(xs) == 1:
        return Interval(xs[0], math.nan, 1)
    t = T95[min(len(xs) - 1, len(T95)) - 1]
    return Interval(statistics.fmean(xs), t * statistics.stdev(xs) / math.sqrt(len(xs)), len(xs))


def updates_to_level(evaluations: Sequence[Sequence[float]], budget: int, every: int) -> tuple[float, bool]:
    """The first evaluated update at which training success reaches the level, and
    whether it did; a run that never does counts as budget + every (censored)."""
    for update, success in evaluations:
        if success >= SUCCESS_LEVEL:
            return float(update), True
    return float(budget + every), False


def summarise(runs: Sequence[dict[str, Any]], budget: int, every: int) -> dict[str, dict[str, Any]]:
    """Refuses runs of one seed that started from different warm-up checkpoints: the
    conditions are compared from the same start or not at all."""
    starts: dict[int, set[str | None]] = {}
    for r in runs:
        starts.setdefault(r["seed"], set()).add(r.get("warmup"))
    mixed = sorted(seed for seed, ids in starts.items() if len(ids) > 1)
    if mixed:
        raise ValueError(f"seeds {mixed}: runs started from different warm-up checkpoints; run them again")
    by: dict[str, list[dict[str, Any]]] = {}
    for r in runs:
        by.setdefault(r["condition"], []).append(r)
    out: dict[str, dict[str, Any]] = {}
    for name, rs in by.items():
        reached = [updates_to_level(r["evaluations"], budget, every) for r in rs]
        updates = [u for r in rs for u in r["updates"]]

        def mean_of(key: str, us: list[dict[str, Any]] = updates) -> float:
            xs = [u[key] for u in us if u.get(key) is not None]
            return statistics.fmean(xs) if xs else math.nan

        out[name] = {
            "seeds": sorted(r["seed"] for r in rs),
            "updates_to_level": interval([u for u, _ in reached]),
            "reached": sum(ok for _, ok in reached),
            "held_out": interval([r["held_out"] for r in rs]),
            "final_train": interval([r["evaluations"][-1][1] for r in rs]),
            # Medians: one update held across a pause of the machine's other work (seed 0's
            # grpo, a 45-minute CI run) must not move a run's time per update.
            "seconds_per_update": interval([statistics.median([u["seconds"] for u in r["updates"]]) for r in rs]),
            "reflexa_share": statistics.median([u["reflexa_seconds"] / u["seconds"] for u in updates if u["seconds"]])
            if updates
            else math.nan,
            "order_consistency": mean_of("order_consistency"),
            "length_correlation": mean_of("length_correlation"),
            "clipped_tokens_share": mean_of("clipped_tokens_share"),
        }
    return out


def verdict(summary: dict[str, dict[str, Any]], name: str) -> str:
    """Against grpo, by the pre-registered rule."""
    if name == "grpo" or "grpo" not in summary:
        return "baseline" if name == "grpo" else "n/a"
    mine, base = summary[name]["updates_to_level"], summary["grpo"]["updates_to_level"]
    if mine.n < 2 or base.n < 2:
        return "too few seeds"
    if mine.high < base.mean and base.mean - mine.mean >= MARGIN:
        return "faster than grpo"
    if mine.low > base.mean and mine.mean - base.mean >= MARGIN:
        return "slower than grpo"
    return "no difference shown"


def table(summary: dict[str, dict[str, Any]], budget: int) -> str:
    head = (
        "| condition | seeds | updates to 0.8 (reached) | final training success | never-trained success "
        "| s / update (Reflexa share) | order consistency | length r | clipped | verdict |\n"
        "|---|---|---|---|---|---|---|---|---|---|\n"
    )

    def f(x: float) -> str:
        return "n/a" if math.isnan(x) else f"{x:.2f}"

    rows = []
    for name, s in sorted(summary.items(), key=lambda kv: ORDER.get(kv[0], len(ORDER))):
        rows.append(
            f"| {name} | {len(s['seeds'])} | {s['updates_to_level']} ({s['reached']}/{len(s['seeds'])}) "
            f"| {s['final_train']} | {s['held_out']} | {s['seconds_per_update']} ({f(s['reflexa_share'])}) "
            f"| {f(s['order_consistency'])} | {f(s['length_correlation'])} | {f(s['clipped_tokens_share'])} "
            f"| {verdict(summary, name)} |"
        )
    note = f"\nUnreached runs count as {budget} + the evaluation interval in the mean (censored).\n"
    return head + "\n".join(rows) + "\n" + note


def plot(runs: Sequence[dict[str, Any]], path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")  # files only
    import matplotlib.pyplot as plt

    by: dict[str, list[dict[str, Any]]] = {}
    for r in runs:
        by.setdefault(r["condition"], []).append(r)
    fig, ax = plt.subplots(figsize=(7, 4))
    for name, rs in by.items():
        xs = [u for u, _ in rs[0]["evaluations"]]
        points = [interval([r["evaluations"][i][1] for r in rs]) for i in range(len(xs))]
        mean = [p.mean for p in points]
        ax.plot(xs, mean, label=name)
        if len(rs) > 1:
            ax.fill_between(xs, [p.low for p in points], [p.high for p in points], alpha=0.15)
    ax.axhline(SUCCESS_LEVEL, color="gray", linestyle=":", linewidth=1)
    ax.set_xlabel("updates")
    ax.set_ylabel("greedy success, training tasks")
    ax.set_ylim(0, 1)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
