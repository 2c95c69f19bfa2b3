"""Deterministic, realistic agent steps for benchmarks.

Sizes follow what agents really log: a 300-600 character observation (a text-game
room description or a web page's accessibility tree excerpt), an ~80 character
thought, a small structured state, an action that is either a text command or a
tool-call object, and a ~100 character result. Storage cost depends on sizes and
JSON shapes, not on meaning, so the text is assembled from word lists with a
seeded RNG: every run sends byte-identical payloads.
"""

from __future__ import annotations

import random
from typing import Any

Step = dict[str, Any]

_ROOMS = ["kitchen", "living room", "bathroom", "bedroom", "hallway", "garage", "pantry", "study"]
_OBJECTS = [
    "fridge",
    "countertop",
    "cabinet",
    "drawer",
    "sinkbasin",
    "stoveburner",
    "microwave",
    "shelf",
    "coffeemachine",
    "toaster",
    "garbagecan",
    "diningtable",
    "sidetable",
    "sofa",
    "armchair",
    "desk",
]
_ITEMS = ["apple", "mug", "knife", "plate", "egg", "tomato", "keychain", "book", "pen", "cellphone"]
_VERBS = ["go to", "open", "close", "take", "put", "examine", "heat", "cool", "clean", "use"]
_WEB_ROLES = ["link", "button", "textbox", "combobox", "heading", "StaticText", "checkbox", "menuitem"]
_WEB_LABELS = [
    "Sign in",
    "Search",
    "Add to cart",
    "Orders",
    "My Account",
    "Next page",
    "Filter by price",
    "Customer reviews",
    "Shipping address",
    "Apply coupon",
    "Sort by",
    "Product details",
]
_TOOLS = ["click", "type", "scroll", "select_option", "goto", "hover"]
_SITES = ["shop.example.com", "forum.example.org", "gitlab.example.net", "maps.example.io"]
_FILLER = (
    "the a of to and in is it you that he was for on are with as his they be at one have this from "
    "or had by hot word but what some we can out other were all there when up use your how said an "
    "each she which do their time if will way about many then them write would like so these her"
)
_WORDS = _FILLER.split()


def _sentence(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(_WORDS) for _ in range(words)).capitalize() + "."


def _fit(text: str, low: int, high: int, rng: random.Random) -> str:
    """Pad with filler sentences or cut so the length lands in [low, high]."""
    target = rng.randint(low, high)
    while len(text) < target:
        text += " " + _sentence(rng, 8)
    return text[:target]


def _game_observation(rng: random.Random, step: int) -> str:
    room = rng.choice(_ROOMS)
    things = ", ".join(f"a {rng.choice(_OBJECTS)} {rng.randint(1, 6)}" for _ in range(rng.randint(6, 12)))
    held = rng.choice(_ITEMS)
    text = (
        f"-= Step {step} =- You are in the {room}. Looking quickly around you, you see {things}. "
        f"You are carrying: a {held}. On the {rng.choice(_OBJECTS)} you see a {rng.choice(_ITEMS)} "
        f"and a {rng.choice(_ITEMS)}."
    )
    return _fit(text, 300, 600, rng)


def _web_observation(rng: random.Random, step: int) -> str:
    site = rng.choice(_SITES)
    lines = [f"Tab 0 (current): {site} - page {step}", f"[{rng.randint(1, 99)}] RootWebArea '{site}'"]
    for _ in range(rng.randint(8, 14)):
        lines.append(f"\t[{rng.randint(100, 9999)}] {rng.choice(_WEB_ROLES)} '{rng.choice(_WEB_LABELS)}'")
    return _fit("\n".join(lines), 300, 600, rng)


def _action(rng: random.Random, web: bool) -> str | dict[str, Any]:
    if web:
        tool = rng.choice(_TOOLS)
        args: dict[str, Any] = {"element_id": rng.randint(100, 9999)}
        if tool == "type":
            args["text"] = " ".join(rng.choice(_WORDS) for _ in range(4))
            args["press_enter"] = rng.random() < 0.5
        return {"name": tool, "arguments": args}
    return f"{rng.choice(_VERBS)} {rng.choice(_ITEMS)} {rng.randint(1, 6)} on {rng.choice(_OBJECTS)}"


def make_step(rng: random.Random, index: int, web: bool) -> Step:
    """One step in the v1 API shape (`StepCreate`), with an explicit index."""
    observation = _web_observation(rng, index) if web else _game_observation(rng, index)
    data: dict[str, Any] = {
        "step": index,
        "score": rng.randint(0, 100),
        "inventory": rng.sample(_ITEMS, rng.randint(0, 3)),
    }
    if web:
        data["url"] = f"https://{rng.choice(_SITES)}/item/{rng.randint(1, 99999)}"
    thought = _fit(
        f"Plan: {rng.choice(_VERBS)} the {rng.choice(_ITEMS)}; next check the {rng.choice(_OBJECTS)}.", 70, 90, rng
    )
    result = _fit(f"You {rng.choice(_VERBS)} the {rng.choice(_ITEMS)}.", 90, 110, rng)
    return {
        "index": index,
        "state": {"observation": observation, "data": data},
        "internal_state": thought,
        "action": _action(rng, web),
        "result": result,
        "reward": 1.0 if rng.random() < 0.02 else 0.0,
    }


def make_trajectory_steps(seed: int, n_steps: int) -> list[Step]:
    """The steps of one trajectory: even seeds are web-agent episodes, odd ones text games."""
    rng = random.Random(seed)
    web = seed % 2 == 0
    return [make_step(rng, i, web) for i in range(n_steps)]


def environment_of(seed: int) -> str:
    return "webshop" if seed % 2 == 0 else "alfworld"


def task_of(seed: int) -> str:
    rng = random.Random(-seed - 1)
    if seed % 2 == 0:
        return f"Buy a {rng.choice(_ITEMS)} under ${rng.randint(5, 80)} with at least 4 stars on {rng.choice(_SITES)}"
    return f"Put a {rng.choice(['hot', 'cool', 'clean'])} {rng.choice(_ITEMS)} in the {rng.choice(_OBJECTS)}."
