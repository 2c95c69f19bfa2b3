"""The ablation's task family: deterministic from its seed, the splits share no
room, the object decides every door, and a uniformly random policy succeeds with
probability exactly 1/9 (enumerated over every sequence of choices)."""

from __future__ import annotations

import itertools
from fractions import Fraction

import pytest

from examples.trainer_ablation.doors import (
    DOORS,
    OBJECTS,
    STEP_BUDGET,
    Episode,
    every_room,
    make_family,
)


def test_a_family_is_a_pure_function_of_its_seed() -> None:
    assert make_family(3) == make_family(3)
    assert make_family(3).rule != make_family(4).rule or make_family(3).train != make_family(4).train


@pytest.mark.parametrize("seed", range(5))
def test_the_splits_share_no_room_and_the_rule_uses_every_door(seed: int) -> None:
    family = make_family(seed)
    assert len(family.train) == 48 and len(family.held_out) == 24
    train_rooms = {r for t in family.train for r in t.rooms}
    held_rooms = {r for t in family.held_out for r in t.rooms}
    assert not train_rooms & held_rooms and len(train_rooms | held_rooms) <= len(every_room()) == 64
    assert all(len(set(t.rooms)) == 3 for t in family.train + family.held_out)
    assert {o for _, o in held_rooms} == set(OBJECTS) == {o for _, o in train_rooms}  # the rule carries over
    assert sorted(family.rule) == sorted(OBJECTS)
    assert sorted(list(family.rule.values()).count(d) for d in DOORS) == [2, 3, 3]
    assert len({t.text for t in family.train + family.held_out}) == 72


def test_the_object_decides_and_a_locked_door_costs_a_try() -> None:
    family = make_family(0)
    task = family.train[0]
    ep = Episode(family, task)
    look, thing = task.rooms[0]
    assert ep.observation() == f"room 1 of 3: a {look} room. on the floor lies a {thing}. doors: red, blue, green."
    wrong = next(d for d in DOORS if d != family.rule[thing])
    assert ep.step(wrong) == (f"the {wrong} door is locked.", 0.0)
    assert ep.observation().endswith(f"locked: {wrong}.") and not ep.done
    assert ep.step(family.rule[thing])[1] == 1.0 and ep.room == 1 and ep.tried == []
    for room in task.rooms[1:]:
        ep.step(family.door(room))
    assert ep.success and ep.done and ep.steps == 4
    assert ep.reward == pytest.approx(1.0 - 0.1)  # all rooms, one locked door tried
    with pytest.raises(ValueError):
        ep.step("red")


def test_a_random_policy_succeeds_one_time_in_nine() -> None:
    family = make_family(1)
    task = family.train[5]
    wins = 0
    for choices in itertools.product(DOORS, repeat=STEP_BUDGET):
        ep = Episode(family, task)
        for door in choices:
            if ep.done:
                break
            ep.step(door)
        wins += ep.success
    assert Fraction(wins, len(DOORS) ** STEP_BUDGET) == Fraction(1, 9)


def test_the_budget_ends_an_episode_and_the_reward_never_goes_negative() -> None:
    family = make_family(2)
    task = family.held_out[0]
    ep = Episode(family, task)
    wrong = next(d for d in DOORS if d != family.door(task.rooms[0]))
    for _ in range(STEP_BUDGET):
        ep.step(wrong)
    assert ep.done and not ep.success and ep.reward == 0.0
