"""A single retrieve reads its lexical matches' candidate rows in the lexical search's
thread, while the query is encoded (`RetrievalService._lexical_live`), and only the
dense search's other rows afterwards; when the encode ends first (a cached query),
it searches the vectors and reads their rows while the lexical search finishes (on
SQLite the request then reads the matches' other rows itself). On both engines each way serves exactly
what reading every candidate in one query serves, with every filter: the matches
that fail the filters are read once, left out, and not served."""

from __future__ import annotations

from concurrent.futures import Future
from typing import Any

import pytest
from fastapi.testclient import TestClient

from service.retrieval import service as retrieval_service
from tests.factories import step
from tests.fixtures import create_namespace, drain, post_trajectory

ROOMS = ["kitchen", "cellar", "attic", "garden", "study"]
ITEMS = ["key", "lamp", "coin", "rope", "map", "cup", "knife"]
COLOURS = ["red", "blue", "green", "black"]


def state(i: int) -> str:
    return (
        f"You are in the {ROOMS[i % 5]}. A {COLOURS[i % 4]} {ITEMS[i % 7]} lies on shelf {i % 11}; "
        f"the door to the {ROOMS[(i + 2) % 5]} is {('open', 'locked')[i % 2]}."
    )


@pytest.fixture
def api(client: TestClient) -> TestClient:
    # 120 states: more than a retrieve's first dense search (50), so the lexical
    # matches hold items the dense search did not return.
    create_namespace(client, "lx", ranking={"lexical_weight": 0.5})
    for t in range(12):
        post_trajectory(
            client,
            "lx",
            f"t{t}",
            task=f"task {t % 3}",
            environment=("house", "farm")[t % 2],
            agent=("ann", "bob", "cy")[t % 3],
            steps=[step(state(10 * t + s), f"take {ITEMS[s % 7]}", reward=float(s % 2)) for s in range(10)],
            success=t % 4 != 0,
        )
    drain(client)
    return client


BODIES: list[dict[str, Any]] = [
    {},
    {"k": 3},
    {"environment": "farm"},
    {"kinds": ["exemplar"]},
    {"filters": {"agent": "bob"}},
    {"filters": {"exclude_trajectory_ids": ["t1", "t4", "t7"]}},
    {"filters": {"exclude_tasks": ["task 1"]}},
    {"min_score": 0.4},
    {"mmr_lambda": 0.5, "k": 4},
]
QUERIES = [state(i) for i in (3, 57, 118)] + [
    "A red lamp lies on shelf 4 in the attic; the door is open.",
    "You are in the garden holding a rope and 3 coins.",
]


def row(item: dict[str, Any]) -> tuple[str, float, float, Any]:
    # The score to 1e-6: its recency factor moves with the clock between two requests.
    return (item["id"], round(item["score"], 6), item["similarity"], item["lexical_similarity"])


def served(api: TestClient, query: str, body: dict[str, Any]) -> list[tuple[str, float, float, Any]]:
    filters = {"status": ["candidate", "active"], **body.get("filters", {})}
    r = api.post(
        "/v1/namespaces/lx/retrieve", json={"state": {"observation": query}, "k": 8, **body, "filters": filters}
    )
    assert r.status_code == 200, r.text
    return [row(i) for i in r.json()["items"]]


