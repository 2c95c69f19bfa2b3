"""POST /v1/distill/advantages in its two body formats: the binary layout
(service.distill.advantages.binary) gives the JSON path's answer to the bit, on the
method cases of test_advantages_api; a malformed binary body is a 422 naming what is
wrong; and the JSON fast path (lists read by numpy, pydantic on the rest) answers
bad values exactly as pydantic on the whole body does."""

from __future__ import annotations

import copy
import json
import struct
from typing import Any

import numpy as np
import orjson
import pytest
from fastapi.testclient import TestClient

from service.distill.advantages.binary import MEDIA_TYPE, read
from service.distill.advantages.schemas import AdvantagesResponse
from tests.service.distill.test_advantages_api import (
    T20,
    URL,
    error_of,
    off_policy_batch,
    small_batch,
    verl_batch,
    with_change,
)

COLUMN_FIELDS = ("mask", "token_steps", "teacher_entropy", "advantages")
PER_TOKEN = ("advantages", "token_rewards", "is_weights", "kl")  # the answer's columns


def columns_of(traj: dict[str, Any]) -> dict[str, list[Any]]:
    """A trajectory's per-token lists by column name (logprobs.teacher.NAME for a named one)."""
    out = {f: traj[f] for f in COLUMN_FIELDS if isinstance(traj.get(f), list)}
    for kind, value in (traj.get("logprobs") or {}).items():
        if isinstance(value, dict):
            out |= {f"logprobs.{kind}.{name}": v for name, v in value.items()}
        elif value is not None:
            out[f"logprobs.{kind}"] = value
    return out


def to_binary(body: dict[str, Any], floats: str = "float64") -> bytes:
    """The body with every per-token list that all trajectories send as a column."""
    header = copy.deepcopy(body)
    trajs = [t for g in header["groups"] for t in g["trajectories"]]
    per = [columns_of(t) for t in trajs]
    shared = [c for c in per[0] if all(c in p for p in per)]
    for t in trajs:
        for column in shared:
            parts = column.split(".")
            holder = t["logprobs"] if parts[0] == "logprobs" else t
            if len(parts) == 3:
                del holder[parts[1]][parts[2]]
                if not holder[parts[1]]:
                    del holder[parts[1]]
            else:
                del holder[parts[-1]]
        if t.get("logprobs") == {}:
            del t["logprobs"]
    tokens = [len(p[shared[0]]) if shared else 0 for p in per]
    arrays, data = [], []
    for column in shared:
        dtype = "int64" if column in ("mask", "token_steps") else floats
        arrays.append({"field": column, "dtype": dtype})
        data.append(np.concatenate([np.asarray(p[column], dtype=dtype) for p in per]).tobytes())
    head = orjson.dumps({"tokens": tokens, "arrays": arrays, "request": header})
    return b"RXA1" + struct.pack("<I", len(head)) + head + b"".join(data)


def post_binary(client: TestClient, raw: bytes, accept: str = "application/json") -> Any:
    return client.post(URL, content=raw, headers={"content-type": MEDIA_TYPE, "accept": accept})


def post_json(client: TestClient, body: Any) -> Any:
    return client.post(URL, content=json.dumps(body), headers={"content-type": "application/json"})


def cases() -> dict[str, dict[str, Any]]:
    verl, _ = verl_batch()
    horizons = small_batch()
    for g in horizons["groups"]:
        for t in g["trajectories"]:
            t["logprobs"]["teacher"] = {"h1": t["logprobs"]["teacher"], "h4": t["logprobs"]["teacher"]}
    direct = copy.deepcopy(horizons)
    for g in direct["groups"]:
        for t in g["trajectories"]:
            lp = t["logprobs"]
            t["logprobs"] = {"post": {"rl": lp["teacher"]["h1"]}, "pre": {"rl": lp["student"]}}
    off = off_policy_batch()
    off["groups"][0]["trajectories"][1].update(mask=[1], advantages=[0.5])  # every trajectory sends both
    off["groups"][0]["trajectories"][0]["advantages"] = [1.0, 1.0, 0.5, 0.0]
    return {
        "token_signal (verl-shaped: mask, steps, discount, clip)": verl,
        "token_signal": small_batch(),
        "horizon_agreement": {**horizons, "method": "horizon_agreement", "params": {"beta": 0.5}},
        "step_shaping": {**horizons, "method": "step_shaping", "params": {"teacher": "h4", "lambda": 0.5}},
        "direct_opd": {**direct, "method": "direct_opd", "params": {}},
        "grpo with kl and is": {**off, "params": {"kl": {"coef": 0.1, "estimator": "k3"}, "is": {"mode": "tis"}}},
        "rloo, mis": {**off, "method": "rloo", "params": {"is": {"mode": "mis", "level": "sequence"}}},
    }


