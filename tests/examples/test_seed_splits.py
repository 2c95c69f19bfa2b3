"""Worlds come from one split only; a seed outside it is refused, never replaced."""

from __future__ import annotations

import shutil

import pytest

from examples.babyai.env import BabyAIGoTo
from examples.common.env_api import SeedSplits
from examples.common.runner import worlds


def test_overlapping_ranges_are_refused() -> None:
    with pytest.raises(ValueError, match="overlap"):
        SeedSplits(train=range(0, 10), dev=range(5, 15), test=range(20, 30))


def test_babyai_refuses_a_seed_of_another_split() -> None:
    env = BabyAIGoTo(max_steps=5)
    env.reset(0, "train")
    with pytest.raises(ValueError, match="not in the test split"):
        env.reset(0, "test")


def test_regimes_draw_worlds_from_the_split() -> None:
    env = BabyAIGoTo(max_steps=5)
    pool = worlds(env, "pool", "dev", run_seed=1, episodes=12, pool_size=3)
    assert len(set(pool)) == 3 and pool[:3] * 4 == pool
    novel = worlds(env, "novel", "test", run_seed=1, episodes=12, pool_size=3)
    assert len(set(novel)) == 12 and all(s in env.splits.ranges["test"] for s in novel)


@pytest.mark.skipif(shutil.which("java") is None, reason="TextWorldExpress runs on a JVM")
def test_textworld_express_refuses_an_out_of_range_seed() -> None:
    from examples.twx.env import TextWorldExpress

    env = TextWorldExpress("coin")
    try:
        # TWX itself would quietly make some game for seed 5000 in the train fold.
        with pytest.raises(ValueError, match="not in the train split"):
            env.reset(5000, "train")
        obs = env.reset(10000, "dev")
        assert "coin" in env.task and obs.actions
    finally:
        env.close()


def test_babyai_keeps_the_level_step_limit_unless_given_one() -> None:
    env = BabyAIGoTo("BabyAI-GoToLocal-v0")
    obs = env.reset(3, "train")
    assert env.max_steps == 64  # GoToLocal's own limit, known once a world is made
    assert obs.actions == ("turn left", "turn right", "move forward")
    assert not env.step("turn left").done
    assert BabyAIGoTo(max_steps=5).max_steps == 5
