"""A LangGraph agent on Reflexa: the recall tool in a ToolNode, ReflexaStore as the graph's
store. A scripted chat model stands in for an LLM. Needs REFLEXA_URL, REFLEXA_API_KEY and
REFLEXA_NAMESPACE (docs/integrations.md, "LangGraph")."""

from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
from langchain_core.messages import AIMessage
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from langgraph.store.base import BaseStore
from reflexa import Client
from reflexa.integrations.langgraph import ReflexaStore, reflexa_tools

client = Client()
store = ReflexaStore(client)
store.put(("users", "ada"), "prefs", {"text": "Ada takes her tea without sugar"})
model = FakeMessagesListChatModel(
    responses=[
        AIMessage("", tool_calls=[{"name": "recall", "args": {"state": "a kettle on the stove"}, "id": "c1"}]),
        AIMessage("Fill the kettle, boil it, no sugar."),
    ]
)


def agent(state: MessagesState, *, store: BaseStore) -> dict:
    prefs = store.search(("users", "ada"), query="how does ada take her tea", limit=1)
    return {"messages": [model.invoke([("system", prefs[0].value["text"]), *state["messages"]])]}


builder = StateGraph(MessagesState).add_node(agent).add_node("tools", ToolNode(reflexa_tools(client)))
builder.add_edge(START, "agent").add_conditional_edges("agent", tools_condition).add_edge("tools", "agent")
graph = builder.compile(store=store)
result = graph.invoke({"messages": [("user", "Make Ada a cup of tea.")]})
for message in result["messages"]:
    print(f"{message.type}: {message.content}")
