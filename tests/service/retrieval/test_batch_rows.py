"""A batch's first round is ranked from the batch's table of arrays
(service/retrieval/batch_rows.py): every request's candidates, cosines, lexical and
exact matches, scores and order are those the per-row path gives the same rows, to
the bit, with the citation filters, the partial admission teacher contexts use,
internal states and task-keyed kinds; on both engines."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient

from service.auth import Principal
from service.retrieval import service as retrieval_service
from service.retrieval.schemas import RetrieveRequest
from store.models import utcnow
from tests.fixtures import drain, post_trajectory
from tests.service.retrieval.test_retrieve_batch import REQUESTS, ROOMS, seed

ADMIN = Principal(key_id="k", role="admin", namespaces=frozenset({"*"}))
TASKED: list[dict[str, Any]] = [
    {"state": {"observation": ROOMS[0]}, "task": "chores", "k": 6, "kinds": ["exemplar", "evidence_card", "rubric"]},
    {"state": {"observation": ROOMS[2]}, "task": "errands", "k": 6, "internal_state": "find the trunk"},
    {
        "state": {"observation": ROOMS[3]},
        "task": "chores",
        "k": 6,
        "kinds": ["exemplar", "heuristic", "skill"],
        "filters": {"exclude_trajectory_ids": ["t1"], "exclude_tasks": ["chores"]},
    },
]


@pytest.fixture
def api(client: TestClient) -> TestClient:
    steps = seed(client)
    post_trajectory(client, "b", "t3", task="chores", steps=list(reversed(steps)), success=False)
    drain(client)
    return client


def scored_both_ways(
    api: TestClient, monkeypatch: pytest.MonkeyPatch, ask: Callable[[], object]
) -> tuple[list[Any], list[Any]]:
    """The `_Scored` of every request of `ask()`, from the batch's table, then from rows
    read per request (no prefetch: the per-row path), at one fixed clock."""
    retrieval = api.app.state.services.retrieval  # type: ignore[attr-defined]
    now = utcnow()
    monkeypatch.setattr(retrieval_service, "utcnow", lambda: now)
    kept: list[Any] = []
    original = retrieval._candidates

    def keep(*args: Any, **kw: Any) -> Any:
        kept.append(original(*args, **kw))
        return kept[-1]

    monkeypatch.setattr(retrieval, "_candidates", keep)
    ask()
    from_table = kept[:]
    kept.clear()
    monkeypatch.setattr(retrieval, "_prefetch", lambda *a, **kw: None)
    ask()
    return from_table, kept


def assert_same(from_table: list[Any], per_row: list[Any]) -> None:
    assert len(from_table) == len(per_row) > 1
    assert any(len(s.rows) > 2 for s in per_row)
    for a, b in zip(from_table, per_row, strict=True):
        assert [r.pk for r in a.rows] == [r.pk for r in b.rows]
        for name in ("state_sims", "internal_sims", "lexical"):
            x, y = getattr(a, name), getattr(b, name)
            assert x.dtype == y.dtype == np.float64, name
            assert np.array_equal(np.isnan(x), np.isnan(y)), name
            assert x[~np.isnan(x)].tobytes() == y[~np.isnan(y)].tobytes(), name
        for name in ("similarity", "exact", "score", "order"):
            assert getattr(a.scores, name).tobytes() == getattr(b.scores, name).tobytes(), name


def test_a_batch_ranks_its_table_as_the_rows_would_be(api: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    def ask() -> None:
        r = api.post("/v1/namespaces/b/retrieve/batch", json={"requests": REQUESTS + TASKED})
        assert r.status_code == 200, r.text

    from_table, per_row = scored_both_ways(api, monkeypatch, ask)
    assert_same(from_table, per_row)
    assert any(np.isnan(s.internal_sims).any() and not np.isnan(s.internal_sims).all() for s in per_row)
    assert any(s.scores.exact.any() for s in per_row)


def test_partial_admission_ranks_its_table_as_the_rows_would_be(
    api: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Teacher contexts' reads: exemplars kept when only some of their evidence is excluded."""
    retrieval = api.app.state.services.retrieval  # type: ignore[attr-defined]
    reqs = [
        RetrieveRequest.model_validate(
            {
                "state": {"observation": room},
                "task": "chores",
                "k": 5,
                "kinds": ["skill", "heuristic", "exemplar"],
                "filters": {"exclude_trajectory_ids": [excluded], "exclude_tasks": ["errands"]},
            }
        )
        for room in ROOMS
        for excluded in ("t1", "t3")
    ]

    def ask() -> None:
        partial = frozenset({"exemplar"})
        retrieval.retrieve_many(ADMIN, "b", reqs, field="trajectories", log=False, partial_kinds=partial)

    from_table, per_row = scored_both_ways(api, monkeypatch, ask)
    assert_same(from_table, per_row)
