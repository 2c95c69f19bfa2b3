"""The supervised warm-up every condition of a seed starts from: it teaches the
format and how to read a hint, never the family's rule.

Warm-up worlds are doors worlds with rules of their own (a fresh random mapping
object → door each), whose random-policy episodes are stored in a namespace of
their own, so Reflexa's memory of a world holds hints about that world only. An
example is a step of a new episode in that world: its prompt with the memory block
Reflexa renders (target: the world's door for the room, cross-entropy), or its
plain prompt (target: uniform over the doors, so that without a hint the policy
starts as a coin toss). A world kept out of training measures how well the policy
reads hints (greedy accuracy with the memory block) and that it does not act on
the plain prompt (accuracy near 1/3).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import torch
from reflexa import Client

from examples.common.searchable import wait_searchable
from examples.common.tiny_lm import ActionPolicy
from examples.trainer_ablation.doors import DOORS, OBJECTS, Episode, Family, Task, every_room
from examples.trainer_ablation.episodes import MEMORY_PROMPT, PLACEHOLDER

BATCH = 32
LEARNING_RATE = 1e-3
TARGET = 0.7  # hint accuracy on the held-out world that ends the warm-up early


@dataclass(frozen=True)
class WarmupSize:
    # 4 worlds × 96 probes left hint accuracy at chance (0.36 after 1,000 steps, seed 0);
    # 12 × 192 reached 0.80 at 1,400 steps: reading a hint needs many different worlds.
    worlds: int = 12  # training worlds; one more is held out
    tasks_per_world: int = 16
    episodes_per_task: int = 3
    probes_per_world: int = 192
    max_steps: int = 2000
    check_every: int = 100


FULL = WarmupSize()
SMOKE = WarmupSize(worlds=1, tasks_per_world=3, episodes_per_task=1, probes_per_world=8, max_steps=4, check_every=2)


@dataclass(frozen=True)
class Example:
    prompt: list[int]
    door: int | None  # None: the plain prompt, target uniform


@dataclass(frozen=True)
class WarmupReport:
    steps: int
    hint_accuracy: float  # held-out world, greedy, with the memory block
    plain_accuracy: float  # held-out world, greedy, plain prompt
    informative_share: float  # held-out probes whose memory names a door that opened for the object
    final_loss: float


def world(seed: int, w: int, size: WarmupSize) -> Family:
    rng = random.Random(f"warmup/{seed}/{w}")
    rule = {o: rng.choice(DOORS) for o in OBJECTS}
    rooms = every_room()
    tasks = tuple(Task(f"w{w}x{i:02d}", tuple(rng.sample(rooms, 3))) for i in range(size.tasks_per_world))
    return Family(seed=-1, rule=rule, train=tasks, held_out=())


def _store_random_episodes(
    client: Client, namespace: str, family: Family, size: WarmupSize, rng: random.Random
) -> None:
    items = []
    for task in family.train:
        for e in range(size.episodes_per_task):
            ep, steps = Episode(family, task), []
            while not ep.done:
                observation, door = ep.observation(), rng.choice(DOORS)
                result, reward = ep.step(door)
                step = {"state": {"observation": observation}, "action": door, "result": result, "reward": reward}
                steps.append(step)
            items.append(
                {
                    "id": f"{task.id}-e{e}",
                    "task": task.text,
                    "steps": steps,
                    "outcome": {"success": ep.success, "reward": ep.reward},
                }
            )
    client.create_trajectories(namespace, items)
    wait_searchable(client, namespace, items[0]["steps"][0]["state"]["observation"])  # before the probes read it


@dataclass(frozen=True)
class Probe:
    memory: list[int]  # the prompt with Reflexa's memory block
    plain: list[int]
    door: int  # the world's door for the room
    informative: bool  # the block shows this object's room and a door that opened


def _probes(
    client: Client, namespace: str, family: Family, policy: ActionPolicy, size: WarmupSize, rng: random.Random
) -> list[Probe]:
    """Prompts at random steps of new episodes (a random history before them)."""
    inline, truth = [], []
    for p in range(size.probes_per_world):
        task = rng.choice(family.train)
        ep, steps = Episode(family, task), []
        for _ in range(rng.randrange(3)):
            if ep.done:
                break
            observation, door = ep.observation(), rng.choice(DOORS)
            result, _ = ep.step(door)
            steps.append({"state": {"observation": observation}, "action": door, "result": result})
        if ep.done:
            continue
        room = task.rooms[ep.room]
        steps.append({"state": {"observation": ep.observation()}, "action": PLACEHOLDER})
        inline.append({"id": f"probe-{p}", "task": task.text, "steps": steps})
        truth.append((len(steps) - 1, family.door(room), room[1]))
    answer = client.distill_contexts(
        namespace, inline, [MEMORY_PROMPT], leakage={"allow_same_task": True}, include=["text"]
    )
    out = []
    for contexts, (index, door, thing) in zip(answer.trajectories, truth, strict=True):
        here = next(c for c in contexts.steps if c.index == index)
        memory = here.teachers["memory"].text or ""
        out.append(
            Probe(
                policy.context_ids(memory),
                policy.context_ids(here.plain.text or ""),
                DOORS.index(door),
                f"lies a {thing}" in memory and f"the {door} door opens" in memory,
            )
        )
    return out


def _accuracy(policy: ActionPolicy, prompts: list[list[int]], doors: list[int]) -> float:
    chosen = policy.greedy(prompts)
    return sum(a == d for a, d in zip(chosen, doors, strict=True)) / max(len(doors), 1)


def warm_up(client: Client, policy: ActionPolicy, seed: int, size: WarmupSize, namespace_prefix: str) -> WarmupReport:
    """Train until the held-out world's hint accuracy reaches TARGET (checked every
    `check_every` steps) or `max_steps`."""
    rng = random.Random(f"warmup-episodes/{seed}")
    train: list[Example] = []
    held: list[Probe] = []
    for w in range(size.worlds + 1):
        namespace = f"{namespace_prefix}-w{w}"
        client.create_namespace(namespace)
        family = world(seed, w, size)
        _store_random_episodes(client, namespace, family, size, rng)
        probes = _probes(client, namespace, family, policy, size, rng)
        if w == size.worlds:
            held = probes
            continue
        for probe in probes:
            train += [Example(probe.memory, probe.door), Example(probe.plain, None)]
    optimizer = torch.optim.Adam(policy.model.parameters(), lr=LEARNING_RATE)
    order = random.Random(f"warmup-order/{seed}")
    doors = [p.door for p in held]
    loss_value, done, hint = float("nan"), 0, 0.0
    while done < size.max_steps:
        batch = order.sample(train, min(BATCH, len(train)))
        logprobs = policy.action_logprobs([e.prompt for e in batch])
        terms = [
            -logprobs[i, e.door] if e.door is not None else -logprobs[i].mean()  # uniform target: mean log-prob
            for i, e in enumerate(batch)
        ]
        loss = torch.stack(terms).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        loss_value, done = float(loss.detach()), done + 1
        if done % size.check_every == 0:
            hint = _accuracy(policy, [p.memory for p in held], doors)
            if hint >= TARGET:
                break
    return WarmupReport(
        steps=done,
        hint_accuracy=_accuracy(policy, [p.memory for p in held], doors),
        plain_accuracy=_accuracy(policy, [p.plain for p in held], doors),
        informative_share=sum(p.informative for p in held) / max(len(held), 1),
        final_loss=loss_value,
    )
