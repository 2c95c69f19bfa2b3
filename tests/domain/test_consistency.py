"""The consistency token codec (domain/consistency.py): the id range of the queued
indexing jobs as "c1.<first>.<last>" ("c1.0" for none), parsed back exactly, and any
token this server could not have issued refused as invalid input naming the field
and the rule."""

from __future__ import annotations

import pytest

from domain.consistency import NOTHING_QUEUED, encode_token, parse_token
from domain.errors import InvalidInput


def test_encode_names_the_id_range() -> None:
    assert encode_token([]) == NOTHING_QUEUED == "c1.0"
    assert encode_token([42]) == "c1.42.42"
    assert encode_token([7, 3, 5]) == "c1.3.7"


@pytest.mark.parametrize("ids", [[1], [3, 9], [12, 10, 11], [2**40]])
def test_parse_round_trips(ids: list[int]) -> None:
    assert parse_token(encode_token(ids)) == (min(ids), max(ids))


def test_nothing_queued_parses_to_nothing_to_wait_for() -> None:
    assert parse_token(encode_token([])) is None


@pytest.mark.parametrize(
    "token",
    [
        "",
        "garbage",
        "c1",
        "c1.",
        "c2.1.2",
        "C1.1.2",
        "c1.5.3",
        "c1.0.4",
        "c1.-1.2",
        "c1.1.2.3",
        "c1.a.b",
        "c1.00",
        "c1.1",
    ],
)
def test_foreign_tokens_are_refused(token: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        parse_token(token)
    err = caught.value
    assert (err.status, err.field, err.rule) == (422, "consistency_token", "opaque_token")
    assert err.to_body() == {
        "error": {
            "type": "invalid_input",
            "message": "consistency_token is not a token this server issued",
            "field": "consistency_token",
            "rule": "opaque_token",
        }
    }


def test_the_refusal_names_the_field_it_came_in() -> None:
    with pytest.raises(InvalidInput) as caught:
        parse_token("c1.9.1", field="after")
    assert (caught.value.field, caught.value.rule) == ("after", "opaque_token")
    assert caught.value.message == "after is not a token this server issued"
