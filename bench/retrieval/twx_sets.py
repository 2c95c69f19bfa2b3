"""Labelled recall sets from TextWorldExpress states (games coin, twc, mapreader).

States. For each game, random walks (fixed seeds: `random.Random(seed)` picks each
action, worlds are the game's train seeds 0..worlds-1) collect the state text the
TWX example uses (examples/twx/env.py: "look around" plus the inventory). The
state-preserving commands (look around, inventory, task, read map) are left out of
the walk. Each distinct state is stored once, with the walk's action from it.

Queries.

- exact: a stored state, verbatim. Right answer: that state (no other stored state
  has the same text). The check "never losing an exact match" is exact state @1.
- near: a stored state (the target) with one word changed. The replacement comes
  from the game's own word paradigm: the pairs (a, b) of words found at the same
  token position in two stored states of the same length at most three words apart,
  paired as a namespace's calibration pairs them (`near_pairs` of
  service/retrieval/calibration.py): another room, item, direction, open / closed...;
  and the four exit directions
  for one another (so that small walks have words to change too): the query reads
  like a state of the game that was not stored. A query whose text is stored is dropped.
  Targets are drawn first from the stored states that have a one-word distractor:
  another stored state of the same length differing from them in one word (the
  same room with another item or another door state: the hard case for dense
  retrieval); the report counts those queries.
- Labelling rule (as for the grid sets): the right answers of a near query are all
  the stored states at the least number of token positions from it (the target is
  one word away, so the least is 1; any other stored state one word from the query
  is as right: those queries are counted as ambiguous).

TWX look texts have no digits (counts are words, "one part of the room"), so these
sets vary words only; the grid-numbers sets cover numbers.
"""

from __future__ import annotations

import random
from collections import defaultdict
from typing import NamedTuple

from service.retrieval.calibration import near_pairs
from store.lexical import replace_token, tokens

# (game parameters): small worlds with distractor items and doors, so one room is seen
# with different items, door states and inventories.
TWX_GAMES = {
    "coin": "numLocations=6,numDistractorItems=3,includeDoors=1,limitInventorySize=0",
    "twc": "numLocations=3,numItemsToPutAway=3,includeDoors=1,limitInventorySize=0",
    "mapreader": "numLocations=8,maxDistanceApart=4,includeDoors=0,maxDistractorItemsPerLocation=2",
}
DIRECTIONS = {"north", "south", "east", "west"}
DISTRACTOR_ACTION = "(distractor: no action)"
STILL = {"look around", "inventory", "task", "read map"}  # commands that do not change the state


class TwxPairs(NamedTuple):
    memory: list[tuple[str, str]]  # (state, action)
    targets: list[tuple[tuple[str, str], str]]  # ((stored state, action), near query text)


def available() -> bool:
    try:
        import textworld_express  # noqa: F401
    except ImportError:
        return False
    return True


def twx_states(game: str, worlds: int, steps: int, seed: int) -> list[tuple[str, str]]:
    """Distinct (state, action) from one random walk per world (fixed seeds)."""
    from textworld_express import TextWorldExpressEnv  # starts a JVM

    rng = random.Random(f"{game}-{seed}")
    env = TextWorldExpressEnv(envStepLimit=steps + 10)
    memory: dict[str, str] = {}
    try:
        for world in range(worlds):
            _, infos = env.reset(seed=world, gameFold="train", gameName=game, gameParams=TWX_GAMES[game])
            for _ in range(steps):
                text = f"{infos['look'].strip()}\n{infos['inventory'].strip()}"
                actions = sorted(a for a in infos["validActions"] if a not in STILL)
                if not actions:
                    break
                action = rng.choice(actions)
                memory.setdefault(text, action)
                _, _, done, infos = env.step(action)
                if done or infos["tasksuccess"] or infos["taskfailure"]:
                    break
    finally:
        env.close()
    return list(memory.items())


def twx_pairs(game: str, worlds: int, steps: int, n_queries: int, seed: int) -> TwxPairs:
    """The memory (walked states, then one distractor per target) and the targets with
    their near query texts; bench.retrieval.quality labels them."""
    walked = twx_states(game, worlds, steps, seed)
    rng = random.Random(seed)
    toks = [tokens(s) for s, _ in walked]
    paradigm: dict[str, set[str]] = defaultdict(set)  # word -> words seen in its place
    for word in DIRECTIONS:  # the exits: in (nearly) every state, even when no two states are near
        paradigm[word].update(DIRECTIONS - {word})
    for i, j, positions in near_pairs(toks):
        for p in positions:
            paradigm[toks[i][p]].add(toks[j][p])
            paradigm[toks[j][p]].add(toks[i][p])
    stored = {s for s, _ in walked}
    order = list(range(len(walked)))
    rng.shuffle(order)
    pairs = []  # (target index, distractor text, near query text)
    for i in order:
        if len(pairs) >= n_queries:
            break
        slots = [p for p, w in enumerate(toks[i]) if paradigm.get(w)]
        if len(slots) < 2:
            continue
        p, q = rng.sample(slots, 2)
        distractor = replace_token(walked[i][0], p, rng.choice(sorted(paradigm[toks[i][p]])))
        near = replace_token(walked[i][0], q, rng.choice(sorted(paradigm[toks[i][q]])))
        if distractor in stored or near in stored or near == distractor:
            continue
        stored.update((distractor, near))  # neither is used again
        pairs.append((i, distractor, near))
    memory = walked + [(d, DISTRACTOR_ACTION) for _, d, _ in pairs]
    return TwxPairs(memory, [(walked[i], near) for i, _, near in pairs])
