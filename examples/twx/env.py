"""TextWorldExpress (``textworld-express``) as a :class:`~examples.common.env_api.TextEnv`.

The state is the room as "look around" describes it plus the inventory (the same
text whenever the agent is back in the same situation, which exact recall needs);
the subgoal comes from :mod:`examples.twx.subgoal`; the reward is the change of the
game's score, and the step on which the game reports a failure is flagged as the
one that caused it.

Seeds. TWX has its own train / dev / test seed ranges, queried here from the game.
Given a seed outside the fold it is asked for, TWX quietly generates some other
game instead of failing, so every reset checks the seed first and raises.
"""

from __future__ import annotations

from examples.common.env_api import Observation, SeedSplits, Transition
from examples.twx.subgoal import Subgoals

# Small worlds: big enough that wandering fails often, small enough to learn in
# tens of episodes on two CPU cores. (game parameters, step limit)
GAMES = {
    "coin": ("numLocations=9,numDistractorItems=0,includeDoors=0,limitInventorySize=0", 25),
    "twc": ("numLocations=2,numItemsToPutAway=2,includeDoors=0,limitInventorySize=0", 25),
    "cookingworld": ("numLocations=3,numIngredients=2,numDistractorItems=0,includeDoors=0,limitInventorySize=0", 40),
}


def queried_splits(env) -> SeedSplits:  # type: ignore[no-untyped-def]
    ranges = {}
    for split, seeds in (
        ("train", env.getValidSeedsTrain()),
        ("dev", env.getValidSeedsDev()),
        ("test", env.getValidSeedsTest()),
    ):
        span = range(min(seeds), max(seeds) + 1)
        if len(span) != len(set(seeds)):
            raise RuntimeError(f"TextWorldExpress {split} seeds are not contiguous; cannot guard them as a range")
        ranges[split] = span
    return SeedSplits(**ranges)


class TextWorldExpress:
    def __init__(self, game: str, *, max_steps: int | None = None, params: str | None = None) -> None:
        from textworld_express import TextWorldExpressEnv  # starts a JVM: only when asked for

        if game not in GAMES:
            raise ValueError(f"unknown TextWorldExpress game {game!r}; one of {sorted(GAMES)}")
        default_params, default_steps = GAMES[game]
        self.game = game
        self.params = params or default_params
        self.max_steps = max_steps or default_steps
        self.name = f"twx-{game}"
        # Our step limit ends episodes; the game's own must never cut in first.
        self._env = TextWorldExpressEnv(envStepLimit=self.max_steps + 10)
        self._env.load(game, self.params)
        self.splits = queried_splits(self._env)
        self._task = ""
        self._steps = 0
        self._subgoals = Subgoals(game)

    @property
    def task(self) -> str:
        return self._task

    def reset(self, world: int, split: str) -> Observation:
        self.splits.check(split, world)
        _, infos = self._env.reset(seed=world, gameFold=split, gameName=self.game, gameParams=self.params)
        props = self._env.getGenerationProperties()
        if int(props["seed"]) != world:  # belt and braces: the game must be the one asked for
            raise RuntimeError(f"TextWorldExpress made game {props['seed']} when asked for {world}")
        self._task = infos["taskDescription"]
        self._steps = 0
        self._subgoals = Subgoals(self.game)
        return self._observe(infos)

    def _observe(self, infos: dict) -> Observation:
        self._subgoals.read(infos["observation"])
        inventory = infos["inventory"].strip()
        text = f"{infos['look'].strip()}\n{inventory}"
        # The game lists valid actions in no stable order; sorted, the same state offers the same list.
        return Observation(
            text=text, subgoal=self._subgoals.current(inventory), actions=tuple(sorted(infos["validActions"]))
        )

    def step(self, action: str) -> Transition:
        observation, reward, _, infos = self._env.step(action)
        self._steps += 1
        success = bool(infos["tasksuccess"])
        failed = bool(infos["taskfailure"])
        truncated = self._steps >= self.max_steps and not (success or failed)
        return Transition(
            observation=self._observe(infos),
            result=observation.strip(),
            reward=float(reward),
            done=success or failed or truncated,
            success=success,
            truncated=truncated,
            caused_failure=failed,
        )

    def close(self) -> None:
        self._env.close()
