"""The task family of the ablation, "doors": corridors of rooms whose one open door
follows a hidden rule, discoverable only by trying.

A room has a look (dusty, bright, …), one object on the floor and three doors; the
open door's colour is fixed by the object, through a mapping object → colour drawn
once per family seed and stated nowhere. A wrong door is locked and the episode
goes on within its step budget. Every possible room (look × object) goes to the
training pool or the never-trained pool, and each split's tasks are drawn from its
own pool: a never-trained task has no room seen in training, so only the rule
carries over.

Everything is a pure function of the family seed.
"""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass, field

OBJECTS = ("lamp", "key", "map", "coin", "rope", "bell", "cup", "book")
LOOKS = ("dusty", "bright", "cold", "quiet", "narrow", "wide", "dark", "warm")
DOORS = ("red", "blue", "green")
ROOMS_PER_TASK = 3
STEP_BUDGET = 4
TRY_COST = 0.1  # outcome reward lost per locked door tried
HELD_OUT_LOOKS = 3  # of each object's 8 rooms, kept for never-trained tasks

Room = tuple[str, str]  # (look, object): the object decides


@dataclass(frozen=True)
class Task:
    id: str
    rooms: tuple[Room, ...]

    @property
    def text(self) -> str:
        """The task as the agent (and Reflexa) sees it: names the corridor, not the doors."""
        return f"cross corridor {self.id}: pass all {len(self.rooms)} rooms"


@dataclass(frozen=True)
class Family:
    seed: int
    rule: dict[str, str]  # object -> the colour of the door it opens
    train: tuple[Task, ...]
    held_out: tuple[Task, ...]

    def door(self, room: Room) -> str:
        return self.rule[room[1]]


def every_room() -> list[Room]:
    """Each look with each object (64 rooms)."""
    return list(itertools.product(LOOKS, OBJECTS))


def make_family(seed: int, n_train: int = 48, n_held_out: int = 24) -> Family:
    """The rule and the tasks of one family. Rooms are drawn per task without
    repetition inside a task; a split's rooms recur across its tasks."""
    rng = random.Random(f"doors/{seed}")
    objects = list(OBJECTS)
    rng.shuffle(objects)
    rule = {o: DOORS[i % len(DOORS)] for i, o in enumerate(objects)}  # 3, 3 and 2 objects per colour
    held_rooms: list[Room] = []
    train_rooms: list[Room] = []
    for thing in OBJECTS:  # each object keeps HELD_OUT_LOOKS of its looks for never-trained rooms
        looks = list(LOOKS)
        rng.shuffle(looks)
        held_rooms += [(look, thing) for look in looks[:HELD_OUT_LOOKS]]
        train_rooms += [(look, thing) for look in looks[HELD_OUT_LOOKS:]]

    def tasks(pool: list[Room], n: int, prefix: str) -> tuple[Task, ...]:
        return tuple(Task(f"{prefix}{i:02d}", tuple(rng.sample(pool, ROOMS_PER_TASK))) for i in range(n))

    return Family(seed, rule, tasks(train_rooms, n_train, "t"), tasks(held_rooms, n_held_out, "h"))


def describe(room: Room) -> str:
    look, thing = room
    return f"a {look} room. on the floor lies a {thing}"


@dataclass
class Episode:
    """One attempt at a task under the family's rule."""

    family: Family
    task: Task
    room: int = 0
    steps: int = 0
    wasted: int = 0
    tried: list[str] = field(default_factory=list)  # locked doors tried in this room

    @property
    def done(self) -> bool:
        return self.success or self.steps >= STEP_BUDGET

    @property
    def success(self) -> bool:
        return self.room == len(self.task.rooms)

    def observation(self) -> str:
        room = self.task.rooms[self.room]
        text = f"room {self.room + 1} of {len(self.task.rooms)}: {describe(room)}. doors: {', '.join(DOORS)}."
        if self.tried:
            text += f" locked: {', '.join(self.tried)}."
        return text

    def step(self, door: str) -> tuple[str, float]:
        """(what happened, the step's reward: 1 for passing a room, else 0)."""
        if self.done:
            raise ValueError("the episode is over")
        if door not in DOORS:
            raise ValueError(f"unknown door {door!r}")
        self.steps += 1
        if door == self.family.door(self.task.rooms[self.room]):
            self.room += 1
            self.tried = []
            return f"the {door} door opens.", 1.0
        self.wasted += 1
        self.tried.append(door)
        return f"the {door} door is locked.", 0.0

    @property
    def reward(self) -> float:
        """The share of rooms passed minus TRY_COST per locked door tried, at least 0."""
        return round(max(0.0, self.room / len(self.task.rooms) - TRY_COST * self.wasted), 6)
