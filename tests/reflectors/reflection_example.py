"""The worked example of docs/reflection.md, for real: three attempts at one task go
into a fresh SQLite-backed app (hashing embedder) whose LLM is the scripted
OpenAI-compatible server, the worker drains, and what the API then returns is
printed as Markdown. Regenerate the doc's example with

    python -m tests.reflectors.reflection_example > /tmp/example.md

(the LLM's answers are the scripted ones below; everything else is computed).
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient

from migrations import upgrade
from service.app import create_app
from tests.conftest import ADMIN_KEY, make_settings
from tests.fixtures import drain
from tests.reflectors.openai_server import json_answer, serve_scripted_llm

NS = "/v1/namespaces/shop"
TASK = "Buy a red mug that costs less than $10"
HOME = "Home page of the shop. A search box is at the top."
RESULTS = "Results for 'red mug': Red Mug $8.50; Red Mug XL $14.00; Crimson Cup $9.00"


def search(query: str) -> dict[str, Any]:
    return {"tool": "search", "arguments": {"query": query}}


TRAJECTORIES: list[dict[str, Any]] = [
    {
        "id": "t-101",
        "task": TASK,
        "environment": "shop",
        "group_id": "g1",
        "steps": [
            {"state": {"observation": HOME}, "action": search("red mug"), "result": "3 results"},
            {
                "state": {"observation": RESULTS},
                "internal_state": "The cheapest red one is probably under $10; check it.",
                "action": {"tool": "open", "arguments": {"item": "Red Mug"}},
                "result": "Item page: Red Mug, $8.50, colour red, in stock",
            },
            {
                "state": {"observation": "Item page: Red Mug, $8.50, colour red, in stock"},
                "action": {"tool": "add_to_cart", "arguments": {"item": "Red Mug"}},
                "result": "Cart: 1 item, $8.50",
            },
            {
                "state": {"observation": "Cart: Red Mug $8.50"},
                "action": {"tool": "checkout"},
                "result": "Order placed: Red Mug, $8.50",
                "done": True,
            },
        ],
        "outcome": {"success": True, "reward": 1.0},
    },
    {
        "id": "t-102",
        "task": TASK,
        "environment": "shop",
        "group_id": "g1",
        "steps": [
            {
                "state": {"observation": HOME},
                "action": search("red ceramic coffee mug under 10 dollars dishwasher safe"),
                "result": "0 results",
            },
            {
                "state": {"observation": "No results for 'red ceramic coffee mug under 10 dollars dishwasher safe'"},
                "action": search("red ceramic coffee mug under 10 dollars dishwasher safe"),
                "result": "0 results",
                "caused_failure": True,
            },
            {
                "state": {"observation": "No results for 'red ceramic coffee mug under 10 dollars dishwasher safe'"},
                "action": {"tool": "give_up"},
                "result": "Episode ended",
                "done": True,
            },
        ],
        "outcome": {"success": False, "reward": 0.0, "failure_reason": "gave up after empty searches"},
    },
    {
        "id": "t-103",
        "task": TASK,
        "environment": "shop",
        "group_id": "g1",
        "metadata": {"expert": True},
        "steps": [
            {"state": {"observation": HOME}, "action": search("red mug"), "result": "3 results"},
            {
                "state": {"observation": RESULTS},
                "internal_state": "Red Mug XL is the first red mug; buy it.",
                "action": {"tool": "add_to_cart", "arguments": {"item": "Red Mug XL"}},
                "result": "Cart: 1 item, $14.00",
            },
            {
                "state": {"observation": "Cart: Red Mug XL $14.00"},
                "action": {"tool": "checkout"},
                "result": "Order placed: Red Mug XL, $14.00",
                "done": True,
            },
        ],
        "outcome": {"success": False, "reward": 0.0, "failure_reason": "over budget"},
    },
]

PRICE_CHECK = {
    "trigger": "Search results list several items that match the wanted product, at different prices.",
    "guideline": "Open the page of the cheapest matching item and confirm its price and colour before adding it "
    "to the cart.",
    "rationale": "At step 1 the agent opened Red Mug ($8.50) instead of the first result, confirmed it at step 2, "
    "and the order succeeded.",
    "polarity": "do",
    "evidence_steps": [1, 2],
}
EMPTY_SEARCH = {
    "trigger": "A search returns no results and the query combines several attributes of the wanted item.",
    "guideline": "Search again with only the item's name and one key attribute; never repeat a query that "
    "returned nothing.",
    "rationale": "Steps 0 and 1 sent the same six-attribute query twice, got 0 results both times, and the agent "
    "gave up at step 2.",
    "polarity": "do",
    "evidence_steps": [0, 1],
}
BUDGET_CHECK = {
    "trigger": "Search results list several items that match the wanted product, at different prices, and the "
    "task sets a budget.",
    "guideline": "Open the page of the matching item and check its price against the budget before adding it to "
    "the cart.",
    "rationale": "At step 1 the agent added Red Mug XL ($14.00) straight from the results list and paid over the "
    "$10 budget at step 2.",
    "polarity": "do",
    "evidence_steps": [1, 2],
}

ANSWERS = [
    # reflect.heuristics, t-101
    json_answer({"heuristics": [PRICE_CHECK]}, model="qwen2.5-7b-instruct"),
    # reflect.skills, t-101
    json_answer(
        {
            "skills": [
                {
                    "name": "search_and_buy_item",
                    "when_to_use": "The task asks to buy a specific item and the agent is on a page with the "
                    "search box.",
                    "preconditions": ["The search box is visible.", "The cart is empty."],
                    "parameters": [
                        {"name": "query", "description": "the item's name and one key attribute"},
                        {"name": "item", "description": "the result that matches every requirement of the task"},
                    ],
                    "steps": [
                        "Search for {query}; expect a list of results with prices.",
                        "Open {item} and confirm its price, colour and stock on the item page.",
                        "Add {item} to the cart; expect the cart total to equal its price.",
                        "Check out.",
                    ],
                    "step_range": [0, 3],
                }
            ]
        },
        model="qwen2.5-7b-instruct",
    ),
    # reflect.heuristics, t-102
    json_answer({"heuristics": [EMPTY_SEARCH]}, model="qwen2.5-7b-instruct"),
    # reflect.golden_negative, t-103 (expert) ...
    json_answer(
        {
            "critical_step": 1,
            "what_went_wrong": "At step 1 the agent added Red Mug XL straight from the results list; step 1's "
            "observation showed it at $14.00, over the task's $10 budget, and Red Mug at $8.50.",
            "corrected_action": "Open Red Mug ($8.50), confirm the price on its page, and add it to the cart.",
            "hint": "The results list shows prices; compare them with the budget in the task before choosing.",
            "heuristics": [BUDGET_CHECK],
        },
        model="qwen2.5-7b-instruct",
    ),
    # ... whose heuristic is a neighbour of PRICE_CHECK: pool maintenance
    json_answer(
        {
            "operation": "EDIT",
            "target_id": "__PRICE_CHECK_ID__",
            "trigger": "Search results list several items that match the wanted product, at different prices, "
            "and the task sets a budget or other requirements.",
            "guideline": "Open the page of a matching item and check its price against the task's budget (and "
            "its other requirements) before adding it to the cart; prefer the cheapest that fits.",
            "reason": "The existing heuristic covers the same results-list situation; the candidate adds the "
            "budget check that the expert skipped, so the rewrite keeps both.",
        },
        model="qwen2.5-7b-instruct",
    ),
    # reflect.rubrics, the task (attempts A = t-101, B = t-102, C = t-103)
    json_answer(
        {
            "criteria": [
                {
                    "text": "The order placed costs less than $10.",
                    "weight": 0.5,
                    "rationale": "A paid $8.50 and succeeded; C paid $14.00 and failed; B placed no order.",
                    "check": {
                        "type": "regex",
                        "target": "final_result",
                        "pattern": "Order placed: .*\\$\\d\\.\\d\\d$",
                        "negate": False,
                    },
                },
                {
                    "text": "The agent opens the chosen item's page and checks its price before adding it to the cart.",
                    "weight": 0.3,
                    "rationale": "A opened Red Mug before adding it; C added Red Mug XL from the list unchecked.",
                    "check": None,
                },
                {
                    "text": "The agent never sends the same search query twice in a row.",
                    "weight": 0.2,
                    "rationale": "B repeated a query that had returned nothing and gave up.",
                    "check": None,
                },
            ]
        },
        model="qwen2.5-7b-instruct",
    ),
]


def shown(item: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in item.items() if k not in ("created_at", "updated_at")}


def block(title: str, value: Any) -> str:
    return f"**{title}**\n\n```json\n{json.dumps(value, indent=2, ensure_ascii=False)}\n```\n"


def main() -> None:
    from reflectors.prompted.heuristics import heuristic_id

    price_id = heuristic_id("shop", "shop", PRICE_CHECK["trigger"], PRICE_CHECK["guideline"])
    ANSWERS[4] = json_answer({**json.loads(ANSWERS[4].content), "target_id": price_id}, model="qwen2.5-7b-instruct")
    with tempfile.TemporaryDirectory() as tmp, serve_scripted_llm() as llm:
        llm.script(*ANSWERS)
        url = f"sqlite:///{Path(tmp) / 'reflexa.db'}"
        upgrade(url)
        settings = make_settings(url, Path(tmp), llm={"base_url": llm.url, "model": "qwen2.5-7b-instruct"})
        with TestClient(create_app(settings), headers={"Authorization": f"Bearer {ADMIN_KEY}"}) as api:
            api.post("/v1/namespaces", json={"name": "shop"}).raise_for_status()
            api.post(f"{NS}/trajectories/batch", json={"trajectories": TRAJECTORIES}).raise_for_status()
            drain(api)
            assert llm.unused == 0 and llm.exhausted == 0, (llm.unused, llm.exhausted)
            out = [block("POST /v1/namespaces/shop/trajectories/batch", {"trajectories": TRAJECTORIES})]
            jobs = api.get(f"{NS}/jobs", params={"limit": 100}).json()["items"]
            out.append(
                block(
                    "GET /v1/namespaces/shop/jobs (kind, payload, status, attempts; oldest first)",
                    [
                        {"kind": j["kind"], "payload": j["payload"], "status": j["status"], "attempts": j["attempts"]}
                        for j in reversed(jobs)
                    ],
                )
            )
            for kind in ("heuristic", "skill", "rubric"):
                items = api.get(f"{NS}/reflections", params={"kind": kind}).json()["items"]
                out.append(block(f"GET /v1/namespaces/shop/reflections?kind={kind}", [shown(i) for i in items]))
            hist = api.get(f"{NS}/reflections/{price_id}/history").json()
            out.append(
                block(
                    f"GET /v1/namespaces/shop/reflections/{price_id}/history (content left out)",
                    [{k: v for k, v in h.items() if k != "content"} for h in hist],
                )
            )
        print("\n".join(out))


if __name__ == "__main__":
    main()
