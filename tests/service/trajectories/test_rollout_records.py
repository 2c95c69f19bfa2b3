"""A step's rollout record: the policy version that acted at the step and the
inference engine's per-token log-probs (and token ids) of its action. Stored
through the same idempotent ingest (single, batch, append), returned by GET,
exported by the `trajectories` dataset in both formats (null where not recorded,
never left out); refused with a 422 naming the field and the rule; part of a
step's content for replays (a different record is a conflict). On SQLite and
PostgreSQL (the `client` fixture's `database_url`).
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from fastapi.testclient import TestClient

from domain.hashing import canonical_hash
from service.app import create_app
from service.export.schemas import SCHEMAS
from service.trajectories import ingest
from service.trajectories.schemas import StepCreate, TrajectoryCreate
from tests.conftest import ADMIN_KEY, make_settings
from tests.factories import step, trajectory
from tests.fixtures import create_namespace, ns_path

NS = "rl"
ROLLOUT_KEYS = ("policy_version", "rollout_logprobs", "rollout_token_ids")
NONE = dict.fromkeys(ROLLOUT_KEYS)
# Values a JSON number round trip could change: a subnormal, many digits, zero, an integer.
LOGPROBS = [-0.125, -1.0000000000000002, -5e-324, 0.0, -40.0, -3]
TOKEN_IDS = [0, 17, 151_643, 2**31 - 1, 5, 9]


def recorded(observation: str, **fields: Any) -> dict[str, Any]:
    """A step with a rollout record."""
    body = {"policy_version": "ckpt-8", "rollout_logprobs": LOGPROBS, "rollout_token_ids": TOKEN_IDS}
    return step(observation, "act", **(body | fields))


def rollout(s: dict[str, Any]) -> dict[str, Any]:
    return {k: s[k] for k in ROLLOUT_KEYS}


EXPECTED = {
    "policy_version": "ckpt-8",
    "rollout_logprobs": [float(v) for v in LOGPROBS],
    "rollout_token_ids": TOKEN_IDS,
}


@pytest.fixture
def api(client: TestClient) -> TestClient:
    create_namespace(client, NS)
    return client


def get_steps(api: TestClient, id: str) -> list[dict[str, Any]]:
    r = api.get(f"{ns_path(NS)}/trajectories/{id}")
    assert r.status_code == 200, r.text
    return r.json()["steps"]  # type: ignore[no-any-return]


def error(r: Any) -> tuple[int, str, str]:
    e = r.json()["error"]
    return r.status_code, e["field"], e["rule"]


# -- the round trip -----------------------------------------------------------------


def test_single_batch_and_append_store_what_get_and_export_return(api: TestClient) -> None:
    path = ns_path(NS)
    body = trajectory("t1", policy_version="ckpt-7", steps=[recorded("a"), step("b", "wait")])
    assert api.post(f"{path}/trajectories", json=body).status_code == 201
    batch = {"trajectories": [trajectory("t2", steps=[step("c", "go", policy_version="ckpt-9")])]}
    assert api.post(f"{path}/trajectories/batch", json=batch).status_code == 201
    r = api.post(f"{path}/trajectories/t2/steps", json={"steps": [recorded("d", rollout_token_ids=None)]})
    assert r.status_code == 200 and r.json()["appended"] == 1

    t1, t2 = get_steps(api, "t1"), get_steps(api, "t2")
    assert [rollout(s) for s in t1] == [EXPECTED, NONE]  # not recorded: null, and not the trajectory's
    assert [rollout(s) for s in t2] == [
        NONE | {"policy_version": "ckpt-9"},
        EXPECTED | {"rollout_token_ids": None},
    ]
    assert api.get(f"{path}/trajectories/t1").json()["policy_version"] == "ckpt-7"
    listed = api.get(f"{path}/trajectories", params={"include_steps": "true"}).json()["items"]
    assert {t["id"]: [rollout(s) for s in t["steps"]] for t in listed} == {
        "t1": [rollout(s) for s in t1],
        "t2": [rollout(s) for s in t2],
    }

    r = api.get(f"{path}/export", params={"dataset": "trajectories"})
    assert r.status_code == 200, r.text
    lines = [json.loads(line) for line in r.text.splitlines()]
    assert all(
        list(s) == SCHEMAS["trajectories"].field("steps").type.value_type.names for t in lines for s in t["steps"]
    )
    assert {t["id"]: [rollout(s) for s in t["steps"]] for t in lines} == {
        "t1": [EXPECTED, NONE],
        "t2": [rollout(s) for s in t2],
    }

    r = api.get(f"{path}/export", params={"dataset": "trajectories", "format": "parquet"})
    table = pq.read_table(io.BytesIO(r.content))
    step_type = table.schema.field("steps").type.value_type
    assert step_type.field("rollout_logprobs").type == pa.list_(pa.float64())
    assert step_type.field("rollout_token_ids").type == pa.list_(pa.int32())
    assert {t["id"]: [rollout(s) for s in t["steps"]] for t in table.to_pylist()} == {
        t["id"]: [rollout(s) for s in t["steps"]] for t in lines
    }


def test_prompt_datasets_do_not_carry_the_rollout_arrays(api: TestClient) -> None:
    body = trajectory("won", steps=[recorded("a", done=True)], success=True)
    assert api.post(f"{ns_path(NS)}/trajectories", json=body).status_code == 201
    r = api.get(f"{ns_path(NS)}/export", params={"dataset": "sft"})
    assert r.status_code == 200
    assert "rollout" not in r.text and len(r.text.splitlines()) == 1


# -- refusals ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "field", "rule"),
    [
        ({"rollout_logprobs": [-1.0, 0.25]}, "steps[1].rollout_logprobs[1]", "logprob"),
        ({"rollout_logprobs": [-1.0, -2.0, 1e-9]}, "steps[1].rollout_logprobs[2]", "logprob"),
        ({"rollout_token_ids": [3, -1]}, "steps[1].rollout_token_ids[1]", "token_id"),
        ({"rollout_token_ids": [2**31]}, "steps[1].rollout_token_ids[0]", "token_id"),
        ({"rollout_logprobs": [-1.0], "rollout_token_ids": [1, 2]}, "steps[1].rollout_token_ids", "same_length"),
        ({"rollout_logprobs": [-1.0] * 9}, "steps[1].rollout_logprobs", "max_rollout_tokens_per_step"),
        ({"rollout_token_ids": [1] * 9}, "steps[1].rollout_token_ids", "max_rollout_tokens_per_step"),
        ({"rollout_logprobs": ["-1"]}, "steps[1].rollout_logprobs[0]", "float_type"),
        ({"rollout_token_ids": [1.0]}, "steps[1].rollout_token_ids[0]", "int_type"),
        ({"policy_version": ""}, "steps[1].policy_version", "string_too_short"),
        ({"policy_version": "v" * 201}, "steps[1].policy_version", "string_too_long"),
    ],
)
def test_bad_records_are_422_naming_the_field_and_rule(
    database_url: str, tmp_path: Path, fields: dict[str, Any], field: str, rule: str
) -> None:
    settings = make_settings(database_url, tmp_path, limits={"max_rollout_tokens_per_step": 8})
    with TestClient(create_app(settings), headers={"Authorization": f"Bearer {ADMIN_KEY}"}) as api:
        create_namespace(api, NS)
        path = ns_path(NS)
        steps = [step("a"), step("b", **fields)]
        r = api.post(f"{path}/trajectories", json=trajectory("t", steps=steps))
        assert error(r) == (422, field, rule), r.text
        r = api.post(
            f"{path}/trajectories/batch", json={"trajectories": [trajectory("u"), trajectory("t", steps=steps)]}
        )
        assert error(r) == (422, f"trajectories[1].{field}", rule), r.text
        assert api.post(f"{path}/trajectories", json=trajectory("t")).status_code == 201
        r = api.post(f"{path}/trajectories/t/steps", json={"steps": steps})
        assert error(r) == (422, field, rule), r.text
        assert api.get(f"{path}/trajectories/t").json()["step_count"] == 0  # nothing half-stored
        rows = api.get(f"{path}/export", params={"dataset": "trajectories"}).text.splitlines()
        assert [json.loads(line)["id"] for line in rows] == ["t"]


@pytest.mark.parametrize("number", ["NaN", "Infinity", "-Infinity"])
def test_non_finite_log_probs_are_422(api: TestClient, number: str) -> None:
    """Python's JSON parser takes NaN and ±Infinity; no column could store them."""
    text = json.dumps(trajectory("t", steps=[step("a"), step("b", rollout_logprobs=[-1.0, -2.0])]))
    text = text.replace("-2.0", number)
    r = api.post(f"{ns_path(NS)}/trajectories", content=text, headers={"Content-Type": "application/json"})
    assert error(r) == (422, "steps[1].rollout_logprobs[1]", "finite_number"), r.text


