"""The JSON body of POST /v1/distill/advantages read by simdjson (per-token lists
copied into numpy by its C++) gives what the orjson reading gives, to the bit, or
hands the body to the orjson path: on generated bodies, on the method cases of
test_advantages_bodies, and on every body simdjson reads differently from orjson."""

from __future__ import annotations

import copy
import struct
from typing import Any

import numpy as np
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from service.distill.advantages import body as advantage_body
from tests.service.distill.test_advantages_api import T20, with_change
from tests.service.distill.test_advantages_bodies import CASES


def orjson_reading(raw: bytes) -> tuple[Any, dict[Any, np.ndarray]]:
    doc = orjson.loads(raw)
    return doc, advantage_body._take_json_arrays(doc)


def assert_same_reading(raw: bytes) -> None:
    doc, arrays = advantage_body._simd_json_arrays(raw)
    want_doc, want_arrays = orjson_reading(raw)
    assert doc == want_doc
    assert arrays.keys() == want_arrays.keys()
    for slot, arr in arrays.items():
        want = want_arrays[slot]
        assert arr.dtype == want.dtype and arr.shape == want.shape, slot
        assert arr.tobytes() == want.tobytes(), slot  # to the bit: -0.0, subnormals, the last digit
        assert arr.flags.writeable


floats = st.one_of(
    st.floats(allow_nan=False, allow_infinity=False),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.sampled_from([-0.0, 5e-324, 2.2250738585072014e-308, 1.7976931348623157e308, -1e-7, 0.1]),
)
float_lists = st.lists(floats, max_size=12)
int_lists = st.lists(st.integers(min_value=-(2**63), max_value=2**63 - 1), max_size=12)
other = st.recursive(
    st.none() | st.booleans() | st.text(max_size=8) | st.floats(allow_nan=False, allow_infinity=False),
    lambda inner: st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=6,
)
logprobs = st.fixed_dictionaries(
    {},
    optional={
        "student": float_lists,
        "rollout": float_lists,
        "ref": float_lists,
        "teacher": float_lists | st.dictionaries(st.sampled_from(["h1", "h2", "ü"]), float_lists, max_size=2),
        "pre": float_lists,
        "post": st.none(),
        "unknown": other,
    },
)
trajectory = st.fixed_dictionaries(
    {"id": st.text(max_size=6), "reward": floats | st.none()},
    optional={
        "logprobs": logprobs,
        "mask": int_lists,
        "token_steps": int_lists,
        "teacher_entropy": float_lists,
        "advantages": float_lists | st.none() | st.text(max_size=3),
        "metadata": other,
    },
)
bodies = st.fixed_dictionaries(
    {
        "groups": st.lists(
            st.fixed_dictionaries({"group_id": st.text(max_size=4), "trajectories": st.lists(trajectory, max_size=3)}),
            max_size=3,
        )
    },
    optional={"method": st.sampled_from(["grpo", "token_signal"]), "params": other},
)


@settings(max_examples=300, deadline=None)
@given(bodies)
def test_simdjson_reads_generated_bodies_as_orjson_does(body: dict[str, Any]) -> None:
    # a JSON true/false in a list never reaches either reader (the slow path takes it)
    raw = orjson.dumps(body)
    try:
        assert_same_reading(raw)
    except advantage_body._Fallback:
        # handed to the orjson path: a generated string such as "[[" reads, to the byte
        # scan, like a list that may open inside a list
        assert advantage_body._may_nest_lists(raw)


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_method_cases_take_the_simdjson_reading(case: str) -> None:
    raw = orjson.dumps(CASES[case])
    assert_same_reading(raw)  # raises _Fallback if simdjson did not take it
    assert advantage_body._simd_json_arrays(raw)[1]  # it did take per-token lists


def test_float32_values_as_verl_sends_them_read_to_the_bit() -> None:
    values = np.random.default_rng(3).normal(-2, 1, 2_000).astype(np.float32)
    body = with_change([*T20, "logprobs", "student"], values.tolist())
    body = with_change([*T20, "logprobs", "teacher"], (values * 0.5).tolist(), body)
    assert_same_reading(orjson.dumps(body))


# Bodies whose simdjson reading could differ from orjson's, by construction: each must
# take the orjson path (_Fallback), where the route answers as before.
DIFFERENT_READINGS = {
    "byte order mark": b"\xef\xbb\xbf" + orjson.dumps(CASES[sorted(CASES)[0]]),
    "nested list (as_buffer flattens)": orjson.dumps(with_change([*T20, "logprobs", "student"], [[-1.0], [-2.0]])),
    "float in an int list": orjson.dumps(with_change([*T20, "mask"], [1.0, 0.0])),
    "string in a float list": orjson.dumps(with_change([*T20, "logprobs", "student"], [-1.0, "-1.5"])),
    "null in a float list": orjson.dumps(with_change([*T20, "logprobs", "teacher"], [-1.0, None])),
    "int past 64 bits": orjson.dumps(with_change([*T20, "token_steps"], [0, 2**64 - 1])).replace(
        b"18446744073709551615", b"18446744073709551616"
    ),
    "int past int64 in an int list": orjson.dumps(with_change([*T20, "token_steps"], [0, 2**63])),
    "repeated key": orjson.dumps(with_change([*T20, "mask"], [1])).replace(b'"mask":[1]', b'"mask":[1],"mask":[0]'),
    "not an object": b"[1, 2]",
    "invalid UTF-8": b'{"groups": [], "x": "\xff"}',
    "trailing bytes": orjson.dumps(CASES[sorted(CASES)[0]]) + b" x",
}


@pytest.mark.parametrize("case", sorted(DIFFERENT_READINGS))
def test_bodies_simdjson_could_read_differently_take_the_orjson_path(case: str) -> None:
    with pytest.raises(advantage_body._Fallback):
        advantage_body._simd_json_arrays(DIFFERENT_READINGS[case])


def test_a_parser_is_reused_and_no_more_are_kept_than_the_bound() -> None:
    raw = orjson.dumps(CASES[sorted(CASES)[0]])
    for _ in range(advantage_body.PARSERS_KEPT + 3):
        advantage_body._simd_json_arrays(raw)
    assert 1 <= advantage_body._PARSERS.qsize() <= advantage_body.PARSERS_KEPT
    # an array read from a parser stays valid after the parser reads the next body
    first = advantage_body._simd_json_arrays(orjson.dumps(with_change([*T20, "logprobs", "student"], [-0.25, -4.0])))
    advantage_body._simd_json_arrays(orjson.dumps(copy.deepcopy(CASES[sorted(CASES)[-1]])))
    taken = first[1][(2, 0, "logprobs.student", None)]
    assert struct.unpack("<2d", taken.tobytes()) == (-0.25, -4.0)
