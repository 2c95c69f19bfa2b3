"""GET /v1/namespaces/{ns}/export: the four datasets on a small hand-checked world,
both formats, round trips through `datasets`, TRL's own data utilities (and one
training step of SFTTrainer and DPOTrainer on a tiny offline model), permissions,
snapshot determinism, bad input, and a measured check that a large export streams
in bounded batches with no transaction held between them.

On SQLite and PostgreSQL (the `client` fixture's `database_url`).
"""

from __future__ import annotations

import copy
import io
import json
import math
import tracemalloc
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import event

from service.app import create_app
from service.auth import Principal
from service.export.formats import parquet_chunks
from service.export.rows import Pair, StateMatcher, choose_hint
from service.export.schemas import SCHEMAS, ExportQuery
from service.export.service import ExportService
from service.namespaces.service import NamespaceService
from service.settings import Limits
from service.snapshots.service import SnapshotService
from store import evidence as evidence_repo
from store import reflections as reflections_repo
from store import trajectories as trajectories_repo
from store.database import Database
from tests.conftest import ADMIN_KEY, make_settings
from tests.factories import add_reflection, add_trajectory, make_db, step
from tests.fixtures import create_namespace, drain, post_trajectory

NS = "mem"
KEY_TASK = "find the key"
HALL = {"room": "hall"}
TAKE = {"tool": "take", "args": {"what": "key"}}
HINT = "In a hall, go north, not south"
DATASETS = ("trajectories", "sft", "preferences", "attempts")
# A step that recorded no rollout (tests/service/trajectories/test_rollout_records.py for one that did).
NO_ROLLOUT = {"policy_version": None, "rollout_logprobs": None, "rollout_token_ids": None}


def hall(action: Any, **fields: Any) -> dict[str, Any]:
    return step("a hall", action, **fields) | {"state": {"observation": "a hall", "data": HALL}}


def build_world(api: TestClient) -> dict[str, int]:
    """Five trajectories and three heuristics; returns trajectory pks by id.

    w1 (won) and l1 (lost) share the state "a hall" (same text and data): w1 went
    north, l1 looked and then went south (caused_failure). r1 retries l1 and wins;
    o1 is still open; w2 is another task. h1 is an active heuristic citing w1 and
    l1; h2 cites only w1; h3 cites both but is a candidate."""
    create_namespace(api, NS)
    common = {"task": KEY_TASK, "environment": "grid", "agent": "a1"}
    post_trajectory(
        api,
        NS,
        "w1",
        **common,
        policy_version="p1",
        group_id="g1",
        metadata={"seed": 1},
        steps=[
            hall("go north", internal_state="look for a door", result="a room with a key", reward=0.0),
            step("a room with a key", TAKE, result="you hold the key", reward=1.0, done=True),
        ],
        outcome={"success": True, "reward": 1.0},
    )
    post_trajectory(
        api,
        NS,
        "l1",
        **common,
        policy_version="p1",
        group_id="g1",
        steps=[
            hall("look", internal_state="find a door", result="doors to the north and south"),
            hall("go south", internal_state="try the south door", result="a pit", caused_failure=True, done=True),
        ],
        outcome={"success": False, "reward": 0.0, "failure_reason": "fell into a pit"},
    )
    post_trajectory(
        api,
        NS,
        "r1",
        **common,
        policy_version="p2",
        parent_trajectory_id="l1",
        attempt=2,
        steps=[hall("go north", result="a room with a key"), step("a room with a key", TAKE, done=True)],
        outcome={"success": True, "reward": 1.0},
    )
    post_trajectory(api, NS, "o1", **common, steps=[hall("wait")])
    post_trajectory(
        api,
        NS,
        "w2",
        task="open the box",
        environment="boxes",
        steps=[step("a box", "open box", done=True)],
        success=True,
    )
    db: Database = api.app.state.services.db  # type: ignore[attr-defined]
    with db.write() as s:
        pks = {t: trajectories_repo.read_trajectory(s, NS, t).pk for t in ("w1", "l1", "r1", "o1", "w2")}  # type: ignore[union-attr]
        for id_, status, text, cited in (
            ("h1", "active", HINT, [("w1", 0, True), ("l1", 1, False)]),
            ("h2", "active", "one-sided", [("w1", 0, True)]),
            ("h3", "candidate", "not served", [("w1", 0, True), ("l1", 1, False)]),
        ):
            row = add_reflection(s, NS, id_, kind="heuristic", status=status, text=text, content={"text": text})
            evidence_repo.create_evidence(s, row.pk, [evidence_repo.EvidenceIn(pks[t], i, i, ok) for t, i, ok in cited])
            evidence_repo.update_evidence_stats(s, [row.pk])
    return pks