# -- idempotency ------------------------------------------------------------------------


def test_same_record_replays_another_conflicts(api: TestClient) -> None:
    path = ns_path(NS)
    body = trajectory("t", steps=[recorded("a")])
    assert api.post(f"{path}/trajectories", json=body).status_code == 201
    assert api.post(f"{path}/trajectories", json=body).status_code == 200  # a replay
    for change in (
        {"rollout_logprobs": [*LOGPROBS[:-1], -3.5]},
        {"rollout_token_ids": [*TOKEN_IDS[:-1], 10]},
        {"policy_version": "ckpt-9"},
        {"rollout_logprobs": None},
    ):
        other = trajectory("t", steps=[recorded("a", **change)])
        r = api.post(f"{path}/trajectories", json=other)
        assert error(r) == (409, "id", "idempotent_replay"), change
        r = api.post(f"{path}/trajectories/batch", json={"trajectories": [other]})
        assert error(r) == (409, "trajectories[0].id", "idempotent_replay"), change
        r = api.post(f"{path}/trajectories/t/steps", json={"steps": [{**recorded("a", **change), "index": 0}]})
        assert error(r) == (409, "steps[0]", "idempotent_replay"), change
    r = api.post(f"{path}/trajectories/t/steps", json={"steps": [{**recorded("a"), "index": 0}]})
    assert r.status_code == 200 and r.json()["appended"] == 0  # the same step again: a replay
    assert [rollout(s) for s in get_steps(api, "t")] == [EXPECTED]  # nothing was changed or dropped


