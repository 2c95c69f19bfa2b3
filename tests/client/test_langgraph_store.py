"""ReflexaStore against BaseStore's documented contract, on a live server.

LangGraph ships no store conformance suite, so this one is written from
``langgraph.store.base`` (the ops' docstrings) and checked against LangGraph's own
``InMemoryStore`` on the same data wherever the contract fixes the answer: get,
filtered search (as sets: InMemoryStore answers in insertion order, ReflexaStore
newest first, as PostgresStore does) and list_namespaces (sorted by both).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("langgraph.store.base")

from langgraph.store.base import (  # noqa: E402
    BaseStore,
    GetOp,
    InvalidNamespaceError,
    ListNamespacesOp,
    MatchCondition,
    PutOp,
    SearchOp,
)
from langgraph.store.memory import InMemoryStore  # noqa: E402
from reflexa import Client, errors  # noqa: E402
from reflexa.integrations.langgraph import ReflexaStore, item_id  # noqa: E402

from tests.factories import unique  # noqa: E402


@pytest.fixture
def store(admin: Client) -> Iterator[ReflexaStore]:
    namespace = admin.create_namespace(unique("lgstore")).name
    with Client(admin.config.base_url, admin.config.api_key, namespace=namespace) as client:
        yield ReflexaStore(client)


ITEMS: list[tuple[tuple[str, ...], str, dict[str, Any]]] = [
    (("users", "alice", "prefs"), "coffee", {"text": "alice prefers dark roast coffee", "n": 3, "tags": ["a", "b"]}),
    (("users", "alice", "prefs"), "music", {"text": "alice listens to jazz", "n": 7, "meta": {"lang": "en"}}),
    (("users", "bob", "prefs"), "coffee", {"text": "bob drinks green tea", "n": 5, "meta": {"lang": "fr"}}),
    (("users", "bob"), "profile", {"text": "bob is a pilot", "n": None}),
    (("docs", "v1"), "readme", {"text": "install with pip", "n": 1}),
    (("docs", "draft", "v1"), "intro", {"text": "an introduction", "status": "draft"}),
]


def fill(*stores: BaseStore) -> None:
    for s in stores:
        for namespace, key, value in ITEMS:
            s.put(namespace, key, value)


def test_put_get_overwrite_delete(store: ReflexaStore) -> None:
    ns = ("users", "carol")
    assert store.get(ns, "k") is None
    store.put(ns, "k", {"v": 1})
    first = store.get(ns, "k")
    assert first is not None
    assert (first.namespace, first.key, first.value) == (ns, "k", {"v": 1})
    assert first.created_at == first.updated_at
    store.put(ns, "k", {"v": 1})  # identical: a replay, nothing changes
    assert store.get(ns, "k") == first
    store.put(ns, "k", {"v": 2})  # overwrite: created_at kept, updated_at moves
    second = store.get(ns, "k")
    assert second is not None and second.value == {"v": 2}
    assert second.created_at == first.created_at and second.updated_at >= first.updated_at
    store.put(ns, "k", {"v": 2})  # identical after an overwrite: still a replay
    assert store.get(ns, "k") == second
    assert store.get(ns, "other") is None and store.get(("users",), "k") is None
    store.delete(ns, "k")
    assert store.get(ns, "k") is None
    store.delete(ns, "k")  # deleting what is not there is a no-op
    # What is stored in Reflexa: one trajectory per item, under its documented id.
    store.put(ns, "k", {"v": 3})
    trajectory = store.client.get_trajectory(None, item_id(ns, "k"))
    assert trajectory.agent == "langgraph-store" and trajectory.environment == "users"
    assert trajectory.metadata["langgraph_value"] == {"v": 3}
    assert [s.state.observation for s in trajectory.steps] == ['{"v": 3}']


def test_contract_refusals(store: ReflexaStore) -> None:
    with pytest.raises(NotImplementedError):
        store.put(("a",), "k", {"v": 1}, ttl=5)
    with pytest.raises(NotImplementedError):
        store.batch([PutOp(("a",), "k", {"v": 1}, ttl=5.0)])
    for bad in [("a.b",), ("",), ("langgraph",)]:
        with pytest.raises(InvalidNamespaceError):
            store.put(bad, "k", {"v": 1})
    with pytest.raises(InvalidNamespaceError):
        store.batch([GetOp(("a.b",), "k")])
    with pytest.raises(ValueError, match="Unsupported operator"):
        store.put(("a",), "k", {"v": 1})
        store.search(("a",), filter={"v": {"$in": [1]}})


def test_filtered_search_matches_inmemorystore(store: ReflexaStore) -> None:
    memory = InMemoryStore()
    fill(store, memory)
    # InMemoryStore's order operators raise on a missing or null number (float(None));
    # PostgreSQL, and ReflexaStore, leave such an item out. Compared on the numeric items.
    numeric = InMemoryStore()
    for namespace, key, value in ITEMS:
        if isinstance(value.get("n"), int):
            numeric.put(namespace, key, value)
    cases: list[tuple[tuple[str, ...], dict[str, Any] | None]] = [
        ((), None),
        (("users",), None),
        (("users", "alice"), None),
        (("users", "alice", "prefs"), None),
        (("users", "ali"), None),  # a prefix of labels, not of characters
        (("nothing",), None),
        ((), {"n": 5}),
        ((), {"n": {"$gt": 3}}),
        ((), {"n": {"$gte": 3, "$lt": 7}}),
        ((), {"n": {"$lte": 1}}),
        ((), {"n": {"$ne": 5}}),
        ((), {"n": {"$eq": 1}}),
        ((), {"n": None}),
        ((), {"meta": {"lang": "fr"}}),
        ((), {"tags": ["a", "b"]}),
        ((), {"tags": ["a"]}),
        (("users",), {"text": "alice listens to jazz"}),
        (("docs",), {"status": "draft"}),
    ]
    for prefix, filter in cases:
        ordered = any(isinstance(v, dict) and {"$gt", "$gte", "$lt", "$lte"} & set(v) for v in (filter or {}).values())
        reference = numeric if ordered else memory
        ours = store.search(prefix, filter=filter, limit=50)
        theirs = reference.search(prefix, filter=filter, limit=50)
        assert {(i.namespace, i.key) for i in ours} == {(i.namespace, i.key) for i in theirs}, (prefix, filter)
        assert all(i.score is None for i in ours)
    # Newest first, and limit/offset page through it without gaps or repeats.
    everything = store.search((), limit=50)
    assert [i.key for i in everything] == [key for _, key, _ in reversed(ITEMS)]
    pages = [store.search((), limit=2, offset=o) for o in range(0, 6, 2)]
    assert [i.key for page in pages for i in page] == [i.key for i in everything]
    assert store.search((), limit=2, offset=5)[0].key == everything[5].key


def test_query_search_ranks_the_relevant_item_first(store: ReflexaStore) -> None:
    fill(store)
    store.put(("users", "alice", "prefs"), "secret", {"text": "alice prefers dark roast coffee"}, index=False)
    hits = store.search(("users",), query="which coffee roast does alice prefer", limit=10)
    assert hits[0].key == "coffee" and hits[0].namespace == ("users", "alice", "prefs")
    assert hits[0].score is not None
    # Every match comes back: scored ones first, then the unindexed one (score None), as InMemoryStore does.
    keys = [(i.namespace, i.key) for i in hits]
    assert len(keys) == len(set(keys)) == 5
    assert hits[-1].key == "secret" and hits[-1].score is None
    assert all(i.score is not None for i in hits[:-1])
    # The prefix and the filter hold for a query too.
    bob = store.search(("users", "bob"), query="coffee", limit=10)
    assert {i.key for i in bob} == {"coffee", "profile"} and all(i.namespace[1] == "bob" for i in bob)
    filtered = store.search((), query="alice coffee", filter={"n": {"$gt": 4}})
    assert {(i.namespace, i.key) for i in filtered} == {
        (("users", "alice", "prefs"), "music"),
        (("users", "bob", "prefs"), "coffee"),
    }
    # Index paths: only the chosen field is embedded; a deleted item never comes back.
    store.put(("notes",), "n1", {"title": "kettle descaling", "body": "irrelevant words"}, index=["title"])
    store.put(("notes",), "n2", {"title": "garden", "body": "kettle kettle kettle"}, index=["title"])
    assert store.search(("notes",), query="kettle descaling", limit=1)[0].key == "n1"
    store.delete(("notes",), "n1")
    assert [i.key for i in store.search(("notes",), query="kettle descaling")] == ["n2"]
    assert store.search(("users",), query="coffee", limit=2, offset=4)[0].key == "secret"


def test_list_namespaces_matches_inmemorystore(store: ReflexaStore) -> None:
    memory = InMemoryStore()
    fill(store, memory)
    cases: list[dict[str, Any]] = [
        {},
        {"prefix": ("users",)},
        {"prefix": ("users", "*", "prefs")},
        {"suffix": ("prefs",)},
        {"suffix": ("v1",)},
        {"prefix": ("docs",), "suffix": ("v1",)},
        {"prefix": ("*",), "max_depth": 1},
        {"max_depth": 2},
        {"prefix": ("users",), "max_depth": 2},
        {"limit": 2},
        {"limit": 2, "offset": 2},
        {"prefix": ("nothing",)},
    ]
    for kwargs in cases:
        assert store.list_namespaces(**kwargs) == memory.list_namespaces(**kwargs), kwargs
    store.delete(("docs", "v1"), "readme")
    assert ("docs", "v1") not in store.list_namespaces()


def test_batch_runs_mixed_ops_in_order(store: ReflexaStore) -> None:
    ns = ("batch", "x")
    results = store.batch(
        [
            PutOp(ns, "a", {"v": 1}),
            GetOp(ns, "a"),
            PutOp(ns, "b", {"v": 2}, index=False),
            SearchOp(("batch",), filter={"v": {"$gte": 1}}),
            ListNamespacesOp(match_conditions=(MatchCondition("prefix", ("batch",)),)),
            PutOp(ns, "a", None),
            GetOp(ns, "a"),
            SearchOp(("batch",)),
        ]
    )
    assert len(results) == 8
    assert results[0] is None and results[2] is None and results[5] is None
    assert results[1] is not None and results[1].value == {"v": 1}
    assert [i.key for i in results[3]] == ["b", "a"]
    assert results[4] == [ns]
    assert results[6] is None
    assert [i.key for i in results[7]] == ["b"]


def test_async_twins(store: ReflexaStore) -> None:
    async def run() -> None:
        ns = ("async", "y")
        await store.aput(ns, "k", {"text": "asynchronous kettle", "n": 2})
        item = await store.aget(ns, "k")
        assert item is not None and item.value["n"] == 2
        got = await asyncio.gather(store.aget(ns, "k"), store.asearch(("async",), filter={"n": 2}))
        assert got[0] == item and [i.key for i in got[1]] == ["k"]
        assert [i.key for i in await store.asearch(("async",), query="kettle")] == ["k"]
        assert await store.alist_namespaces(prefix=("async",)) == [ns]
        results = await store.abatch([GetOp(ns, "k"), PutOp(ns, "k", None), GetOp(ns, "k")])
        assert results[0] == item and results[2] is None
        await store.adelete(ns, "k")
        assert await store.aget(ns, "k") is None

    asyncio.run(run())


def test_agent_key_appends_but_cannot_overwrite(admin: Client, store: ReflexaStore) -> None:
    key = admin.create_key("agent", [store.namespace])
    with Client(admin.config.base_url, key.key, namespace=store.namespace) as client:
        agent_store = ReflexaStore(client)
        agent_store.put(("a",), "k", {"v": 1})
        agent_store.put(("a",), "k", {"v": 1})  # a replay needs no delete
        assert agent_store.get(("a",), "k").value == {"v": 1}
        with pytest.raises(errors.Forbidden):
            agent_store.put(("a",), "k", {"v": 2})
        with pytest.raises(errors.Forbidden):
            agent_store.delete(("a",), "k")
    assert store.get(("a",), "k").value == {"v": 1}


def test_store_is_scoped_to_its_marker(store: ReflexaStore) -> None:
    other = ReflexaStore(store.client, agent="another-store")
    store.put(("s",), "k", {"v": 1})
    # An agent's own episodes in the same namespace are not items either.
    store.client.create_trajectory(
        None,
        task="t",
        environment="s",
        steps=[{"state": {"observation": "o v"}, "action": "a"}],
        outcome={"success": True},
    )
    assert other.get(("s",), "k") is None and other.search(()) == [] and other.list_namespaces() == []
    assert [i.key for i in store.search(("s",), query="o v")] == ["k"]
    assert store.list_namespaces() == [("s",)]


def test_store_from_url_key_namespace(store: ReflexaStore) -> None:
    """The DESIGN.md signature: ReflexaStore(url=..., api_key=..., namespace=...), closed with it."""
    config = store.client.config
    with ReflexaStore(url=config.base_url, api_key=config.api_key, namespace=store.namespace) as own:
        own.put(("u",), "k", {"v": 1})
        assert store.get(("u",), "k").value == {"v": 1}
    with pytest.raises(RuntimeError):  # its own client is closed
        own.get(("u",), "k")
