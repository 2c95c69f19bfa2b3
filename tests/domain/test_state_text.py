"""How a state becomes the text that is embedded (domain/state_text.py): the
configured fields in order, structured data as sorted `key: value` lines whatever
its key order, the cut at max_chars; the internal-state text and the task query."""

from __future__ import annotations

from domain.settings import StateTextSettings
from domain.state_text import internal_text, state_text, task_query_text

DEFAULT = StateTextSettings()  # observation, then data


def test_data_becomes_sorted_key_value_lines() -> None:
    data = {"room": "hall", "inventory": ["key", 2, None], "door": {"open": False, "colour": "red"}}
    assert state_text(DEFAULT, observation="A long hall.", data=data, task="escape") == (
        "A long hall.\ndoor.colour: red\ndoor.open: False\ninventory: key, 2, None\nroom: hall"
    )
    shuffled = {"door": {"colour": "red", "open": False}, "room": "hall", "inventory": ["key", 2, None]}
    assert state_text(DEFAULT, observation="A long hall.", data=shuffled, task=None) == state_text(
        DEFAULT, observation="A long hall.", data=data, task=None
    )


def test_lists_of_objects_are_numbered() -> None:
    data = {"doors": [{"open": True}, {"open": False, "to": ["hall", "attic"]}]}
    assert state_text(DEFAULT, observation="", data=data, task=None) == (
        "doors.0.open: True\ndoors.1.open: False\ndoors.1.to: hall, attic"
    )


def test_fields_in_their_order_and_empty_parts_left_out() -> None:
    settings = StateTextSettings(fields=["task", "data", "observation"])
    assert state_text(settings, observation="A room.", data={"b": 1, "a": 2}, task="tidy up") == (
        "Task: tidy up\na: 2\nb: 1\nA room."
    )
    assert state_text(settings, observation="A room.", data=None, task=None) == "A room."
    assert state_text(StateTextSettings(fields=["observation"]), observation="A room.", data={"a": 1}, task="t") == (
        "A room."
    )
    assert state_text(DEFAULT, observation="", data={}, task="t") == ""


def test_the_text_is_cut_at_max_chars() -> None:
    settings = StateTextSettings(max_chars=100)
    assert state_text(settings, observation="x" * 150, data=None, task=None) == "x" * 100
    text = state_text(settings, observation="y" * 95, data={"key": "value"}, task=None)
    assert text == "y" * 95 + "\nkey:" and len(text) == 100


def test_internal_state_and_task_texts() -> None:
    assert internal_text("  find the key  ", 100) == "find the key"
    assert internal_text("find the key", 4) == "find"
    assert internal_text("   ", 100) is None and internal_text(None, 100) is None and internal_text("", 5) is None
    assert task_query_text("make tea") == "Task: make tea"