@pytest.fixture
def world(client: TestClient) -> TestClient:
    build_world(client)
    return client


def export(api: TestClient, dataset: str, fmt: str = "jsonl", ns: str = NS, **params: Any) -> Any:
    r = api.get(f"/v1/namespaces/{ns}/export", params={"dataset": dataset, "format": fmt, **params})
    return r


def jsonl(api: TestClient, dataset: str, **params: Any) -> list[dict[str, Any]]:
    r = export(api, dataset, **params)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == "application/x-ndjson"
    return [json.loads(line) for line in r.text.splitlines()]


def parquet_rows(content: bytes) -> list[dict[str, Any]]:
    """Rows of a parquet export with JSON-typed columns decoded (pyarrow gives their text)."""
    return pq.read_table(io.BytesIO(content)).to_pylist()


def natural(value: Any) -> Any:
    """Datetimes as the ISO text JSON lines carry, at any depth."""
    if isinstance(value, datetime):
        return value.astimezone(UTC).isoformat().replace("+00:00", "Z")
    if isinstance(value, dict):
        return {k: natural(v) for k, v in value.items()}
    if isinstance(value, list):
        return [natural(v) for v in value]
    return value


# -- rows, hand-checked -----------------------------------------------------------------


def test_trajectories_rows(world: TestClient) -> None:
    rows = jsonl(world, "trajectories")
    assert [r["id"] for r in rows] == ["w1", "l1", "r1", "o1", "w2"]
    assert all(list(r) == SCHEMAS["trajectories"].names for r in rows)
    w1 = rows[0]
    assert {k: w1[k] for k in list(w1)[:13] if k != "task"} == {
        "id": "w1",
        "environment": "grid",
        "agent": "a1",
        "policy_version": "p1",
        "group_id": "g1",
        "parent_trajectory_id": None,
        "attempt": None,
        "status": "closed",
        "success": True,
        "reward": 1.0,
        "failure_reason": None,
        "metadata": {"seed": 1},
    }
    assert w1["task"] == KEY_TASK and w1["step_count"] == 2 and w1["created_at"].endswith("Z") and w1["closed_at"]
    assert w1["steps"] == [
        {
            "index": 0,
            "observation": "a hall",
            "state_data": HALL,
            "internal_state": "look for a door",
            "action": "go north",
            "result": "a room with a key",
            "error": None,
            "reward": 0.0,
            "done": False,
            "truncated": False,
            "caused_failure": False,
            **NO_ROLLOUT,
        },
        {
            "index": 1,
            "observation": "a room with a key",
            "state_data": None,
            "internal_state": None,
            "action": TAKE,
            "result": "you hold the key",
            "error": None,
            "reward": 1.0,
            "done": True,
            "truncated": False,
            "caused_failure": False,
            **NO_ROLLOUT,
        },
    ]
    r1, o1 = rows[2], rows[3]
    assert (r1["parent_trajectory_id"], r1["attempt"]) == ("l1", 2)
    assert (o1["status"], o1["success"], o1["closed_at"], len(o1["steps"])) == ("open", None, None, 1)


@pytest.mark.parametrize(
    ("params", "ids"),
    [
        ({"environment": "boxes"}, ["w2"]),
        ({"success": "false"}, ["l1"]),
        ({"task": "open the box"}, ["w2"]),
        ({"agent": "a1"}, ["w1", "l1", "r1", "o1"]),
        ({"policy_version": "p2"}, ["r1"]),
        ({"group_id": "g1"}, ["w1", "l1"]),
        ({"created_after": "2999-01-01T00:00:00Z"}, []),
        ({"created_before": "2999-01-01T00:00:00Z"}, ["w1", "l1", "r1", "o1", "w2"]),
        ({"limit": 2}, ["w1", "l1"]),
        ({"environment": "grid", "success": "true"}, ["w1", "r1"]),
    ],
)
def test_trajectory_filters(world: TestClient, params: dict[str, Any], ids: list[str]) -> None:
    assert [r["id"] for r in jsonl(world, "trajectories", **params)] == ids


SYSTEM = f"You are an agent working on a task. Choose the next action.\nTask: {KEY_TASK}"