CASES = cases()


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_binary_body_gives_the_json_answer_to_the_bit(client: TestClient, case: str) -> None:
    body = CASES[case]
    by_json = post_json(client, body)
    assert by_json.status_code == 200, by_json.text
    by_binary = post_binary(client, to_binary(body))
    assert by_binary.status_code == 200, by_binary.text
    assert by_binary.content == by_json.content
    # the binary answer: the same JSON with the per-token lists as float64 columns, bit for bit
    answer = post_binary(client, to_binary(body), accept=MEDIA_TYPE)
    assert answer.headers["content-type"] == MEDIA_TYPE
    decoded = read(
        answer.content,
        "response",
        {f: ("float64",) for f in ("advantages", "token_rewards", "is_weights", "kl")},
        10**9,
    )
    expected = by_json.json()
    offsets = np.concatenate([[0], np.cumsum(decoded.tokens)])
    for t, (got, want) in enumerate(zip(decoded.body["trajectories"], expected["trajectories"], strict=True)):
        for field, column in decoded.columns.items():
            values = column[offsets[t] : offsets[t + 1]]
            assert np.array_equal(values, np.array(want[field], dtype=np.float64)), field
            assert values.tobytes() == np.array(want[field], dtype=np.float64).tobytes()
        assert got == {k: v for k, v in want.items() if k not in PER_TOKEN}  # a null per-token field: no column
        assert {f for f in PER_TOKEN if want[f] is not None} == set(decoded.columns)
    assert {k: v for k, v in decoded.body.items() if k != "trajectories"} == {
        k: v for k, v in expected.items() if k != "trajectories"
    }


def test_float32_columns_equal_float32_values_sent_as_json(client: TestClient) -> None:
    body, _ = verl_batch()  # its log-probs are float32 values, as tensor.tolist() gives them
    assert post_binary(client, to_binary(body, "float32")).content == post_json(client, body).content


def test_columns_and_header_lists_mix(client: TestClient) -> None:
    body, _ = verl_batch()
    raw = to_binary({**body, "groups": body["groups"]})
    expected = post_json(client, body).content
    # the same body with the masks left in the header: only the other lists are columns
    head_len = struct.unpack_from("<I", raw, 4)[0]
    header = orjson.loads(raw[8 : 8 + head_len])
    n = sum(header["tokens"])
    i = [a["field"] for a in header["arrays"]].index("mask")
    offset = 8 + head_len + 8 * n * i
    masks = np.frombuffer(raw, dtype="<i8", count=n, offset=offset)
    bounds = np.concatenate([[0], np.cumsum(header["tokens"])])
    t = 0
    for g in header["request"]["groups"]:
        for traj in g["trajectories"]:
            traj["mask"] = masks[bounds[t] : bounds[t + 1]].tolist()
            t += 1
    del header["arrays"][i]
    head = orjson.dumps(header)
    data = raw[8 + head_len : offset] + raw[offset + 8 * n :]
    mixed = b"RXA1" + struct.pack("<I", len(head)) + head + data
    assert post_binary(client, mixed).content == expected


def binary_with(header_change: Any = None, data: bytes | None = None, body: dict[str, Any] | None = None) -> bytes:
    raw = to_binary(body or small_batch())
    head_len = struct.unpack_from("<I", raw, 4)[0]
    header = orjson.loads(raw[8 : 8 + head_len])
    if header_change is not None:
        header_change(header)
    head = orjson.dumps(header)
    return b"RXA1" + struct.pack("<I", len(head)) + head + (raw[8 + head_len :] if data is None else data)


def _set_dtype(field: str, dtype: str) -> Any:
    def change(header: dict[str, Any]) -> None:
        for spec in header["arrays"]:
            if spec["field"] == field:
                spec["dtype"] = dtype

    return change


def _nan_at(raw: bytes, column: int, index: int) -> bytes:
    head_len = struct.unpack_from("<I", raw, 4)[0]
    data = bytearray(raw)
    struct.pack_into("<d", data, 8 + head_len + 8 * (12 * column + index), float("nan"))
    return bytes(data)


