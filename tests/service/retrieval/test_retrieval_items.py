"""The retrieved items are built without validation (`RetrievedItem.model_construct`,
service/retrieval/service.py): every value must already be what validation would make
of it, type included (a numpy float equals a float but is not one), for every kind,
with and without internal states, lexical texts, evidence and exact matches."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from service.retrieval.schemas import RetrievedItem
from tests.factories import step
from tests.fixtures import create_namespace, drain, post_trajectory

KITCHEN = "You are in the kitchen. A kettle sits on the stove next to a sink."
GARDEN = "You are in the garden. Roses grow by a wooden fence under the oak tree."


def same_types(a: Any, b: Any, at: str = "") -> None:
    assert type(a) is type(b), f"{at}: {type(a).__name__} built, {type(b).__name__} validated"
    if isinstance(a, dict):
        assert a.keys() == b.keys(), at
        for key in a:
            same_types(a[key], b[key], f"{at}.{key}")
    elif isinstance(a, list):
        assert len(a) == len(b), at
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            same_types(x, y, f"{at}[{i}]")
    else:
        assert a == b, at


@pytest.mark.parametrize("internal", [False, True])
def test_built_items_equal_validated_ones_field_by_field(
    client: TestClient, monkeypatch: pytest.MonkeyPatch, internal: bool
) -> None:
    create_namespace(client, "mem")
    thought = {"internal_state": "I want tea."} if internal else {}
    first = [step(KITCHEN, "boil water", reward=0.0, **thought), step(GARDEN, "water roses", reward=1.0)]
    post_trajectory(client, "mem", "t1", task="chores", steps=first, outcome={"success": True})
    post_trajectory(client, "mem", "t2", task="chores", steps=[step(GARDEN, "dig")], outcome={"success": False})
    assert drain(client) >= 2
    retrieval = client.app.state.services.retrieval  # type: ignore[attr-defined]
    original = retrieval._retrieve  # what the route and every in-process caller answer with
    built: list[RetrievedItem] = []

    def keep(*args: Any, **kw: Any) -> Any:
        answers, records = original(*args, **kw)
        built.extend(item for answer in answers for item in answer.items)
        return answers, records

    monkeypatch.setattr(retrieval, "_retrieve", keep)
    for body in (
        {"state": {"observation": KITCHEN}, **thought, "k": 10},  # an exact match
        {"state": {"observation": "A garden with roses."}, "k": 10, "kinds": ["exemplar", "skill", "heuristic"]},
    ):
        r = client.post("/v1/namespaces/mem/retrieve", json=body)
        assert r.status_code == 200, r.text
    assert len(built) >= 3 and any(i.exact_match for i in built) and any(i.evidence for i in built)
    assert any(i.lexical_similarity is not None for i in built)
    assert not internal or any(i.internal_similarity is not None for i in built)
    for item in built:
        validated = RetrievedItem.model_validate(item.model_dump())
        same_types(item.model_dump(), validated.model_dump(), item.id)
        assert item.model_fields_set == validated.model_fields_set
