"""BabyAI GoTo levels (``minigrid``) as a :class:`~examples.common.env_api.TextEnv`.

The agent gets the mission as its subgoal and a text description of its egocentric
view; it may turn left, turn right or move forward (GoTo needs nothing else: the
level is solved the moment the agent faces its target).
"""

from __future__ import annotations

import contextlib
import io

import gymnasium as gym
import minigrid  # noqa: F401  (registers the BabyAI-* ids with gymnasium)

from examples.babyai.describe import describe_scene, describe_target
from examples.common.env_api import Observation, SeedSplits, Transition

ACTIONS = {"turn left": 0, "turn right": 1, "move forward": 2}

# MiniGrid has no train/dev/test seeds of its own; these disjoint ranges are ours.
SPLITS = SeedSplits(train=range(0, 1_000_000), dev=range(1_000_000, 2_000_000), test=range(2_000_000, 3_000_000))


class BabyAIGoTo:
    def __init__(
        self, level: str = "BabyAI-GoToLocal-v0", *, view: str = "scene", max_steps: int | None = None
    ) -> None:
        if view not in ("scene", "target"):
            raise ValueError(f"view must be 'scene' or 'target', not {view!r}")
        self.level = level
        self.view = view
        self.splits = SPLITS
        # One label for the family: exemplars of every world of the level merge by state.
        self.name = f"{level}:{view}"
        self._env = gym.make(level)
        self._limit = max_steps
        self._mission = ""
        self._steps = 0
        self._start: tuple[int, ...] = (0, 0)

    @property
    def max_steps(self) -> int:
        """The step limit: ours if given, else the level's own (known once a world is made)."""
        return self._limit or int(self._env.unwrapped.max_steps)

    @property
    def task(self) -> str:
        return self._mission

    def reset(self, world: int, split: str) -> Observation:
        self.splits.check(split, world)
        with contextlib.redirect_stdout(io.StringIO()):  # the level generator prints its rejected samples
            obs, _ = self._env.reset(seed=world)
        self._mission = obs["mission"]
        self._steps = 0
        self._start = tuple(int(v) for v in self._env.unwrapped.agent_pos)
        return self._observe(obs)

    def _observe(self, obs: dict) -> Observation:
        if self.view == "scene":
            text = describe_scene(obs["image"], int(obs["direction"]))
        else:
            text = describe_target(obs["image"], obs["mission"])
        return Observation(text=text, subgoal=obs["mission"], actions=tuple(ACTIONS), tracking=self._odometry())

    def _odometry(self) -> str:
        """Where the agent is relative to its start, as it could count it itself
        (every forward step that was not blocked, along its known heading). A
        stretch of wall looks the same all along; this tells its places apart."""
        x, y = (int(v) for v in self._env.unwrapped.agent_pos)
        dx, dy = x - self._start[0], y - self._start[1]
        east = f"{abs(dx)} {'east' if dx >= 0 else 'west'}"
        south = f"{abs(dy)} {'south' if dy >= 0 else 'north'}"
        return f"Position from the start: {east}, {south}."

    def step(self, action: str) -> Transition:
        before = tuple(self._env.unwrapped.agent_pos)
        obs, reward, terminated, truncated, _ = self._env.step(ACTIONS[action])
        self._steps += 1
        success = bool(terminated and reward > 0)
        truncated = bool(truncated or (self._steps >= self.max_steps and not terminated))
        if success:
            result = "Reached the target."
        elif action == "move forward" and tuple(self._env.unwrapped.agent_pos) == before:
            result = "Blocked: did not move."
        else:
            result = "Moved forward." if action == "move forward" else f"Turned {action.split()[-1]}."
        return Transition(
            observation=self._observe(obs),
            result=result,
            reward=1.0 if success else 0.0,  # the task's own reward shrinks with time; return-to-go discounts anyway
            done=success or bool(terminated) or truncated,
            success=success,
            truncated=truncated and not success,
        )

    def close(self) -> None:
        self._env.close()
