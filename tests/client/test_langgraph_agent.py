"""A LangGraph graph driven by a scripted chat model (no LLM) against a live server:
the ``recall`` tool answers the server's rendered context, a tool and a node read and
write ``ReflexaStore``; and examples/langgraph_agent.py runs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Annotated, Any

import pytest

pytest.importorskip("langgraph.prebuilt")

from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel  # noqa: E402
from langchain_core.messages import AIMessage, ToolMessage  # noqa: E402
from langchain_core.tools import tool  # noqa: E402
from langgraph.graph import START, MessagesState, StateGraph  # noqa: E402
from langgraph.prebuilt import InjectedStore, ToolNode, tools_condition  # noqa: E402
from langgraph.store.base import BaseStore  # noqa: E402
from reflexa import Client  # noqa: E402
from reflexa.integrations.langgraph import ReflexaStore, reflexa_tools  # noqa: E402

from tests.factories import unique  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
KITCHEN = [
    {"state": {"observation": "You are in the kitchen. A kettle sits on the stove."}, "action": "fill kettle"},
    {"state": {"observation": "The kettle is full."}, "action": "turn on stove"},
]


@pytest.fixture
def client(admin: Client) -> Any:
    namespace = admin.create_namespace(unique("lgagent")).name
    with Client(admin.config.base_url, admin.config.api_key, namespace=namespace) as c:
        c.create_trajectory(task="make tea", steps=KITCHEN, outcome={"success": True})
        yield c


def test_recall_tool_answers_the_rendered_context(client: Client) -> None:
    recall, _ = reflexa_tools(client, k=3)
    assert recall.name == "recall"
    assert set(recall.args) == {"state", "internal_state", "task"}
    message = recall.invoke(
        {"type": "tool_call", "id": "c1", "name": "recall", "args": {"state": "A kettle sits on the stove."}}
    )
    assert isinstance(message, ToolMessage)
    assert "fill kettle" in message.content
    retrieval_id = message.artifact["retrieval_id"]
    assert retrieval_id and message.content.endswith(f"retrieval_id: {retrieval_id}")
    assert message.artifact["item_ids"] and "fill kettle" in message.artifact["context"]
    # The artifact is what the outcome report needs.
    assert client.report_retrieval_outcome(None, retrieval_id, success=True).credited_items >= 1


def test_check_action_tool_says_the_risk_and_the_better_alternative(client: Client) -> None:
    bad = [{"state": KITCHEN[0]["state"], "action": "pour water on the stove"}]
    for _ in range(3):
        client.create_trajectory(task="make tea", steps=bad, outcome={"success": False})
    _, check = reflexa_tools(client)
    assert check.name == "check_action" and set(check.args) == {"state", "action", "internal_state", "task"}
    message = check.invoke(
        {
            "type": "tool_call",
            "id": "c2",
            "name": "check_action",
            "args": {"state": KITCHEN[0]["state"]["observation"], "action": "pour water on the stove"},
        }
    )
    assert message.artifact["risk"]["rate"] == 1.0 and message.artifact["risk"]["attempts"] == 3
    assert message.artifact["alternatives"][0]["action"] == "fill kettle"
    assert message.content.startswith("Risk: 100% of credited attempts failed (3/3")
    assert "- fill kettle: 100%" in message.content


def test_graph_with_scripted_model_recalls_and_uses_the_store(client: Client) -> None:
    store = ReflexaStore(client)
    store.put(("users", "ada"), "prefs", {"text": "Ada takes her tea without sugar"})
    store.put(("users", "bob"), "prefs", {"text": "Bob likes coffee"})

    @tool
    def remember(fact: str, store: Annotated[BaseStore, InjectedStore()]) -> str:
        """Remember a fact about the user for later conversations."""
        store.put(("users", "ada", "facts"), f"fact-{len(store.search(('users', 'ada', 'facts')))}", {"text": fact})
        return "remembered"

    model = FakeMessagesListChatModel(
        responses=[
            AIMessage(
                "",
                tool_calls=[
                    {
                        "name": "recall",
                        "args": {"state": "A kettle sits on the stove.", "task": "make tea"},
                        "id": "c1",
                    },
                    {"name": "remember", "args": {"fact": "Ada asked for tea at 5pm"}, "id": "c2"},
                ],
            ),
            AIMessage("Fill the kettle, then turn on the stove. No sugar for Ada."),
        ]
    )
    seen: list[str] = []

    def agent(state: MessagesState, *, store: BaseStore) -> dict[str, Any]:
        prefs = store.search(("users",), query="how does ada take her tea", limit=1)
        seen.append(prefs[0].value["text"])
        return {"messages": [model.invoke([("system", prefs[0].value["text"]), *state["messages"]])]}

    builder = StateGraph(MessagesState).add_node(agent).add_node("tools", ToolNode([*reflexa_tools(client), remember]))
    builder.add_edge(START, "agent").add_conditional_edges("agent", tools_condition).add_edge("tools", "agent")
    result = builder.compile(store=store).invoke({"messages": [("user", "Make Ada a cup of tea.")]})

    messages = result["messages"]
    assert [m.type for m in messages] == ["human", "ai", "tool", "tool", "ai"]
    recalled, remembered = messages[2], messages[3]
    assert recalled.name == "recall" and "fill kettle" in recalled.content and recalled.artifact["retrieval_id"]
    assert remembered.content == "remembered"
    assert messages[-1].content.startswith("Fill the kettle")
    assert seen == ["Ada takes her tea without sugar"] * 2
    facts = store.search(("users", "ada", "facts"))
    assert [(i.key, i.value) for i in facts] == [("fact-0", {"text": "Ada asked for tea at 5pm"})]
    assert store.search(("users",), query="when did ada ask for tea", limit=1)[0].key == "fact-0"


def test_example_runs(client: Client) -> None:
    env = {
        **os.environ,
        "REFLEXA_URL": client.config.base_url,
        "REFLEXA_API_KEY": client.config.api_key or "",
        "REFLEXA_NAMESPACE": client.config.namespace or "",
        "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "clients" / "python"), os.environ.get("PYTHONPATH", "")]),
    }
    source = (REPO / "examples" / "langgraph_agent.py").read_text()
    assert len(source.splitlines()) < 40
    done = subprocess.run(
        [sys.executable, str(REPO / "examples" / "langgraph_agent.py")],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "tool: " in out and "fill kettle" in out and "retrieval_id: r_" in out
    assert out.rstrip().endswith("ai: Fill the kettle, boil it, no sugar.")