def test_sft_rows(world: TestClient) -> None:
    rows = jsonl(world, "sft")
    # Every step of every successful closed trajectory, in order; l1 (failed) and o1 (open) are not.
    assert [(r["trajectory_id"], r["step"]) for r in rows] == [("w1", 0), ("w1", 1), ("r1", 0), ("r1", 1), ("w2", 0)]
    assert {r["template_version"] for r in rows} == {"default@1"}  # the plain context's template
    assert rows[0]["messages"] == [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": 'Observation: a hall\nState data: {"room":"hall"}'},
        {"role": "assistant", "content": "go north"},
    ]
    assert rows[1]["messages"] == [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": 'Observation: a hall\nState data: {"room":"hall"}'},
        {"role": "assistant", "content": "go north"},
        {"role": "user", "content": "Result of your last action: a room with a key\n\nObservation: a room with a key"},
        # A tool call is its JSON text (keys sorted: the same on both engines).
        {"role": "assistant", "content": '{"args":{"what":"key"},"tool":"take"}'},
    ]
    no_history = jsonl(world, "sft", history=0)
    assert no_history[1]["messages"] == [
        {"role": "system", "content": SYSTEM},
        {
            "role": "user",
            "content": "(1 earlier steps omitted)\n\nResult of your last action: a room with a key\n\n"
            "Observation: a room with a key",
        },
        {"role": "assistant", "content": '{"args":{"what":"key"},"tool":"take"}'},
    ]
    assert jsonl(world, "sft", history_max_chars=0)[1]["messages"] == no_history[1]["messages"]
    assert [r["trajectory_id"] for r in jsonl(world, "sft", environment="boxes")] == ["w2"]
    assert len(jsonl(world, "sft", limit=3)) == 3


@pytest.mark.parametrize("params", [{}, {"history": 0}, {"history": 1}, {"history_max_chars": 10}])
def test_the_sft_plain_prompt_is_the_distill_plain_context(world: TestClient, params: dict[str, Any]) -> None:
    """SFT-then-RL trains and rolls out on one prompt: an sft row's prompt is the
    `plain` context POST …/distill/contexts gives for that trajectory and step
    (messages and text), under the same history windows."""
    from domain.contexts.plain import transcript
    from domain.contexts.templates import load_template

    template = load_template("default")
    rows = jsonl(world, "sft", **params)
    assert rows
    windows = {"history_steps": params["history"]} if "history" in params else {}
    windows |= {"history_max_chars": params["history_max_chars"]} if "history_max_chars" in params else {}
    for row in rows:
        body = {"trajectories": [{"id": row["trajectory_id"]}], "steps": [row["step"]], **windows}
        r = world.post(f"/v1/namespaces/{NS}/distill/contexts", json=body)
        assert r.status_code == 200, r.text
        answer = r.json()
        plain = answer["trajectories"][0]["steps"][0]["plain"]
        prompt = row["messages"][:-1]
        assert prompt == plain["messages"], (row["trajectory_id"], row["step"], params)
        assert transcript(template, prompt) == plain["text"]
        assert row["template_version"] == answer["template_version"]
        assert row["messages"][-1]["role"] == "assistant"


def test_sft_teacher_contexts_are_the_distill_contexts(world: TestClient) -> None:
    """context=memory|evidence_card|attempt_summary: the prompt is the teacher context
    POST …/distill/contexts gives for that step (leakage guards on), the action the answer."""
    drain(world)  # exemplars indexed, evidence cards built: memory and cards have something to say
    plain = jsonl(world, "sft")
    assert {(r["context"], r["template_version"], tuple(r["item_ids"])) for r in plain} == {("plain", "default@1", ())}
    applied = set()
    for kind in ("memory", "evidence_card", "attempt_summary"):
        rows = jsonl(world, "sft", context=kind)
        assert [(r["trajectory_id"], r["step"]) for r in rows] == [(r["trajectory_id"], r["step"]) for r in plain]
        for row in rows:
            body = {
                "trajectories": [{"id": row["trajectory_id"]}],
                "teachers": [{"kind": kind}],
                "steps": [row["step"]],
            }
            r = world.post(f"/v1/namespaces/{NS}/distill/contexts", json=body)
            assert r.status_code == 200, r.text
            answer = r.json()
            teacher = answer["trajectories"][0]["steps"][0]["teachers"][kind]
            assert row["messages"][:-1] == teacher["messages"], (kind, row["trajectory_id"], row["step"])
            assert row["messages"][-1] == plain[rows.index(row)]["messages"][-1]  # the same answer
            assert row["template_version"] == answer["template_version"]
            assert row["context"] == (kind if teacher["applicable"] else "plain")
            assert row["item_ids"] == (teacher["item_ids"] if teacher["applicable"] else [])
            if teacher["applicable"]:
                applied.add(kind)
    assert applied == {"memory", "evidence_card", "attempt_summary"}  # each had something for some step
    # r1 retries l1: its attempt summary is built from l1.
    (r1,) = [r for r in jsonl(world, "sft", context="attempt_summary") if (r["trajectory_id"], r["step"]) == ("r1", 0)]
    assert r1["context"] == "attempt_summary" and "l1" in " ".join(r1["item_ids"]) + r1["messages"][0]["content"]


