"""An append's step hash and row, built from the parsed step's attributes, are what
the model's JSON dump and a field-by-field read give: a hash stored before is still
matched by a replay, and every field lands in its column."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from domain.hashing import canonical_hash
from domain.steps import step_columns
from service.trajectories import ingest
from service.trajectories.schemas import StepCreate
from store.trajectory_reader import STEP_FIELDS

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**40), 2**40)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=8,
)
objects = st.dictionaries(st.text(max_size=5), json_values, max_size=3)
maybe_text = st.none() | st.text(max_size=10)


@st.composite
def steps(draw: st.DrawFn) -> StepCreate:
    body: dict[str, Any] = {
        "state": {"observation": draw(st.text(max_size=10))},
        "action": draw(st.text(max_size=10) | objects),
    }
    optional = {
        "index": st.integers(0, 100),
        "internal_state": maybe_text,
        "result": maybe_text,
        "error": maybe_text,
        "reward": st.none() | st.floats(-10, 10) | st.integers(-5, 5),  # an int is parsed to a float
        "done": st.booleans(),
        "truncated": st.booleans(),
        "caused_failure": st.booleans(),
        "policy_version": st.none() | st.sampled_from(["v1", "policy-7"]),
        "rollout_logprobs": st.none() | st.lists(st.floats(-20, 0) | st.integers(-5, 0), max_size=4),
        "rollout_token_ids": st.none() | st.lists(st.integers(0, 2**31 - 1), max_size=4),
        "metadata": st.none() | objects,
    }
    # a field added to StepCreate must be drawn here too (its dump may differ from its value)
    assert set(StepCreate.model_fields) == {"state", "action", *optional}
    for name, strategy in optional.items():
        if draw(st.booleans()):
            body[name] = draw(strategy)
    if draw(st.booleans()):
        body["state"]["data"] = draw(st.none() | objects)
    return StepCreate.model_validate(body)


@settings(max_examples=300, deadline=None)
@given(step=steps())
def test_the_hash_is_the_dumps(step: StepCreate) -> None:
    unset = {f for f in ("policy_version", "rollout_logprobs", "rollout_token_ids") if getattr(step, f) is None}
    assert ingest.step_hash(step) == canonical_hash(step.model_dump(mode="json", exclude={"index", *unset}))


@settings(max_examples=200, deadline=None)
@given(step=steps())
def test_the_columns_are_the_fields(step: StepCreate) -> None:
    dumped = step.model_dump()
    expected = {
        ("metadata_" if name == "metadata" else name): (
            dumped["state"][{"observation": "observation", "state_data": "data"}[name]]
            if name in ("observation", "state_data")
            else dumped[name]
        )
        for name in STEP_FIELDS
    }
    assert step_columns(step) == expected