BAD_BINARY = {
    "too_short": (b"RXA", "body", "binary_truncated"),
    "wrong_magic": (b"RXA2" + to_binary(small_batch())[4:], "body", "binary_magic"),
    "header_past_the_end": (
        to_binary(small_batch())[:4] + struct.pack("<I", 10**6) + b"{}",
        "body",
        "binary_truncated",
    ),
    "header_not_json": (b"RXA1" + struct.pack("<I", 3) + b"{x}", "header", "binary_header"),
    "header_keys": (binary_with(lambda h: h.pop("tokens")), "header", "binary_header"),
    "truncated_arrays": (to_binary(small_batch())[:-5], "body", "binary_truncated"),
    "trailing_bytes": (to_binary(small_batch()) + b"\0" * 8, "body", "binary_trailing"),
    "unknown_column": (
        binary_with(lambda h: h["arrays"][0].update(field="logprobs.oracle")),
        "header.arrays[0].field",
        "binary_field",
    ),
    "named_student": (
        binary_with(lambda h: h["arrays"][0].update(field="logprobs.student.x")),
        "header.arrays[0].field",
        "binary_field",
    ),
    "float_mask": (
        binary_with(_set_dtype("mask", "float64"), body=verl_batch()[0]),
        "header.arrays[0].dtype",
        "binary_dtype",
    ),
    "float16": (binary_with(_set_dtype("logprobs.student", "float16")), "header.arrays[0].dtype", "binary_dtype"),
    "token_counts": (binary_with(lambda h: h["tokens"].append(0)), "header.tokens", "same_length"),
    "negative_count": (binary_with(lambda h: h["tokens"].__setitem__(0, -1)), "header.tokens", "binary_header"),
    "column_and_header": (
        binary_with(lambda h: h["request"]["groups"][1]["trajectories"][0].update(logprobs={"student": [-1.0, -1.0]})),
        "groups[1].trajectories[0].logprobs.student",
        "binary_conflict",
    ),
    "nan": (_nan_at(to_binary(small_batch()), 1, 7), "groups[1].trajectories[1].logprobs.teacher[1]", "finite_number"),
    "length_against_a_header_list": (
        binary_with(lambda h: h["request"]["groups"][2]["trajectories"][0].update(mask=[1, 1, 1])),
        "groups[2].trajectories[0].mask",
        "same_length",
    ),
    "positive_logprob": (
        to_binary(with_change([*T20, "logprobs", "student"], [0.5, -1.0])),
        "groups[2].trajectories[0].logprobs.student[0]",
        "logprob",
    ),
    "header_schema": (
        binary_with(lambda h: h["request"].update(method="ppo")),
        "method",
        "literal_error",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_BINARY))
def test_a_bad_binary_body_is_a_422_naming_the_problem(client: TestClient, case: str) -> None:
    raw, field, rule = BAD_BINARY[case]
    r = post_binary(client, raw)
    assert error_of(r) == (422, field, rule), r.text


def test_a_binary_body_over_the_limits(client: TestClient, settings: Any, tmp_path: Any) -> None:
    from service.app import create_app
    from tests.conftest import ADMIN_KEY, make_settings

    limited = make_settings(
        settings.database_url, tmp_path, limits={"max_body_bytes": 4096, "max_advantage_tokens": 10}
    )
    with TestClient(create_app(limited), headers={"Authorization": f"Bearer {ADMIN_KEY}"}) as c:
        assert error_of(post_binary(c, to_binary(small_batch()) + b"\0" * 5000)) == (413, "body", "max_body_bytes")
        assert error_of(post_binary(c, to_binary(small_batch()))) == (422, "header.tokens", "max_advantage_tokens")


# The JSON fast path: values numpy would read but pydantic's strict types refuse take
# pydantic's answer, the same as with FastAPI's declared body (the slow path).
NUMPY_READS = {
    "bool_in_floats": ([*T20, "logprobs", "student"], [-1.0, True]),
    "bool_mask": ([*T20, "mask"], [True, False]),
    "numeric_string": ([*T20, "logprobs", "student"], [-1.0, "-1.5"]),
    "null_item": ([*T20, "logprobs", "teacher"], [-1.0, None]),
    "nested": ([*T20, "logprobs", "student"], [[-1.0], [-2.0]]),
    "float_mask": ([*T20, "mask"], [1.0, 0.0]),
    "huge_step": ([*T20, "token_steps"], [0, 2**64]),
    "int_beyond_int64": ([*T20, "token_steps"], [0, 2**63]),
    "object_not_list": ([*T20, "teacher_entropy"], {"a": 1.0}),
}


@pytest.mark.parametrize("case", sorted(NUMPY_READS))
def test_json_values_numpy_would_misread_get_pydantics_answer(
    client: TestClient, case: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    body = with_change(*NUMPY_READS[case])
    fast = post_json(client, body)
    assert fast.status_code == 422, fast.text
    # the slow path for every body: the standard library's parser and pydantic on everything, as FastAPI does
    monkeypatch.setattr("service.distill.advantages.body._may_hold_bool_items", lambda raw: True)
    slow = post_json(client, body)
    assert (fast.status_code, fast.content) == (slow.status_code, slow.content)


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_fast_json_path_answers_as_pydantic_on_the_whole_body(
    client: TestClient, case: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    fast = post_json(client, CASES[case])
    monkeypatch.setattr("service.distill.advantages.body._may_hold_bool_items", lambda raw: True)
    slow = post_json(client, CASES[case])
    assert fast.status_code == slow.status_code == 200
    assert fast.content == slow.content
    # orjson writes what the response model's own JSON serializer (FastAPI's before) writes, byte for byte
    assert AdvantagesResponse.model_validate_json(fast.content).model_dump_json().encode() == fast.content
