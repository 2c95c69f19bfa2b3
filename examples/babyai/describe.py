"""Words for the agent's 7x7 egocentric view (MiniGrid's ``obs["image"]``).

In the view the agent stands at column 3 of the bottom row, facing up: a cell at
(column i, row j) is ``6 - j`` steps ahead and ``i - 3`` steps to the right.

Two descriptions, because the choice decides what memory can transfer:

- ``scene``: the compass heading and every visible object with exact offsets. Two
  worlds almost never share a scene, so a scene is a precise key for recalling one
  world (the pool regime) and a poor one for a new world.
- ``target``: only what the mission is about, in coarse words (the target is "far,
  slightly left"; "a wall is directly ahead"), no heading, no colours of other
  objects. Many worlds share these states, so what was learned in one applies in
  another (the never-seen regime). Words rather than numbers: a sentence embedder
  hardly separates "2 left" from "1 left", but does separate "left" from "ahead".
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
from minigrid.core.constants import IDX_TO_COLOR, IDX_TO_OBJECT

AGENT_COL, AGENT_ROW = 3, 6
HEADINGS = ("east", "south", "west", "north")  # MiniGrid's agent_dir 0..3
_BACKGROUND = {"unseen", "empty", "floor", "agent"}
MISSION = re.compile(r"go to (?:the|a) (?:(\w+) )?(ball|box|key|door)")


@dataclass(frozen=True)
class Seen:
    kind: str
    color: str
    ahead: int  # steps forward (0: beside the agent)
    right: int  # steps to the right (negative: left)

    @property
    def name(self) -> str:
        return f"{self.color} {self.kind}"


def visible_objects(image: np.ndarray) -> list[Seen]:
    """Objects in view (not walls or floor), nearest first."""
    found = []
    for col in range(image.shape[0]):
        for row in range(image.shape[1]):
            kind = IDX_TO_OBJECT[int(image[col, row, 0])]
            if kind in _BACKGROUND or kind == "wall":
                continue
            color = IDX_TO_COLOR[int(image[col, row, 1])]
            found.append(Seen(kind, color, AGENT_ROW - row, col - AGENT_COL))
    return sorted(found, key=lambda s: (abs(s.ahead) + abs(s.right), s.ahead, s.right))


def cell_ahead(image: np.ndarray) -> str:
    kind = IDX_TO_OBJECT[int(image[AGENT_COL, AGENT_ROW - 1, 0])]
    if kind in ("empty", "floor"):
        return "open floor"
    if kind == "wall":
        return "a wall"
    return f"a {IDX_TO_COLOR[int(image[AGENT_COL, AGENT_ROW - 1, 1])]} {kind}"


def wall_distance(image: np.ndarray) -> int | None:
    """Steps to the first wall straight ahead, if one is in view."""
    for steps in range(1, AGENT_ROW + 1):
        if IDX_TO_OBJECT[int(image[AGENT_COL, AGENT_ROW - steps, 0])] == "wall":
            return steps
    return None


def _offset(seen: Seen) -> str:
    side = "right" if seen.right > 0 else "left"
    parts = [f"{seen.ahead} ahead"] if seen.ahead else []
    if seen.right:
        parts.append(f"{abs(seen.right)} {side}")
    return ", ".join(parts)


def describe_scene(image: np.ndarray, heading: int) -> str:
    lines = [f"Facing {HEADINGS[heading]}. Directly ahead: {cell_ahead(image)}."]
    wall = wall_distance(image)
    lines.append(f"Wall {wall} steps ahead." if wall else "No wall in sight ahead.")
    lines += [f"{s.name}: {_offset(s)}." for s in visible_objects(image)]
    return "\n".join(lines)


def parse_mission(mission: str) -> tuple[str | None, str]:
    """``"go to the red ball"`` -> ("red", "ball"); ``"go to a key"`` -> (None, "key")."""
    match = MISSION.search(mission)
    if match is None:
        raise ValueError(f"not a GoTo mission: {mission!r}")
    return match.group(1), match.group(2)


def _direction(seen: Seen) -> str:
    if seen.ahead <= 0:
        return "beside you on the " + ("right" if seen.right > 0 else "left")
    if seen.right == 0:
        return "straight ahead"
    side = "right" if seen.right > 0 else "left"
    return f"slightly {side}" if abs(seen.right) == 1 else f"to the {side}"


def _distance(seen: Seen) -> str:
    steps = abs(seen.ahead) + abs(seen.right)
    return "next to you" if steps == 1 else "near" if steps <= 3 else "far"


def describe_target(image: np.ndarray, mission: str) -> str:
    color, kind = parse_mission(mission)
    targets = [s for s in visible_objects(image) if s.kind == kind and color in (None, s.color)]
    ahead = cell_ahead(image)
    if ahead not in ("open floor", "a wall"):
        ahead = "the target" if targets and targets[0].ahead == 1 and targets[0].right == 0 else "another object"
    wall = wall_distance(image)
    walls = "wall: " + ("right in front" if wall == 1 else "close ahead" if wall and wall <= 3 else "far ahead")
    sides = [
        side
        for side, col in (("left", AGENT_COL - 1), ("right", AGENT_COL + 1))
        if IDX_TO_OBJECT[int(image[col, AGENT_ROW, 0])] == "wall"
    ]
    if sides:
        walls += ", beside you on the " + " and ".join(sides)
    target = (
        f"The target is {_direction(targets[0])}, {_distance(targets[0])}." if targets else "The target is not in view."
    )
    # The walls make turning in place visible: without them, every turn with the
    # target out of sight would leave the description unchanged.
    return f"{target} Directly ahead: {ahead}; {walls}."