def test_preference_rows(world: TestClient) -> None:
    rows = jsonl(world, "preferences")
    prompt = [
        {"role": "system", "content": KEY_TASK},
        {"role": "user", "content": 'a hall\n\nState data: {"room":"hall"}'},
    ]

    def against(rejected: str, rejected_step: int) -> dict[str, Any]:
        return {
            "prompt": prompt,
            "chosen": [{"role": "assistant", "content": "go north"}],
            "rejected": [{"role": "assistant", "content": rejected}],
            "state": {"observation": "a hall", "data": HALL},
            "chosen_trajectory_id": "w1",
            "chosen_step": 0,
            "rejected_trajectory_id": "l1",
            "rejected_step": rejected_step,
            "hint": HINT,
            "hint_id": "h1",
        }

    # One matched state ("a hall" with the same data): w1's "go north" (r1's is the
    # same action) against l1's two actions, the step that caused the failure first.
    assert rows == [against("go south", 1), against("look", 0)]
    assert jsonl(world, "preferences", max_pairs_per_state=1) == rows[:1]
    hinted = jsonl(world, "preferences", hints="true")
    assert hinted[0]["prompt"][0] == {"role": "system", "content": f"{KEY_TASK}\n\nHint: {HINT}"}
    assert [r["prompt"][1:] for r in hinted] == [r["prompt"][1:] for r in rows]
    assert jsonl(world, "preferences", task="open the box") == []
    assert jsonl(world, "preferences", policy_version="p1") == rows  # w1 and l1 are both p1


def test_hint_prefers_the_heuristic_whose_evidence_covers_both_steps() -> None:
    matcher = StateMatcher(4)
    won = {"pk": 1, "id": "w", "task": "t", "success": True}
    lost = {"pk": 2, "id": "l", "task": "t", "success": False}
    base = {"state_data": None, "caused_failure": False}
    matcher.add(won, {"index": 3, "observation": "o", "action": "a", **base})
    matcher.add(lost, {"index": 5, "observation": "o", "action": "b", **base})
    (pair,) = matcher.pairs()
    assert isinstance(pair, Pair)

    def cite(pk: int, trajectory: int, start: int | None, count: int) -> dict[str, Any]:
        return {
            "reflection_pk": pk,
            "id": f"h{pk}",
            "text": f"hint {pk}",
            "evidence_count": count,
            "trajectory_pk": trajectory,
            "step_start": start,
            "step_end": start,
        }

    evidence = [cite(7, 1, 0, 9), cite(7, 2, 0, 9), cite(8, 1, 3, 2), cite(8, 2, 5, 2), cite(9, 1, 3, 50)]
    assert choose_hint(pair, evidence).id == "h8"  # type: ignore[union-attr]
    assert choose_hint(pair, evidence[:2]).id == "h7"  # type: ignore[union-attr]
    assert choose_hint(pair, evidence[4:]) is None  # one side only


def test_attempt_rows(world: TestClient) -> None:
    (row,) = jsonl(world, "attempts")
    reflection = (
        "Attempt 1 failed with reward 0 after 2 steps.\n\n"
        "What it established:\n- [0] look -> doors to the north and south\n\n"
        "What it failed at:\n- fell into a pit\n- [1] go south caused the failure: a pit\n\n"
        "What it planned:\n- [0] find a door\n- [1] try the south door"
    )
    assert row["task"] == KEY_TASK and row["reflection"] == reflection and row["improved"] is True
    state = 'a hall\n\nState data: {"room":"hall"}'
    assert row["first"] == {
        "id": "l1",
        "attempt": None,
        "success": False,
        "reward": 0.0,
        "failure_reason": "fell into a pit",
        "step_count": 2,
        "summary": "[0] look -> doors to the north and south\n[1] go south -> a pit (caused the failure)",
        "messages": [
            {"role": "system", "content": KEY_TASK},
            {"role": "user", "content": state},
            {"role": "assistant", "content": "look"},
            {"role": "user", "content": f"Result: doors to the north and south\n\n{state}"},
            {"role": "assistant", "content": "go south"},
        ],
    }
    nxt = row["next"]
    assert (nxt["id"], nxt["attempt"], nxt["success"], nxt["reward"], nxt["step_count"]) == ("r1", 2, True, 1.0, 2)
    assert nxt["messages"][0] == {
        "role": "system",
        "content": f"{KEY_TASK}\n\nReflection on the previous attempt:\n{reflection}",
    }
    assert nxt["messages"][-1] == {"role": "assistant", "content": '{"args":{"what":"key"},"tool":"take"}'}
    assert jsonl(world, "attempts", success="false") == []  # the filter is the next attempt's


