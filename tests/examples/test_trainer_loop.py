"""examples/trainer_loop.py end to end, self-contained: two iterations of the loop
start their own Reflexa (``reflexa serve`` on SQLite, hashing embedder) and teacher
endpoint (the policy over vLLM's completions protocol), and every step of the loop
goes through the public client: ingest, snapshot, teacher contexts, teacher
scoring, advantages, then the policy-gradient update."""

from __future__ import annotations

import io
import math

from examples import trainer_loop

GROUP = 4


def test_two_iterations_self_contained() -> None:
    out = io.StringIO()
    args = trainer_loop.parse_args(["--self-contained", "--iterations", "2", "--group-size", str(GROUP)])
    result = trainer_loop.train(args, out)

    # The loop completed, and every iteration's update moved the policy.
    assert [r["iteration"] for r in result.history] == [1, 2]
    assert all(r["parameter_change"] > 0 for r in result.history)
    assert result.parameter_change > 0

    # Reflexa scored every step under both teachers with the endpoint started here:
    # one sequence per step, teacher and action word (the teacher's distribution over
    # the actions, renormalised as the student's is).
    rollouts = len(trainer_loop.TASKS) * GROUP
    steps = sum(round(r["steps"] * rollouts) for r in result.history)
    assert result.teacher.sequences == steps * len(trainer_loop.TEACHER_NAMES) * len(trainer_loop.ACTIONS)

    # The diagnostics are finite and in range; order consistency needs a sibling pair
    # with different rewards, which a random policy's groups have.
    for r in result.history:
        assert 0 <= r["reward"] <= 1 and 0 <= r["success"] <= 1 and 1 <= r["steps"] <= 3
        assert r["clipped_tokens_share"] is not None and 0 <= r["clipped_tokens_share"] <= 1
        assert r["length_correlation"] is None or -1 - 1e-9 <= r["length_correlation"] <= 1 + 1e-9
        for name in ("token_reward_mean", "advantage_std", "entropy"):
            assert math.isfinite(r[name]), (name, r)
        assert (r["order_consistency"] is None) == (not r["order_pairs"])
    assert any(r["order_pairs"] for r in result.history)
    assert all(0 <= r["order_consistency"] <= 1 for r in result.history if r["order_pairs"])

    # What was printed: a header, then one row per iteration whose every number is finite.
    lines = out.getvalue().splitlines()
    header = next(i for i, line in enumerate(lines) if line.split()[:3] == ["it", "reward", "success"])
    columns = lines[header].split()
    rows = [dict(zip(columns, line.split(), strict=True)) for line in lines[header + 1 :]]
    assert [row["it"] for row in rows] == ["1", "2"]
    for row, record in zip(rows, result.history, strict=True):
        for name, value in row.items():
            if value != "n/a":
                assert math.isfinite(float(value)), (name, value)
        assert float(row["reward"]) == round(record["reward"], 3)
        assert (row["order"] == "n/a") == (record["order_consistency"] is None)
        for name in ("clip", "r_mean", "A_std", "H"):
            assert row[name] != "n/a", name
