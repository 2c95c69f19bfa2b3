"""`LimitChecker._plainly_within`, the shortcut before the size-and-depth walk of a
structured value: whenever it says a value is plainly within the limits, the walk
passes it; it says so for ordinary values (or it would save nothing); and the depth
it counts is the walk's."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from domain.errors import InvalidInput
from service.limits.checks import LimitChecker, _nesting
from service.settings import Limits

values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(0, 9)
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False)
    | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=16,
)


def _walk_passes(checker: LimitChecker, value: Any) -> bool:
    """The walk alone, without the shortcut."""
    checker._plainly_within = lambda _value: False  # type: ignore[method-assign]
    try:
        checker.json(value, "data")
    except InvalidInput:
        return False
    finally:
        del checker._plainly_within
    return True


def _depth(value: Any) -> int:
    """Depth as LimitChecker.json counts it, written the plain recursive way."""
    children = value.values() if isinstance(value, dict) else value if isinstance(value, list) else ()
    return 1 + max((_depth(c) for c in children), default=0)


@settings(max_examples=800, deadline=None)
@example(value=0, per_byte=7, offset=0, max_depth=1)  # the bound's tightest case: 8 counted, 1 byte written
@given(value=values, per_byte=st.integers(1, 9), offset=st.integers(-2, 2), max_depth=st.integers(1, 6))
def test_what_the_shortcut_passes_the_walk_passes(value: Any, per_byte: int, offset: int, max_depth: int) -> None:
    """The size limit is drawn near multiples of the value's compact JSON size, where
    the shortcut's bound sits."""
    max_bytes = max(1, per_byte * len(json.dumps(value, separators=(",", ":"))) + offset)
    checker = LimitChecker(Limits(max_json_bytes=max_bytes, max_json_depth=max_depth))
    if checker._plainly_within(value):
        assert _walk_passes(checker, value)


@settings(max_examples=300, deadline=None)
@given(value=values, most=st.integers(1, 8))
def test_the_nesting_is_the_walks_depth(value: Any, most: int) -> None:
    depth = _depth(value)
    counted = _nesting(value, most)
    assert counted == depth if depth <= most else counted > most


@pytest.mark.parametrize(
    ("value", "depth"), [(5, 1), ({}, 1), ([], 1), ({"a": 1}, 2), ({"a": []}, 2), ({"a": [1]}, 3), ([[[]]], 3)]
)
def test_nesting_by_hand(value: Any, depth: int) -> None:
    assert _nesting(value, 32) == depth


def test_ordinary_state_data_takes_the_shortcut() -> None:
    checker = LimitChecker(Limits())
    assert checker._plainly_within({"step": 1, "score": 21, "inventory": ["cellphone"], "pos": {"x": 1.5}})


def test_at_the_edges_the_walk_decides_and_names_the_field() -> None:
    checker = LimitChecker(Limits(max_json_bytes=64, max_json_depth=3))
    assert not checker._plainly_within({"a": "x" * 8})  # 8 x 14 bytes > 64: the walk runs, and passes it
    checker.json({"a": "x" * 8}, "data")
    with pytest.raises(InvalidInput) as deep:
        checker.json({"a": {"b": [1]}}, "data")
    assert (deep.value.field, deep.value.rule) == ("data.a.b[0]", "max_json_depth")
    with pytest.raises(InvalidInput) as big:
        checker.json({"a": "x" * 70}, "data")
    assert (big.value.field, big.value.rule) == ("data", "max_json_bytes")
    assert not checker._plainly_within({2**64: 1})  # orjson cannot write it: the walk judges