def test_parquet_carries_the_same_rows(world: TestClient) -> None:
    for dataset in DATASETS:
        r = export(world, dataset, "parquet")
        assert r.status_code == 200 and r.headers["content-type"] == "application/vnd.apache.parquet"
        assert r.headers["content-disposition"] == f'attachment; filename="{NS}-{dataset}.parquet"'
        table = pq.read_table(io.BytesIO(r.content))
        assert table.schema == SCHEMAS[dataset]  # the fixed schema, JSON columns included
        rows = natural(table.to_pylist())
        expected = jsonl(world, dataset)
        if dataset == "trajectories":
            # JSON-typed columns are JSON text in parquet (`datasets` decodes them).
            for row in rows:
                row["metadata"] = None if row["metadata"] is None else json.loads(row["metadata"])
                for s in row["steps"]:
                    s["action"] = json.loads(s["action"])
                    s["state_data"] = None if s["state_data"] is None else json.loads(s["state_data"])
        if dataset == "preferences":
            for row in rows:
                row["state"]["data"] = json.loads(row["state"]["data"])
        assert rows == expected, dataset


# -- datasets and TRL ---------------------------------------------------------------------


def write_both(api: TestClient, dataset: str, folder: Path, **params: Any) -> tuple[Path, Path]:
    paths = []
    for fmt in ("jsonl", "parquet"):
        r = export(api, dataset, fmt, **params)
        assert r.status_code == 200, r.text
        path = folder / f"{dataset}.{fmt}"
        path.write_bytes(r.content)
        paths.append(path)
    return paths[0], paths[1]


def load(kind: str, path: Path, cache: Path) -> Any:
    import datasets

    return datasets.load_dataset(kind, data_files=str(path), split="train", cache_dir=str(cache))


@pytest.mark.parametrize("dataset", DATASETS)
def test_round_trip_through_datasets(world: TestClient, tmp_path: Path, dataset: str) -> None:
    expected = jsonl(world, dataset)
    jsonl_path, parquet_path = write_both(world, dataset, tmp_path)
    from_json = load("json", jsonl_path, tmp_path / "hf")
    from_parquet = load("parquet", parquet_path, tmp_path / "hf")
    assert from_json.column_names == from_parquet.column_names == SCHEMAS[dataset].names
    assert len(from_json) == len(from_parquet) == len(expected) > 0
    # Parquet's JSON columns come back as the objects they were; timestamps as datetimes.
    assert natural(from_parquet.to_list()) == expected
    if dataset != "trajectories":
        assert natural(from_json.to_list()) == expected
    else:
        # The JSON loader infers one struct for all state data ({"room"} here), so
        # compare what it read, value by value, with the steps as exported.
        for got, want in zip(from_json.to_list(), expected, strict=True):
            assert (got["id"], [s["action"] for s in got["steps"]]) == (
                want["id"],
                [s["action"] for s in want["steps"]],
            )
            assert [s["state_data"] for s in got["steps"]] == [s["state_data"] for s in want["steps"]]