def test_a_step_without_a_record_hashes_as_before_the_fields_existed() -> None:
    """Steps and requests stored before the rollout fields replay: unset, the fields
    are left out of both hashes (the bodies below are what the hashes covered then)."""
    s = StepCreate.model_validate({"state": {"observation": "o"}, "action": "a", "reward": 1.0})
    old_step = {
        "state": {"observation": "o", "data": None},
        "internal_state": None,
        "action": "a",
        "result": None,
        "error": None,
        "reward": 1.0,
        "done": False,
        "truncated": False,
        "caused_failure": False,
        "metadata": None,
    }
    assert ingest.step_hash(s) == canonical_hash(old_step)
    t = TrajectoryCreate.model_validate(
        {"id": "t", "task": "x", "steps": [{"state": {"observation": "o"}, "action": "a", "reward": 1.0}]}
    )
    old_request = {
        "id": "t",
        "task": "x",
        "environment": None,
        "agent": None,
        "policy_version": None,
        "group_id": None,
        "metadata": None,
        "steps": [{"index": None, **old_step}],
        "outcome": None,
        "retrieval_ids": None,
    }
    assert ingest.request_hash(t) == canonical_hash(old_request)
    recorded_step = StepCreate.model_validate({**step("o", "a", reward=1.0), "rollout_logprobs": [-1.0]})
    assert ingest.step_hash(recorded_step) == canonical_hash({**old_step, "rollout_logprobs": [-1.0]})
