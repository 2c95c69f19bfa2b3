"""The synthetic agent states every benchmark of the suite sends: what an agent
observes, what it did. bench.ingest posts them as trajectory steps, bench.retrieval
indexes and queries them, bench.reflect rolls them out as RL-style trajectories.

Three families, each rendered from a structured state so that near-duplicates are
real near-duplicates (the same room with one object moved, the same grid view one
step later, the same shop page on the next product):

- text games (TextWorld / ALFWorld-like): rooms with furniture, objects and exits,
  "you open the drawer" feedback, ALFWorld task preambles;
- gridworlds (BabyAI-like): a mission and what is in view, relative positions;
- web pages (WebShop / WebArena-like): search results, product pages, admin and
  GitLab pages as accessibility-tree excerpts.

Every state comes with the action the agent took there and a short result, so an
item is a state -> action -> result exemplar as the exemplar reflector makes them.

The corpus is generated sequentially from one seed: `corpus_states(n)` is a prefix
of `corpus_states(m)` for n < m, so encoded vectors can be cached per chunk and
shared between the quick and the full run. About a quarter of the corpus are
revisits (an earlier state with one detail changed), as agents produce.

Queries are held out: each is an earlier corpus state changed in one detail and
usually rendered with other wording (a paraphrase), never equal to any corpus text;
so the server has never embedded the query text and its cache cannot answer it.

Ingest steps (`make_trajectory_steps`) are episodes of the same states, fitted to the
sizes agents log (see that section). They used to come from a word-list generator of
their own (bench/payloads.py: filler words around a room or an accessibility tree);
the sizes, JSON shapes and web / text-game split are kept (a mean step of ~845 bytes
of JSON, was ~855), so ingest numbers stay comparable.
"""

from __future__ import annotations

import copy
import hashlib
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

VERSION = "retrieval-states-v1"  # bump when the generator changes: it keys the vector cache

ROOMS = [
    "kitchen", "pantry", "bathroom", "bedroom", "living room", "cellar", "attic", "garden", "corridor",
    "study", "garage", "laundry room", "dining room", "workshop", "hallway", "library", "office", "shed",
]  # fmt: skip
FURNITURE = [
    "cabinet", "drawer", "countertop", "fridge", "microwave", "sinkbasin", "stoveburner", "shelf", "sofa",
    "bed", "desk", "garbagecan", "toaster", "coffeemachine", "dresser", "armchair", "safe", "sidetable",
    "diningtable", "bathtubbasin", "laundryhamper", "ottoman", "tvstand", "chest",
]  # fmt: skip
OBJECTS = [
    "apple", "mug", "knife", "key", "book", "candle", "soapbar", "towel", "spoon", "plate", "pan", "potato",
    "egg", "lettuce", "tomato", "bread", "cellphone", "pencil", "creditcard", "watch", "vase", "bowl", "cup",
    "fork", "kettle", "newspaper", "pillow", "laptop", "alarmclock", "keychain", "spraybottle", "winebottle",
]  # fmt: skip
ADJECTIVES = ["red", "blue", "green", "rusty", "old", "small", "wooden", "shiny", "dusty", "clean", "dirty", "golden"]
DIRECTIONS = ["north", "south", "east", "west", "up", "down"]
ALF_TASKS = ["put a", "put a clean", "put a hot", "put a cool", "examine the", "find two", "put two"]
GRID_COLORS = ["red", "green", "blue", "purple", "yellow", "grey"]
GRID_THINGS = ["ball", "box", "key", "door"]
GRID_ACTIONS = ["turn left", "turn right", "move forward", "pick up", "drop", "toggle"]
PRODUCTS = [
    "wireless mouse", "mechanical keyboard", "usb-c hub", "noise cancelling headphones", "running shoes",
    "yoga mat", "coffee grinder", "espresso machine", "air fryer", "desk lamp", "phone case", "water bottle",
    "backpack", "hiking boots", "winter jacket", "sunglasses", "office chair", "standing desk", "webcam",
    "bluetooth speaker", "smart watch", "electric toothbrush", "cast iron skillet", "chef knife",
]  # fmt: skip
BRANDS = ["Logitech", "Anker", "Sony", "Nike", "Adidas", "Philips", "Bosch", "Ikea", "Samsung", "Lenovo", "Lodge"]
SITES = {
    "Shopping Admin": ["Orders", "Customers", "Catalog", "Reports", "Marketing", "Stores"],
    "GitLab": ["Issues", "Merge requests", "Repository", "CI/CD", "Settings", "Members"],
    "Reddit": ["Forums", "Submissions", "Comments", "Wiki", "Subscribed", "Alphabetical"],
    "OpenStreetMap": ["Directions", "Search", "Layers", "History", "Export", "Edit"],
}
ENVIRONMENTS = ("textworld", "alfworld", "babyai", "webshop", "webarena")


