"""PNG figures for the results files in docs/benchmarks/, drawn with matplotlib when it is installed
(`pip install -e '.[bench]'`); without it a benchmark writes its tables only.

Each function saves its figures next to the markdown file and returns their paths
relative to it, for the section to link.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any


def _pyplot() -> Any:
    if importlib.util.find_spec("matplotlib") is None:
        return None
    import matplotlib

    matplotlib.use("Agg")  # files only: no display on a benchmark machine
    import matplotlib.pyplot as plt

    return plt


def _save(plt: Any, fig: Any, out_dir: Path, name: str) -> str:
    out_dir.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(out_dir / name, dpi=110)
    plt.close(fig)
    return name


def reflect(rep: Any, out_dir: Path) -> list[str]:
    """Queue depth during each drain; oldest waiting job's age over time per load rate."""
    plt = _pyplot()
    if plt is None or not rep.drains:
        return []
    names = []
    fig, ax = plt.subplots(figsize=(8, 4))
    for d in rep.drains:
        ax.plot([s.t for s in d.timeline], [s.waiting for s in d.timeline], label=f"{d.backend}, {d.setup.label}")
    ax.set(xlabel="seconds since workers started", ylabel="jobs queued or running", title="Draining the backlog")
    ax.legend(fontsize="small")
    names.append(_save(plt, fig, out_dir, "reflect-drain.png"))
    if rep.lags:
        fig, axes = plt.subplots(1, len(rep.lags), figsize=(8 * len(rep.lags), 4), squeeze=False)
        for ax, lag in zip(axes[0], rep.lags, strict=True):
            for lv in lag.levels:
                ages = [max(s.oldest_s.values(), default=0.0) for s in lv.timeline]
                ax.plot([s.t for s in lv.timeline], ages, label=f"{lv.rate:g} trajectories/s")
            ax.axhline(lag.slo_s, color="grey", linestyle=":", label=f"SLO {lag.slo_s:g} s")
            ax.set(xlabel="seconds into the window", ylabel="oldest waiting job, s", title=f"Queue lag, {lag.backend}")
            ax.legend(fontsize="small")
        names.append(_save(plt, fig, out_dir, "reflect-lag.png"))
    return names


def retrieval(rep: Any, out_dir: Path) -> list[str]:
    """HTTP cache-miss and cache-hit latency against the raw floor, by index size."""
    plt = _pyplot()
    if plt is None or not rep.sizes:
        return []
    n = [s.n for s in rep.sizes]
    fig, ax = plt.subplots(figsize=(7, 4))
    for label, values in (
        ("HTTP p50, cache miss", [s.miss.p50_ms for s in rep.sizes]),
        ("HTTP p99, cache miss", [s.miss.p99_ms for s in rep.sizes]),
        ("HTTP p50, cache hit", [s.hit.p50_ms for s in rep.sizes]),
        ("floor p50 (encode + search)", [s.floor.total.p50_ms for s in rep.sizes]),
        ("floor p50, search alone", [s.floor.search.p50_ms for s in rep.sizes]),
    ):
        ax.plot(n, values, marker="o", label=label)
    ax.set(xscale="log", xlabel="indexed items", ylabel="ms", title="Retrieve latency vs index size")
    ax.legend(fontsize="small")
    return [_save(plt, fig, out_dir, "retrieval-latency.png")]