def test_the_lexical_matches_rows_read_beside_the_encode_serve_what_one_read_serves(
    api: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    retrieval = api.app.state.services.retrieval  # type: ignore[attr-defined]
    original = retrieval._lexical_live
    preload = True
    preloaded: list[Any] = []

    def live(*args: Any) -> Any:
        hits, rows = original(*args)
        preloaded.append(rows)
        return (hits, rows) if preload else (hits, None)

    monkeypatch.setattr(retrieval, "_lexical_live", live)
    monkeypatch.setattr(retrieval_service, "_LEXICAL_SEARCHES", _Finished())  # done before the encode ends
    compared = 0
    for body in BODIES:
        for query in QUERIES:
            # Each case both ways, one right after the other: the same items, scores and order.
            preload = True
            beside = served(api, query, body)
            preload = False
            together = served(api, query, body)
            assert beside == together, (body, query)
            compared += bool(beside)
    assert compared > 30
    used = [rows for rows in preloaded[::2] if rows is not None]
    assert len(used) == len(BODIES) * len(QUERIES)  # every single retrieve read its matches' rows
    # Some matches failed the filters: read once, absent from the rows, not asked again.
    assert any(rows.asked - rows.rows.keys() for rows in used)


def test_a_batch_reads_its_rows_together_after_the_encode(api: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    retrieval = api.app.state.services.retrieval  # type: ignore[attr-defined]
    original = retrieval._lexical_live
    preloaded: list[Any] = []

    def live(*args: Any) -> Any:
        out = original(*args)
        preloaded.append(out[1])
        return out

    monkeypatch.setattr(retrieval, "_lexical_live", live)
    everything = {"status": ["candidate", "active"]}
    requests = [{"state": {"observation": q}, "k": 5, "filters": everything} for q in QUERIES]
    r = api.post("/v1/namespaces/lx/retrieve/batch", json={"requests": requests})
    assert r.status_code == 200, r.text
    assert preloaded == [None]
    singles = [served(api, q, {"k": 5, "filters": everything}) for q in QUERIES]
    assert [[row(i) for i in res["items"]] for res in r.json()["results"]] == singles


class _Deferred(Future):  # type: ignore[type-arg]
    """A lexical search still running when the encode ends: it runs when its result is asked for."""

    def __init__(self, fn: Any, *args: Any) -> None:
        super().__init__()
        self.call = (fn, args)

    def result(self, timeout: float | None = None) -> Any:
        if not super().done():
            fn, args = self.call
            self.set_result(fn(*args))
        return super().result(timeout)


class _Finished:
    """A lexical search done before the encode ends."""

    def submit(self, fn: Any, *args: Any) -> Future:  # type: ignore[type-arg]
        future: Future = Future()  # type: ignore[type-arg]
        future.set_result(fn(*args))
        return future


class _StillRunning:
    def submit(self, fn: Any, *args: Any) -> Future:  # type: ignore[type-arg]
        return _Deferred(fn, *args)


def test_a_cached_query_reads_its_dense_rows_while_the_lexical_search_finishes(
    api: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    retrieval = api.app.state.services.retrieval  # type: ignore[attr-defined]
    original = retrieval._read_rows
    original_live = retrieval._lexical_live
    reads: list[Any] = []

    def counted(*args: Any) -> Any:
        reads.append("rows")
        return original(*args)

    def live(*args: Any) -> Any:
        hits, rows = original_live(*args)
        reads.append(("lexical search done", rows is not None))
        return hits, rows

    monkeypatch.setattr(retrieval, "_read_rows", counted)
    monkeypatch.setattr(retrieval, "_lexical_live", live)
    postgres = api.app.state.services.db.is_postgres  # type: ignore[attr-defined]
    compared = 0
    for body in BODIES:
        for query in QUERIES:
            monkeypatch.setattr(retrieval_service, "_LEXICAL_SEARCHES", _StillRunning())
            reads.clear()
            early = served(api, query, body)
            # the dense hits' rows, then the search's: on PostgreSQL read by the search,
            # on SQLite (once the encode is over) left to the request, read with its
            # other candidates
            after = ["rows", ("lexical search done", True)] if postgres else [("lexical search done", False)]
            assert reads == ["rows", *after], (body, query)
            monkeypatch.setattr(retrieval_service, "_LEXICAL_SEARCHES", _Finished())
            reads.clear()
            late = served(api, query, body)
            assert reads == ["rows", ("lexical search done", True)]  # the matches' rows only, beside the encode
            assert early == late, (body, query)
            compared += bool(early)
    assert compared > 30