def tiny_tokenizer() -> Any:
    """A word-level tokenizer with a ChatML-like template, built offline."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = ["[UNK]", "[PAD]", "</s>", "<|system|>", "<|user|>", "<|assistant|>", "<|end|>", "a", "hall", "go", "north"]
    core = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="[UNK]"))
    core.pre_tokenizer = pre_tokenizers.Whitespace()
    tok = PreTrainedTokenizerFast(tokenizer_object=core, unk_token="[UNK]", pad_token="[PAD]", eos_token="</s>")
    tok.chat_template = (
        "{% for m in messages %}<|{{ m['role'] }}|> {{ m['content'] }} <|end|> {% endfor %}"
        "{% if add_generation_prompt %}<|assistant|> {% endif %}"
    )
    return tok


def test_trl_data_utilities_accept_sft_and_preferences(world: TestClient, tmp_path: Path) -> None:
    from trl.data_utils import (
        apply_chat_template,
        is_conversational,
        maybe_apply_chat_template,
        unpair_preference_dataset,
    )

    tok = tiny_tokenizer()
    for fmt in ("json", "parquet"):
        sft_json, sft_parquet = write_both(world, "sft", tmp_path)
        sft = load(fmt, sft_json if fmt == "json" else sft_parquet, tmp_path / "hf")
        assert all(is_conversational(row) for row in sft)
        text = apply_chat_template(sft[0], tok)["text"]
        assert text == (
            f"<|system|> {SYSTEM} <|end|> <|user|> Observation: a hall\nState data: "
            '{"room":"hall"} <|end|> <|assistant|> go north <|end|> '
        )
        rendered = sft.map(maybe_apply_chat_template, fn_kwargs={"processing_class": tok}, remove_columns=["messages"])
        assert rendered.column_names == [*SCHEMAS["sft"].names[1:], "text"]

        pref_json, pref_parquet = write_both(world, "preferences", tmp_path, hints="true")
        pref = load(fmt, pref_json if fmt == "json" else pref_parquet, tmp_path / "hf")
        assert all(is_conversational(row) for row in pref)
        out = apply_chat_template(pref[0], tok)
        assert out["prompt"].startswith(f"<|system|> {KEY_TASK}\n\nHint: {HINT} <|end|> <|user|> a hall")
        assert out["prompt"].endswith("<|assistant|> ")
        assert (out["chosen"], out["rejected"]) == ("go north <|end|> ", "go south <|end|> ")
        # The unpaired (KTO) form TRL derives from it: one good and one bad completion per pair.
        unpaired = unpair_preference_dataset(pref)
        assert sorted(unpaired["label"]) == [False, False, True, True]


@pytest.mark.slow
def test_trl_trainers_take_a_step_on_the_exports(world: TestClient, tmp_path: Path) -> None:
    """SFTTrainer and DPOTrainer prepare and train one step on the parquet exports
    with a tiny randomly initialised model (no download)."""
    from trl import DPOConfig, DPOTrainer, SFTConfig, SFTTrainer

    from examples.common.tiny_lm import tiny_llama

    tok = tiny_tokenizer()
    model = tiny_llama(len(tok), None, width=16, layers=1, positions=512, pad_token_id=None, eos_token_id=2)
    common = {"output_dir": str(tmp_path / "out"), "max_steps": 1, "per_device_train_batch_size": 2}
    common |= {"report_to": [], "use_cpu": True, "save_strategy": "no"}

    sft = load("parquet", write_both(world, "sft", tmp_path)[1], tmp_path / "hf")
    trainer = SFTTrainer(model=model, args=SFTConfig(**common), train_dataset=sft, processing_class=tok)
    assert {"input_ids", "messages"} <= set(trainer.train_dataset.column_names)
    assert trainer.train().global_step == 1

    pref = load("parquet", write_both(world, "preferences", tmp_path)[1], tmp_path / "hf")
    dpo = DPOTrainer(
        model=model, ref_model=copy.deepcopy(model), args=DPOConfig(**common), train_dataset=pref, processing_class=tok
    )
    assert {"prompt_ids", "chosen_ids", "rejected_ids"} <= set(dpo.train_dataset.column_names)
    assert math.isfinite(dpo.train().training_loss)


# -- permissions, snapshots, bad input -----------------------------------------------------


def key(api: TestClient, role: str, namespaces: list[str]) -> dict[str, str]:
    r = api.post("/v1/keys", json={"role": role, "namespaces": namespaces})
    assert r.status_code == 201, r.text
    return {"Authorization": f"Bearer {r.json()['key']}"}


def test_permissions(world: TestClient) -> None:
    create_namespace(world, "other")
    path = f"/v1/namespaces/{NS}/export?dataset=sft"
    for role in ("trainer", "operator", "admin"):
        r = world.get(path, headers=key(world, role, [NS]))
        assert r.status_code == 200 and len(r.text.splitlines()) == 5, (role, r.text)
    r = world.get(path, headers=key(world, "agent", [NS]))
    assert r.status_code == 403 and r.json()["error"]["type"] == "forbidden"
    elsewhere = key(world, "trainer", ["other"])
    r = world.get(path, headers=elsewhere)
    assert r.status_code == 404 and r.json()["error"]["field"] == "namespace"
    assert world.get(path.replace(NS, "nowhere"), headers=elsewhere).status_code == 404


def snapshot_exports(api: TestClient, snapshot: str) -> dict[tuple[str, ...], bytes]:
    out = {}
    for dataset in DATASETS:
        for fmt in ("jsonl", "parquet"):
            r = export(api, dataset, fmt, snapshot=snapshot)
            assert r.status_code == 200, r.text
            out[dataset, fmt] = r.content
    for kind in ("memory", "attempt_summary"):  # teacher contexts read memory as pinned too
        r = export(api, "sft", snapshot=snapshot, context=kind)
        assert r.status_code == 200, r.text
        out["sft", kind] = r.content
    return out


def test_snapshot_exports_are_byte_identical_later(world: TestClient) -> None:
    assert world.post(f"/v1/namespaces/{NS}/snapshots", json={"id": "s1"}).status_code == 201
    before = snapshot_exports(world, "s1")
    assert export(world, "sft", snapshot="s1").headers["content-disposition"] == (
        f'attachment; filename="{NS}-sft-s1.jsonl"'
    )

    # The namespace moves on: o1 gets a step and fails (a new preference pair and
    # attempt-free), a new winner arrives, a retry of w1, and h1 is retired.
    r = world.post(f"/v1/namespaces/{NS}/trajectories/o1/steps", json={"steps": [hall("go west")]})
    assert r.status_code == 200, r.text
    assert world.post(f"/v1/namespaces/{NS}/trajectories/o1/outcome", json={"success": False}).status_code == 200
    post_trajectory(world, NS, "w3", task=KEY_TASK, steps=[hall("go north"), hall("go east")], success=True)
    post_trajectory(world, NS, "r2", task=KEY_TASK, parent_trajectory_id="w1", steps=[hall("go north")], success=True)
    db: Database = world.app.state.services.db  # type: ignore[attr-defined]
    with db.write() as s:
        h1 = reflections_repo.read_reflection(s, NS, "h1")
        assert h1 is not None
        reflections_repo.update_reflection_status(s, h1, "retired", action="retire", actor="test", note=None)

    assert snapshot_exports(world, "s1") == before
    # Live, the same exports have moved.
    live = jsonl(world, "preferences")
    assert len(live) > len(jsonl(world, "preferences", snapshot="s1")) and {r["hint"] for r in live} == {None}
    assert len(jsonl(world, "sft")) > len(jsonl(world, "sft", snapshot="s1"))
    assert [r["next"]["id"] for r in jsonl(world, "attempts")] == ["r1", "r2"]
    pinned = {r["id"]: r for r in jsonl(world, "trajectories", snapshot="s1")}
    assert set(pinned) == {"w1", "l1", "r1", "o1", "w2"}
    assert (pinned["o1"]["status"], pinned["o1"]["step_count"], len(pinned["o1"]["steps"])) == ("open", 1, 1)


def error(r: Any) -> tuple[int, str | None]:
    assert r.headers["content-type"].startswith("application/json"), r.headers
    return r.status_code, r.json()["error"].get("field")


def test_bad_input(world: TestClient) -> None:
    path = f"/v1/namespaces/{NS}/export"
    assert error(world.get(path)) == (422, "dataset")
    assert error(world.get(path, params={"dataset": "rlhf"})) == (422, "dataset")
    assert error(export(world, "sft", "csv")) == (422, "format")
    assert error(export(world, "sft", snapshot="nope")) == (404, "snapshot")
    assert error(export(world, "sft", limit=0)) == (422, "limit")
    assert error(export(world, "sft", limit=10_000_001)) == (422, "limit")
    assert error(export(world, "sft", created_after="2026-01-01T00:00:00")) == (422, "created_after")
    assert error(export(world, "sft", success="true")) == (422, "success")
    assert error(export(world, "trajectories", history=2)) == (422, "history")
    assert error(export(world, "sft", hints="true")) == (422, "hints")
    assert error(export(world, "preferences", max_pairs_per_state=0)) == (422, "max_pairs_per_state")
    assert error(export(world, "sft", context="hindsight")) == (422, "context")  # a leak by design: not offered
    assert error(export(world, "sft", history=-1)) == (422, "history")
    assert error(export(world, "preferences", history_max_chars=10)) == (422, "history_max_chars")
    assert error(export(world, "sft", colour="blue")) == (422, "colour")
    assert error(export(world, "sft", ns="nowhere")) == (404, "namespace")


def test_limit_maximum_is_a_setting(database_url: str, tmp_path: Path) -> None:
    settings = make_settings(database_url, tmp_path, limits={"max_export_rows": 3})
    with TestClient(create_app(settings), headers={"Authorization": f"Bearer {ADMIN_KEY}"}) as api:
        build_world(api)
        r = export(api, "sft", limit=4)
        assert r.status_code == 422 and r.json()["error"]["field"] == "limit"
        assert "at most 3" in r.json()["error"]["message"]
        assert len(jsonl(api, "sft", limit=3)) == 3
        assert len(jsonl(api, "sft")) == 5  # no limit: every row


def test_empty_exports_are_valid_files(client: TestClient) -> None:
    create_namespace(client, NS)
    for dataset in DATASETS:
        assert export(client, dataset).content == b""
        table = pq.read_table(io.BytesIO(export(client, dataset, "parquet").content))
        assert table.num_rows == 0 and table.schema == SCHEMAS[dataset]


# -- streaming in bounded memory (a measured check, not a timing) ---------------------------


def big_namespace(database_url: str, n: int, steps: int, chars: int) -> Database:
    db = make_db(database_url, "big")
    with db.write() as s:
        for i in range(n):
            pk = add_trajectory(s, "big", f"t{i:05d}", task=f"task {i % 7}", success=i % 3 != 0, step_count=steps)
            trajectories_repo.create_steps(
                s,
                [
                    {
                        "trajectory_pk": pk,
                        "index": j,
                        "observation": f"{i}.{j} " + format(i * 7919 + j, "x") * (chars // 4),
                        "action": {"tool": "move", "to": j} if j % 2 else f"act {j}",
                        "content_hash": "0" * 64,
                    }
                    for j in range(steps)
                ],
            )
    return db


@pytest.mark.slow
def test_a_large_export_streams_in_bounded_batches(database_url: str) -> None:
    n, steps, batch = 2400, 4, 50
    db = big_namespace(database_url, n, steps, chars=1500)
    namespaces = NamespaceService(db)
    service = ExportService(
        db, namespaces, SnapshotService(db, namespaces, "hashing"), Limits(), batch_trajectories=batch, batch_steps=200
    )
    admin = Principal(key_id="test", role="admin", namespaces=frozenset({"*"}))
    statements: list[str] = []

    def record(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        statements.append(statement)

    def stream(fmt: str) -> Iterator[bytes]:
        chunks = service.open(admin, "big", ExportQuery(dataset="trajectories", format=fmt)).chunks
        for chunk in chunks:
            # No connection (so no transaction) is held while the consumer has the chunk.
            assert db.engine.pool.checkedout() == 0
            yield chunk

    try:
        for fmt in ("jsonl", "parquet"):  # warm up: compiled statements, what pyarrow imports on first use
            sum(len(c) for c in stream(fmt))
        event.listen(db.engine, "before_cursor_execute", record)
        tracemalloc.start()
        size = sum(len(c) for c in stream("jsonl"))
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        event.remove(db.engine, "before_cursor_execute", record)

        trajectory_reads = [s for s in statements if "FROM trajectories" in s and "FROM steps" not in s]
        step_reads = [s for s in statements if "FROM steps" in s]
        # 48 full batches and the empty read that ends them; one step read per batch
        # (50 trajectories x 4 steps = the 200-step budget).
        assert len(trajectory_reads) == math.ceil(n / batch) + 1 and all("LIMIT" in s for s in trajectory_reads)
        assert len(step_reads) == math.ceil(n / batch)
        assert size > 20_000_000
        print(f"\njsonl: {size / 1e6:.1f} MB exported, tracemalloc peak {peak / 1e6:.2f} MB")
        # The peak is about one batch (~1 MB here), not the export.
        assert peak < size / 8

        tracemalloc.start()
        chunks = 0
        parquet_size = 0
        for chunk in stream("parquet"):
            chunks += 1
            parquet_size += len(chunk)
        _, parquet_peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        print(f"parquet: {parquet_size / 1e6:.1f} MB in {chunks} chunks, tracemalloc peak {parquet_peak / 1e6:.2f} MB")
        assert chunks >= n // 100  # a chunk per row group of 100 trajectories, as they are written
        assert parquet_peak < size / 8  # (size: the data volume, as JSON lines; parquet compresses it)
    finally:
        db.dispose()


def test_parquet_writer_drains_each_row_group() -> None:
    schema = SCHEMAS["sft"]
    rows = ({"messages": [{"role": "user", "content": str(i)}], "trajectory_id": "t", "step": i} for i in range(25))
    chunks = list(parquet_chunks(rows, schema, row_group_rows=10))
    assert len(chunks) == 3  # as written: (magic +) a row group, a row group, the last one + the footer
    f = pq.ParquetFile(io.BytesIO(b"".join(chunks)))
    assert f.metadata.num_row_groups == 3 and f.metadata.num_rows == 25
