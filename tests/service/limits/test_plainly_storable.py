"""`plainly_storable`, the byte-level shortcut before the storable walk: whenever it
says a body is plainly storable, the walk (`check_json` on what the standard parser
makes of the same bytes) finds nothing; and it does say so for ordinary bodies, or
it would save nothing."""

from __future__ import annotations

import contextlib
import json
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from domain.errors import InvalidInput
from service.limits.storable import check_json, plainly_storable

MAX_CHARS = 40
# Texts near the rules: NUL, both halves of a surrogate pair alone and together,
# other control characters, non-ASCII, and lengths around MAX_CHARS.
_CHARS = st.sampled_from(["a", "é", "\x00", "\x01", "\n", '"', "\\", "\ud800", "\udc00", "😀", "/", "u"])
texts = st.lists(_CHARS, max_size=MAX_CHARS + 3).map("".join) | st.text(max_size=MAX_CHARS + 3)
numbers = (
    st.integers(min_value=-(2**80), max_value=2**80)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.sampled_from([1.7976931348623157e308, -1.7976931348623157e308, 5e-324, 0.0, -0.0])
)
values = st.recursive(
    st.none() | st.booleans() | numbers | texts,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(texts, inner, max_size=4),
    max_leaves=12,
)


def _encodings(value: Any) -> list[bytes]:
    """The ways clients put a value into a body: escaped or raw UTF-8, and as the
    standard library writes it (NaN, Infinity) or orjson does (refusing them)."""
    out = []
    for ascii_only in (True, False):
        try:
            out.append(json.dumps(value, ensure_ascii=ascii_only).encode("utf-8"))
        except UnicodeEncodeError:  # a lone surrogate written raw is no UTF-8
            out.append(json.dumps(value, ensure_ascii=ascii_only).encode("utf-8", "surrogatepass"))
    with contextlib.suppress(orjson.JSONEncodeError):  # a big integer, which orjson refuses
        out.append(orjson.dumps(value))
    return out


def _walk_refuses(raw: bytes) -> bool:
    try:
        parsed = json.loads(raw)
    except ValueError:
        return False  # not JSON to the framework either: its own 422, not this check's
    try:
        check_json(parsed, "", MAX_CHARS)
    except InvalidInput:
        return True
    return False


@settings(max_examples=600, deadline=None)
@given(values)
def test_a_plainly_storable_body_is_one_the_walk_accepts(value: Any) -> None:
    for raw in _encodings(value):
        if plainly_storable(raw, MAX_CHARS):
            assert not _walk_refuses(raw), raw


@pytest.mark.parametrize(
    "raw",
    [
        b'{"a": "x\\u0000"}',  # a NUL, escaped (the only way JSON carries one)
        b'["\\ud800"]',  # an unpaired high surrogate
        b'["x\\udfff"]',  # an unpaired low surrogate
        b'{"\\ud83d": 1}',  # in a key
        b'{"x": NaN}',
        b"[Infinity]",
        b"[-Infinity]",
        b"[1e309]",  # overflows a double: the standard parser makes it inf
        b"[-2.5e308]",
        b"[" + b"9" * 320 + b".0]",
        b'["' + b"x" * (MAX_CHARS + 1) + b'"]',  # longer than max_chars
        b'{"' + b"k" * (MAX_CHARS + 1) + b'": 1}',
    ],
)
def test_each_thing_the_walk_refuses_is_never_plainly_storable(raw: bytes) -> None:
    assert _walk_refuses(raw)
    assert not plainly_storable(raw, MAX_CHARS)


@pytest.mark.parametrize(
    "value",
    [
        {"steps": [{"state": {"observation": "a door", "data": {"x": 1, "y": [0.5, -2, True, None]}}, "action": "go"}]},
        {"text": "café 😀", "n": 1.7976931348623157e308, "big": 2**70, "tiny": 5e-324},
        ["é" * 10, {"\n": "\t"}],
    ],
)
def test_ordinary_bodies_are_plainly_storable(value: Any) -> None:
    for raw in _encodings(value):
        assert plainly_storable(raw, 10_000), raw


def test_the_words_of_an_escape_go_to_the_walk_which_accepts_them() -> None:
    raw = json.dumps({"text": "write \\u0000 for NUL"}).encode()
    assert not _walk_refuses(raw)
    assert not plainly_storable(raw, 10_000)  # a false alarm costs the walk, nothing else


def test_a_body_in_another_encoding_or_with_a_byte_order_mark_goes_to_the_walk() -> None:
    text = json.dumps({"a": "x\x00"})
    for raw in (text.encode("utf-16"), text.encode("utf-32"), b"\xef\xbb\xbf" + text.encode()):
        assert json.loads(raw) == {"a": "x\x00"}  # the standard parser reads all three
        assert not plainly_storable(raw, 10_000)
