"""The environments the examples run on, by name. Imports are lazy: each game's
package (and TextWorldExpress's JVM) is loaded only when that game is asked for."""

from __future__ import annotations

from examples.common.env_api import TextEnv

ENVS = ("babyai-goto", "twx-coin", "twx-twc", "twx-cookingworld")


def make_env(name: str, *, view: str = "scene", level: str | None = None, max_steps: int | None = None) -> TextEnv:
    """``max_steps``: the episode's step limit (default: the game's own in these examples)."""
    limit = {"max_steps": max_steps} if max_steps else {}
    if name == "babyai-goto":
        from examples.babyai.env import BabyAIGoTo

        return BabyAIGoTo(level or "BabyAI-GoToLocal-v0", view=view, **limit)
    if name.startswith("twx-"):
        from examples.twx.env import TextWorldExpress

        return TextWorldExpress(name.removeprefix("twx-"), **limit)
    raise ValueError(f"unknown environment {name!r}; one of {ENVS}")