@dataclass(frozen=True)
class AgentState:
    environment: str
    observation: str
    action: str
    result: str
    thought: str


# -- structured states --------------------------------------------------------------
# A state is a plain dict: {"family": ..., fields...}. `_mutate` changes one detail,
# `_render` turns it into text; `wording` 0 is the corpus phrasing, 1 and 2 are
# paraphrases (used by most queries).


def _a(noun: str) -> str:
    return ("an " if noun[0] in "aeiou" else "a ") + noun


def _listing(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def _obj(rng: random.Random) -> str:
    o = rng.choice(OBJECTS)
    return f"{rng.choice(ADJECTIVES)} {o}" if rng.random() < 0.4 else f"{o} {rng.randint(1, 3)}"


def _new_room(rng: random.Random) -> dict[str, Any]:
    furniture = [f"{f} {rng.randint(1, 4)}" for f in rng.sample(FURNITURE, rng.randint(3, 8))]
    on = rng.choice(furniture)
    return {
        "family": "room",
        "style": rng.randrange(3),
        "room": rng.choice(ROOMS),
        "furniture": furniture,
        "on": on,
        "objects": [_obj(rng) for _ in range(rng.randint(1, 3))],
        "exits": rng.sample(DIRECTIONS, rng.randint(1, 3)),
        "carrying": _obj(rng) if rng.random() < 0.4 else None,
        "task": f"{rng.choice(ALF_TASKS)} {rng.choice(OBJECTS)} in {rng.choice(FURNITURE)}",
        "moves": rng.randint(1, 60),
    }


def _new_grid(rng: random.Random) -> dict[str, Any]:
    target = f"{rng.choice(GRID_COLORS)} {rng.choice(GRID_THINGS[:3])}"
    mission = rng.choice(
        [
            f"pick up the {target}",
            f"go to the {target}",
            f"open the {rng.choice(GRID_COLORS)} door",
            f"put the {target} next to the {rng.choice(GRID_COLORS)} box",
        ]
    )
    seen = [
        (f"{rng.choice(GRID_COLORS)} {rng.choice(GRID_THINGS)}", rng.randint(0, 5), rng.randint(-3, 3))
        for _ in range(rng.randint(1, 3))
    ]
    return {
        "family": "grid",
        "mission": mission,
        "seen": seen,
        "wall": (rng.randint(1, 4), rng.choice(["left", "right", "ahead"])),
        "facing": rng.choice(["north", "south", "east", "west"]),
        "carrying": f"{rng.choice(GRID_COLORS)} {rng.choice(GRID_THINGS[:3])}" if rng.random() < 0.3 else None,
    }


def _asin(rng: random.Random) -> str:
    return "B0" + "".join(rng.choice("0123456789ABCDEFGHJK") for _ in range(8))


def _new_web(rng: random.Random) -> dict[str, Any]:
    style = rng.randrange(3)
    product = rng.choice(PRODUCTS)
    if style == 0:
        results = [
            (_asin(rng), rng.choice(BRANDS), rng.choice(ADJECTIVES), rng.randint(5, 300), rng.randint(0, 99))
            for _ in range(rng.randint(3, 6))
        ]
        return {"family": "web", "style": 0, "product": product, "page": rng.randint(1, 5), "results": results}
    if style == 1:
        return {
            "family": "web",
            "style": 1,
            "product": product,
            "brand": rng.choice(BRANDS),
            "color": rng.choice(ADJECTIVES),
            "price": rng.randint(5, 300),
            "rating": (rng.randint(2, 4), rng.randint(0, 9)),
            "reviews": rng.randint(3, 9000),
            "sizes": rng.choice(["S M L", "one size", "8 9 10 11", "32oz 64oz"]),
        }
    site = rng.choice(list(SITES))
    return {
        "family": "web",
        "style": 2,
        "site": site,
        "section": rng.choice(SITES[site]),
        "links": [(rng.randint(10, 400), name) for name in rng.sample(SITES[site], 3)],
        "items": rng.randint(21, 5000),
        "search_id": rng.randint(400, 900),
    }


_FAMILIES: list[tuple[float, Callable[[random.Random], dict[str, Any]]]] = [
    (0.40, _new_room),
    (0.25, _new_grid),
    (0.35, _new_web),
]


def _new_state(rng: random.Random) -> dict[str, Any]:
    return rng.choices([f for _, f in _FAMILIES], [w for w, _ in _FAMILIES])[0](rng)


def _mutate(state: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    """The same situation with one detail changed (an object taken, a step later,
    another product on the page)."""
    s = copy.deepcopy(state)
    family = s["family"]
    if family == "room":
        choice = rng.randrange(4)
        if choice == 0:
            s["objects"][rng.randrange(len(s["objects"]))] = _obj(rng)
        elif choice == 1:
            s["carrying"] = None if s["carrying"] else _obj(rng)
        elif choice == 2:
            s["moves"] = s["moves"] + rng.randint(1, 5)
        else:
            s["on"] = rng.choice(s["furniture"])
    elif family == "grid":
        i = rng.randrange(len(s["seen"]))
        what, ahead, side = s["seen"][i]
        s["seen"][i] = (what, max(0, ahead + rng.choice([-1, 1])), side)
        if rng.random() < 0.3:
            s["facing"] = rng.choice(["north", "south", "east", "west"])
    elif s["style"] == 0:
        s["results"][rng.randrange(len(s["results"]))] = (
            _asin(rng),
            rng.choice(BRANDS),
            rng.choice(ADJECTIVES),
            rng.randint(5, 300),
            rng.randint(0, 99),
        )
    elif s["style"] == 1:
        s["price"], s["reviews"] = rng.randint(5, 300), rng.randint(3, 9000)
    else:
        s["items"] = rng.randint(21, 5000)
        s["section"] = rng.choice(SITES[s["site"]])
    return s


def _render_room(s: dict[str, Any], w: int) -> tuple[str, str]:
    furniture = [_a(f) for f in s["furniture"]]
    objects = _listing([_a(o) for o in s["objects"]])
    carrying = _a(s["carrying"]) if s["carrying"] else "nothing"
    exits = ", ".join(s["exits"])
    if s["style"] == 0:
        intro = ["You are in the {r}.", "You're standing in the {r}.", "This is the {r}."][w].format(r=s["room"])
        see = ["You see", "Around you there is", "You notice"][w]
        text = (
            f"-= {s['room'].title()} =- {intro} {see} {_listing(furniture)}. On the {s['on']} you see {objects}. "
            f"{['Exits:', 'You can leave to the', 'Ways out:'][w]} {exits}. "
            f"{['You are carrying', 'In your hands:', 'You hold'][w]} {carrying}. Moves: {s['moves']}."
        )
        return "textworld", text
    if s["style"] == 1:
        look = [
            "You are in the middle of a room. Looking quickly around you, you see",
            "You stand in the middle of a room. Glancing around, you see",
            "In the middle of the room you look around and spot",
        ][w]
        text = f"{look} {_listing(furniture)}. Your task is to: {s['task']}."
        if s["carrying"]:
            text += f" You are holding {carrying}."
        return "alfworld", text
    verb = ["You open the", "You pull open the", "You have opened the"][w]
    text = f"{verb} {s['on']}. The {s['on']} is open. In it, you see {objects}. Your task is to: {s['task']}."
    return "alfworld", text


def _render_grid(s: dict[str, Any], w: int) -> tuple[str, str]:
    parts = []
    for what, ahead, side in s["seen"]:
        where = f"{ahead} steps ahead" if ahead else "right in front of you"
        if side:
            where += f" and {abs(side)} to the {'left' if side < 0 else 'right'}"
        parts.append(f"a {what} {where}")
    dist, wall = s["wall"]
    carrying = f"a {s['carrying']}" if s["carrying"] else "nothing"
    text = (
        f"{['Mission:', 'Your mission:', 'Goal:'][w]} {s['mission']}. "
        f"{['You see', 'In view:', 'Visible:'][w]} {_listing(parts)}, and a grey wall {dist} steps "
        f"{'ahead' if wall == 'ahead' else 'to the ' + wall}. {['You are facing', 'Facing', 'You face'][w]} "
        f"{s['facing']}. {['You are carrying', 'Carrying:', 'You hold'][w]} {carrying}."
    )
    return "babyai", text


def _render_web(s: dict[str, Any], w: int) -> tuple[str, str]:
    if s["style"] == 0:
        items = " ".join(f"[{a}] {b} {s['product']} {c} ${p}.{c2:02d}" for a, b, c, p, c2 in s["results"])
        head = ["WebShop. Search results for", "WebShop - results for", "Search results:"][w]
        return "webshop", f"{head} '{s['product']}' (page {s['page']}). {items} [Next >] [Back to Search]"
    if s["style"] == 1:
        major, minor = s["rating"]
        text = (
            f"{s['brand']} {s['product']}, {s['color']}. {['Price:', 'Now only', 'Cost:'][w]} ${s['price']}.99. "
            f"{['Rating:', 'Rated', 'Stars:'][w]} {major}.{minor} ({s['reviews']} reviews). Options: size "
            f"{s['sizes']}. [Buy Now] [Description] [Reviews] [< Prev]"
        )
        return "webshop", text
    nodes = " ".join(f"[{i}] link '{name}'" for i, name in s["links"])
    text = (
        f"Tab 0 (current): {s['site']} - {s['section']}. [1] RootWebArea '{s['section']} / {s['site']}' {nodes} "
        f"[{s['search_id']}] textbox 'Search' heading '{s['section']}' "
        f"StaticText '{['Showing 1-20 of', 'Results 1-20 of', 'Displaying 20 of'][w]} {s['items']} items'"
    )
    return "webarena", text


def _act(s: dict[str, Any], rng: random.Random) -> tuple[str, str, str]:
    """(action, result, thought) for a state."""
    family = s["family"]
    if family == "room":
        obj = rng.choice(s["objects"])
        action = rng.choice(
            [
                f"take {obj} from {s['on']}",
                f"go {rng.choice(s['exits'])}",
                f"open {rng.choice(s['furniture'])}",
                f"examine {s['on']}",
                f"put {obj} in {rng.choice(s['furniture'])}",
            ]
        )
        result = rng.choice([f"You take the {obj}.", "Nothing happens.", "You arrive somewhere new.", "Done."])
        return action, result, f"I need to {s['task']}; check the {s['on']} first."
    if family == "grid":
        return rng.choice(GRID_ACTIONS), rng.choice(["ok", "blocked", "picked up"]), f"Plan: {s['mission']}."
    if s["style"] == 0:
        asin = rng.choice(s["results"])[0]
        return f"click [{asin}]", "Opened the product page.", f"Find the best {s['product']} under budget."
    if s["style"] == 1:
        return rng.choice(["click [Buy Now]", "click [Reviews]", "click [< Prev]"]), "Page changed.", "Compare options."
    i, name = rng.choice(s["links"])
    return f"click [{i}]", f"Navigated to {name}.", f"Go to {name} in {s['site']}."


def _render(s: dict[str, Any], wording: int) -> tuple[str, str]:
    family = s["family"]
    if family == "room":
        return _render_room(s, wording)
    if family == "grid":
        return _render_grid(s, wording)
    return _render_web(s, wording)


def _to_agent_state(s: dict[str, Any], wording: int, rng: random.Random) -> AgentState:
    env, text = _render(s, wording)
    action, result, thought = _act(s, rng)
    return AgentState(env, text, action, result, thought)


# -- corpus and queries ----------------------------------------------------------------


def _structured_corpus(n: int, seed: int = 11) -> list[tuple[dict[str, Any], AgentState]]:
    rng = random.Random(seed)
    out: list[tuple[dict[str, Any], AgentState]] = []
    seen: set[str] = set()
    while len(out) < n:
        # A quarter are revisits: an earlier state with one detail changed.
        state = _mutate(out[rng.randrange(len(out))][0], rng) if out and rng.random() < 0.25 else _new_state(rng)
        item = _to_agent_state(state, 0, rng)
        if item.observation not in seen:
            seen.add(item.observation)
            out.append((state, item))
    return out


def corpus_states(n: int) -> list[AgentState]:
    """n unique agent states (a prefix of any longer corpus)."""
    return [item for _, item in _structured_corpus(n)]


def query_states(n: int, corpus_n: int, source_n: int, seed: int) -> list[AgentState]:
    """n unique held-out states: each a state of the first `source_n` corpus items
    with one detail changed, rendered with other wording 2 times in 3; none equal to
    any of the first `corpus_n` corpus texts (nor to each other)."""
    structured = _structured_corpus(corpus_n)
    taken = {item.observation for _, item in structured}
    rng = random.Random(seed)
    out: list[AgentState] = []
    while len(out) < n:
        state = _mutate(structured[rng.randrange(source_n)][0], rng)
        item = _to_agent_state(state, rng.choice([0, 1, 2]), rng)
        if item.observation not in taken:
            taken.add(item.observation)
            out.append(item)
    return out


def fingerprint(texts: list[str]) -> str:
    digest = hashlib.sha256()
    for t in texts:
        digest.update(t.encode())
        digest.update(b"\0")
    return digest.hexdigest()[:12]


def unique_state(rng: random.Random, tag: str) -> AgentState:
    """A fresh state whose observation carries a unique tag (for probes and load)."""
    state = _new_state(rng)
    item = _to_agent_state(state, rng.randrange(3), rng)
    return AgentState(item.environment, f"{item.observation} [{tag}]", item.action, item.result, item.thought)


# -- as ingest steps (bench.ingest) --------------------------------------------------------
# Storage cost depends on sizes and JSON shapes, not on meaning. An ingest step is a
# state of an episode rendered as above, fitted to what agents log: a 300-600
# character observation, an ~80 character thought, a ~100 character result (padded
# with filler sentences or cut), a small structured state dict, and an action that is
# a text command (text games) or a tool-call object (web agents). Seeded: every run
# sends byte-identical payloads.

Step = dict[str, Any]

_HOSTS = ["shop.example.com", "forum.example.org", "gitlab.example.net", "maps.example.io"]
_TOOLS = ["click", "type", "scroll", "select_option", "goto", "hover"]
_FILLER_TEXT = (
    "the a of to and in is it you that he was for on are with as his they be at one have this from "
    "or had by hot word but what some we can out other were all there when up use your how said an "
    "each she which do their time if will way about many then them write would like so these her"
)
_FILLER = _FILLER_TEXT.split()


def _sentence(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(_FILLER) for _ in range(words)).capitalize() + "."


def _fit(text: str, low: int, high: int, rng: random.Random) -> str:
    """Pad with filler sentences or cut so the length lands in [low, high]."""
    target = rng.randint(low, high)
    while len(text) < target:
        text += " " + _sentence(rng, 8)
    return text[:target]


def _tool_call(rng: random.Random) -> dict[str, Any]:
    tool = rng.choice(_TOOLS)
    args: dict[str, Any] = {"element_id": rng.randint(100, 9999)}
    if tool == "type":
        args["text"] = " ".join(rng.choice(_FILLER) for _ in range(4))
        args["press_enter"] = rng.random() < 0.5
    return {"name": tool, "arguments": args}


def _step(state: dict[str, Any], rng: random.Random, index: int, web: bool) -> Step:
    """One step in the v1 API shape (`StepCreate`), with an explicit index."""
    _, observation = _render(state, rng.randrange(3))
    action, result, thought = _act(state, rng)
    data: dict[str, Any] = {
        "step": index,
        "score": rng.randint(0, 100),
        "inventory": rng.sample(OBJECTS, rng.randint(0, 3)),
    }
    if web:
        data["url"] = f"https://{rng.choice(_HOSTS)}/item/{rng.randint(1, 99999)}"
    return {
        "index": index,
        "state": {"observation": _fit(observation, 300, 600, rng), "data": data},
        "internal_state": _fit(thought, 70, 90, rng),
        "action": _tool_call(rng) if web else action,
        "result": _fit(result, 90, 110, rng),
        "reward": 1.0 if rng.random() < 0.02 else 0.0,
    }


def make_trajectory_steps(seed: int, n_steps: int) -> list[Step]:
    """The steps of one episode: even seeds are web-agent episodes (web pages), odd
    ones text games (rooms). Each step is the previous state with one detail changed,
    or 1 time in 4 a new state of the same family."""
    rng = random.Random(seed)
    web = seed % 2 == 0
    new = _new_web if web else _new_room
    state = new(rng)
    steps = []
    for i in range(n_steps):
        if i:
            state = _mutate(state, rng) if rng.random() < 0.75 else new(rng)
        steps.append(_step(state, rng, i, web))
    return steps


def environment_of(seed: int) -> str:
    return "webshop" if seed % 2 == 0 else "alfworld"


def task_of(seed: int) -> str:
    rng = random.Random(-seed - 1)
    if seed % 2 == 0:
        product, budget, host = rng.choice(PRODUCTS), rng.randint(5, 80), rng.choice(_HOSTS)
        return f"Buy the cheapest {product} under ${budget} with at least 4 stars on {host}"
    return f"Put a {rng.choice(['hot', 'cool', 'clean'])} {rng.choice(OBJECTS)} in the {rng.choice(FURNITURE)}."
