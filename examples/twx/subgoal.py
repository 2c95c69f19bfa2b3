"""The agent's internal state in TextWorldExpress: a short subgoal it derives from
the task, its inventory and what it has read. Retrieval matches it separately from
the room description, so "take the water" recalls the steps that were about water.
"""

from __future__ import annotations

import re

_RECIPE = re.compile(r"Ingredients:\s*(?P<ing>.*?)\s*Directions:\s*(?P<dir>.*)", re.S)


def held_items(inventory: str) -> list[str]:
    """Item names from TWX's inventory text ("Inventory:\\n  a coin\\n  some water")."""
    items = []
    for line in inventory.splitlines()[1:]:
        line = line.strip()
        if line and "currently empty" not in line:
            items.append(re.sub(r"^(a|an|some|the)\s+", "", line))
    return items


class Subgoals:
    """Tracks what the agent knows within one episode and names its next subgoal."""

    def __init__(self, game: str) -> None:
        self.game = game
        self.ingredients: list[str] = []
        self.directions: list[str] = []

    def read(self, text: str) -> None:
        """Called with every observation: remembers the recipe once the cookbook is read."""
        match = _RECIPE.search(text)
        if match and not self.ingredients:
            self.ingredients = [s.strip() for s in match["ing"].splitlines() if s.strip()]
            self.directions = [s.strip() for s in match["dir"].splitlines() if s.strip()]

    def current(self, inventory: str) -> str:
        held = held_items(inventory)
        if self.game == "coin":
            return "find the coin and take it"
        if self.game == "twc":
            return f"put the {held[0]} in its usual place" if held else "find an item that is out of place"
        if not self.ingredients:
            return "find the cookbook and read it"
        missing = [i for i in self.ingredients if not any(i in h for h in held)]
        if "meal" in held:
            return "eat the meal"
        if missing:
            return "collect " + ", ".join(missing)
        return "follow the recipe: " + "; ".join(self.directions)
