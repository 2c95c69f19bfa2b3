"""Content hashes (domain/hashing.py): a task's hash is the first 64 bits of its
SHA-256, the same in every process; a JSON value's canonical hash ignores key order
(and only key order)."""

from __future__ import annotations

from domain.hashing import canonical_hash, task_hash


def test_task_hash_is_stable_and_short() -> None:
    # sha256(b"make tea").hexdigest()[:16], and of the UTF-8 bytes of a non-ASCII task.
    assert task_hash("make tea") == "9651f6c2fd08ce22"
    assert task_hash("café au lait") == "7c413039fbb2248e"
    assert task_hash("make tea") == task_hash("make tea")
    assert task_hash("make tea ") != task_hash("make tea") and task_hash("Make tea") != task_hash("make tea")


def test_canonical_hash_ignores_key_order_only() -> None:
    value = {"b": {"d": True, "c": None}, "a": [1, 2]}
    # SHA-256 of the compact JSON with sorted keys: {"a":[1,2],"b":{"c":null,"d":true}}
    assert canonical_hash(value) == "986dc17b648c58bff10cc032d5600045e57bcce3404d5995ac55f0e29889f442"
    assert canonical_hash({"a": [1, 2], "b": {"c": None, "d": True}}) == canonical_hash(value)
    assert canonical_hash({"a": [2, 1], "b": {"c": None, "d": True}}) != canonical_hash(value)  # lists keep order
    assert canonical_hash({"a": [1, 2], "b": {"c": None, "d": 1}}) != canonical_hash(value)  # true is not 1
    assert canonical_hash({"a": [1, 2]}) != canonical_hash({"a": [1, 2], "b": None})  # null is not absent
