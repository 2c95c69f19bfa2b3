"""The training ablation's command at its smoke size, end to end against a real
`reflexa serve`: every condition runs from the seed's warm-up checkpoint, each
run's curve and diagnostics are written, and the summary table and plot exist. The
pre-registered statistics (t-interval, updates to the level with censoring, the
verdict rule) are checked by hand."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from examples.trainer_ablation import report
from examples.trainer_ablation.__main__ import main
from examples.trainer_ablation.conditions import CONDITIONS


def test_the_smoke_size_runs_every_condition(tmp_path: Path) -> None:
    assert main(["--smoke", "--out", str(tmp_path)]) == 0
    runs = {p.stem: json.loads(p.read_text()) for p in (tmp_path / "runs").glob("*.json")}
    assert set(runs) == {f"{name}-s0" for name in CONDITIONS}
    for name in CONDITIONS:
        run = runs[f"{name}-s0"]
        assert [u for u, _ in run["evaluations"]] == [0, 1, 2]
        assert all(0.0 <= s <= 1.0 for _, s in run["evaluations"]) and 0.0 <= run["held_out"] <= 1.0
        assert len(run["updates"]) == 2
        for update in run["updates"]:
            assert 0 < update["reflexa_seconds"] < update["seconds"]
    # the same warm-up checkpoint and tasks: every condition starts from the same evaluation
    assert len({runs[f"{name}-s0"]["evaluations"][0][1] for name in CONDITIONS}) == 1
    table = (tmp_path / "summary.md").read_text()
    assert all(f"| {name} |" in table for name in CONDITIONS)
    assert (tmp_path / "success.png").stat().st_size > 1000
    warm = json.loads((tmp_path / "warmup.json").read_text())
    assert warm["0"]["steps"] in (2, 4) and 0.0 <= warm["0"]["hint_accuracy"] <= 1.0  # early stop at the target
    assert len({run["warmup"] for run in runs.values()}) == 1
    # a rerun keeps what was written, and starts from the saved warm-up checkpoint
    checkpoint = tmp_path / "checkpoints" / "warmup-s0.pt"
    kept = (checkpoint, tmp_path / "warmup.json", tmp_path / "runs" / "grpo-s0.json")
    written = {p: p.stat().st_mtime_ns for p in kept}
    assert main(["--smoke", "--out", str(tmp_path), "--conditions", "grpo,seed"]) == 0
    assert {p: p.stat().st_mtime_ns for p in written} == written
    # a run from another checkpoint is run again from this one; the table never mixes them
    seed_run = tmp_path / "runs" / "seed-s0.json"
    seed_run.write_text(json.dumps({**runs["seed-s0"], "warmup": "0" * 16}))
    with pytest.raises(ValueError, match="different warm-up checkpoints"):
        report.summarise([runs["grpo-s0"], json.loads(seed_run.read_text())], 2, 1)
    assert main(["--smoke", "--out", str(tmp_path), "--conditions", "grpo,seed"]) == 0
    assert json.loads(seed_run.read_text())["warmup"] == runs["grpo-s0"]["warmup"]
    assert (tmp_path / "runs" / "grpo-s0.json").stat().st_mtime_ns == written[tmp_path / "runs" / "grpo-s0.json"]


def test_the_interval_is_the_t_interval() -> None:
    i = report.interval([10.0, 20.0, 30.0])  # s = 10, t(0.975, 2) = 4.303
    assert i.mean == 20.0 and i.half == pytest.approx(4.303 * 10 / math.sqrt(3))
    assert math.isnan(report.interval([5.0]).half) and report.interval([]).n == 0


def test_updates_to_the_level_censors_a_run_that_never_gets_there() -> None:
    assert report.updates_to_level([(0, 0.1), (5, 0.79), (10, 0.8), (15, 0.9)], 60, 5) == (10.0, True)
    assert report.updates_to_level([(0, 0.1), (60, 0.5)], 60, 5) == (65.0, False)


def test_the_verdict_rule() -> None:
    def s(values: list[float]) -> dict[str, object]:
        return {"updates_to_level": report.interval(values)}

    summary = {"grpo": s([40, 45, 50, 55, 60]), "fast": s([20, 22, 25, 21, 24]), "close": s([38, 50, 45, 52, 41])}
    summary["slow"] = s([65, 65, 65, 65, 65])
    assert report.verdict(summary, "fast") == "faster than grpo"
    assert report.verdict(summary, "close") == "no difference shown"
    assert report.verdict(summary, "slow") == "slower than grpo"
    assert report.verdict(summary, "grpo") == "baseline"
