"""POST …/distill/contexts on both engines: the plain context and each teacher kind
on a hand-made fixture, hindsight horizons at their boundaries, the history and
block budgets (characters, and tokens with a tokenizer file), inline rollout
groups, reads under a snapshot (only what existed then, byte-identical while the
namespace goes on), bad input naming the field and the rule, and permissions."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from reflexa.contexts import step_messages
from reflexa.errors import InvalidInput as ClientInvalidInput
from reflexa.models import ContextsResult

from service.app import create_app
from service.auth import Principal
from service.distill.contexts.schemas import TeacherSpec
from tests.conftest import ADMIN_KEY, make_settings
from tests.factories import door_steps, step
from tests.fixtures import create_namespace, drain, post_door_attempt, post_trajectory

NS = "/v1/namespaces/lab"
URL = f"{NS}/distill/contexts"
TASK = "open the door"
ALL_KINDS = [
    {"kind": "memory"},
    {"kind": "hindsight", "horizon": 1},
    {"kind": "evidence_card"},
    {"kind": "reflection"},
    {"kind": "attempt_summary"},
]


def attempt(api: TestClient, id: str, *, group: str, success: bool, **fields: Any) -> None:
    post_door_attempt(api, "lab", id, group=group, success=success, task=TASK, **fields)


@pytest.fixture
def api(client: TestClient) -> TestClient:
    create_namespace(client, "lab")
    attempt(client, "a0", group="g1", success=True)
    attempt(client, "a1", group="g1", success=False)
    attempt(client, "a2", group="g2", success=True)
    attempt(client, "a3", group="g2", success=False)
    attempt(client, "retry", group="g3", success=True, parent_trajectory_id="a1", attempt=2)
    post_trajectory(
        client,
        "lab",
        "far",
        task="open the gate",
        steps=[step("a kitchen, a key on the table", "grab key")],
        success=True,
    )
    drain(client)
    return client


def contexts(api: TestClient, status: int = 200, **body: Any) -> dict[str, Any]:
    r = api.post(URL, json=body)
    assert r.status_code == status, r.text
    return r.json()  # type: ignore[no-any-return]


def only_step(out: dict[str, Any], t: int = 0) -> dict[str, Any]:
    steps = out["trajectories"][t]["steps"]
    assert len(steps) == 1
    return steps[0]  # type: ignore[no-any-return]


def test_the_plain_context_is_the_task_and_the_history_the_agent_saw(api: TestClient) -> None:
    out = contexts(api, trajectories=[{"id": "a1"}], steps=[1])
    assert out["snapshot"] is None and out["template_version"] == "default@1"
    s = only_step(out)
    assert s["index"] == 1 and s["teachers"] == {}
    system = "You are an agent working on a task. Choose the next action.\nTask: open the door"
    assert s["plain"]["messages"] == [
        {"role": "system", "content": system},
        {"role": "user", "content": "Observation: you are in a hall, a door to the north"},
        {"role": "assistant", "content": "go north"},
        {
            "role": "user",
            "content": "Result of your last action: you walk north\n\nObservation: a kitchen, a key on the table",
        },
    ]
    assert s["plain"]["text"] == (
        f"[system]\n{system}\n\n[user]\nObservation: you are in a hall, a door to the north\n\n"
        "[assistant]\ngo north\n\n[user]\nResult of your last action: you walk north\n\n"
        "Observation: a kitchen, a key on the table"
    )
    assert s["plain"]["omitted_steps"] == 0 and s["plain"]["tokens"] is None
    every = contexts(api, trajectories=[{"id": "a1"}])["trajectories"][0]["steps"]
    assert [x["index"] for x in every] == [0, 1, 2]


def test_each_teacher_kind_on_a_hand_made_fixture(api: TestClient) -> None:
    inline = {"task": TASK, "group_id": "g9", "steps": [step("you are in a hall, a door to the north", "go north")]}
    out = contexts(api, trajectories=[{"id": "a1"}, {"id": "retry"}, inline], steps=[0, 1], teachers=ALL_KINDS)
    a1, retry, new = (t["steps"] for t in out["trajectories"])
    assert [t["id"] for t in out["trajectories"]] == ["a1", "retry", None]
    t = a1[1]["teachers"]
    assert list(t) == ["memory", "hindsight@1", "evidence_card", "reflection", "attempt_summary"]

    # A teacher context is the plain one with the privileged block in its system message.
    plain = a1[1]["plain"]
    for name, teacher in t.items():
        if teacher["applicable"]:
            assert teacher["messages"][1:] == plain["messages"][1:], name
            assert teacher["messages"][0]["content"] == plain["messages"][0]["content"] + "\n\n" + teacher["privileged"]
            assert teacher["chars"] == len(teacher["privileged"])
            assert teacher["text"].startswith("[system]\n" + teacher["messages"][0]["content"])
        else:
            assert teacher["text"] == plain["text"] and teacher["chars"] == 0 and teacher["reason"], name

    hindsight = t["hindsight@1"]
    assert hindsight["privileged"] == (
        "Privileged context (hindsight, 1 step(s) ahead): what this attempt went on to reveal after this step. "
        "It tells what happened, not what the right answer is.\n"
        "This step's result: you hold the key (reward 0.5)\n"
        "Step 2 (+1): observation: holding the key, the door is locked\n"
        "  action: kick door\n"
        "  result: ouch\n"
        "  reward: 0\n"
        "Outcome: the attempt failed, reward 0, failure reason: the door held"
    )
    assert hindsight["item_ids"] == ["step:1", "step:2", "outcome"]
    assert hindsight["leakage"]["trajectory_scoped"] is True

    reflection = t["reflection"]
    assert reflection["applicable"] and reflection["item_ids"] == ["step:2"]
    assert (
        "- Step 2: in state 'holding the key, the door is locked', the action 'kick door' led to: ouch"
        in (reflection["privileged"])
    )
    assert reflection["privileged"].endswith(
        "Before acting, consider what went wrong in this attempt and what to do differently."
    )
    assert retry[0]["teachers"]["reflection"]["applicable"] is False  # it succeeded
    assert new[0]["teachers"]["reflection"]["applicable"] is False  # inline, no outcome

    # The retry's parent chain: what attempt a1 established, failed at and planned.
    summary = retry[0]["teachers"]["attempt_summary"]
    assert summary["applicable"] and summary["item_ids"] == ["a1"]
    assert summary["leakage"]["task_scoped"] is True
    assert (
        "- Attempt a1 (3 steps): the attempt failed, reward 0, failure reason: the door held\n"
        "  Established: step 1 'take key' -> you hold the key (reward 0.5)\n"
        "  Failed at: the door held; step 2 'kick door' -> ouch\n"
        "  Planned: find the key"
    ) in summary["privileged"]
    # a1 itself: the earlier attempt before it (a0) is its own rollout group's
    assert t["attempt_summary"]["applicable"] is False

    # The card draws on g1..g3. For a1 it is rebuilt without a1's group g1 (a0, a1): from g2 and g3 alone.
    own = t["evidence_card"]
    assert own["applicable"] and own["item_ids"] == new[0]["teachers"]["evidence_card"]["item_ids"]
    assert own["leakage"]["subtracted_evidence"] == 2 and own["leakage"]["dropped_items"] == 0
    assert own["privileged"] == (
        "Privileged context: what the latest rollouts of this task did that worked and what failed.\n"
        "Task: open the door\n"
        "Evidence from 2 rollout group(s): 3 rollouts, 2 succeeded.\n"
        "Worked: 'unlock door' (in 2/2 successes, 0/1 failures)\n"
        "Failures were caused by: 'kick door' when 'holding the key, the door is locked' (1x)\n"
        "Failure reasons: the door held (1x)\n"
        "Shortest success (3 steps): go north -> [action withheld] -> unlock door"  # a1's own action: take key
    )
    # the retry (g3): rebuilt from g1 and g2
    assert (
        "Evidence from 2 rollout group(s): 4 rollouts, 2 succeeded."
        in retry[0]["teachers"]["evidence_card"]["privileged"]
    )
    card = new[0]["teachers"]["evidence_card"]
    assert card["leakage"]["subtracted_evidence"] == 0
    assert "Evidence from 3 rollout group(s): 5 rollouts, 3 succeeded." in card["privileged"]
    assert card["applicable"] and card["item_ids"][0].startswith("card_")
    assert "Worked: 'unlock door'" in card["privileged"] and "Failed: 'kick door'" in card["privileged"]
    assert (
        "Shortest success (3 steps): [action withheld] -> take key -> unlock door" in card["privileged"]
    )  # its own action, go north
    assert card["leakage"]["redacted_actions"] >= 1 and card["leakage"]["task_scoped"] is True

    # Memory: the task's own exemplars are excluded by default; the other task's serve.
    memory = new[0]["teachers"]["memory"]
    assert memory["applicable"] and memory["leakage"]["excluded_tasks"] == 1
    assert "grab key" in memory["privileged"] and "unlock door" not in memory["privileged"]


def test_hindsight_horizons_at_their_boundaries(api: TestClient) -> None:
    steps = [step(f"room {i}", f"act {i}", result=f"saw {i}", reward=float(i)) for i in range(5)]
    post_trajectory(api, "lab", "long", task="walk", steps=steps, success=True)
    teachers = [{"kind": "hindsight", "horizon": h} for h in (1, 2, 4)] + [
        {"kind": "hindsight", "horizon": 100, "name": "to_the_end"}
    ]
    out = contexts(api, trajectories=[{"id": "long"}], teachers=teachers)
    got = {
        (s["index"], name): t["item_ids"] for s in out["trajectories"][0]["steps"] for name, t in s["teachers"].items()
    }
    assert got[(0, "hindsight@1")] == ["step:0", "step:1"]
    assert got[(0, "hindsight@4")] == ["step:0", "step:1", "step:2", "step:3", "step:4", "outcome"]
    assert got[(1, "hindsight@2")] == ["step:1", "step:2", "step:3"]
    assert got[(2, "hindsight@2")] == ["step:2", "step:3", "step:4", "outcome"]  # ends within: the outcome
    assert got[(3, "hindsight@1")] == ["step:3", "step:4", "outcome"]
    assert got[(4, "hindsight@1")] == ["step:4", "outcome"]
    assert got[(0, "to_the_end")] == got[(0, "hindsight@4")]
    for s in out["trajectories"][0]["steps"]:
        for t in s["teachers"].values():
            assert f"act {s['index']}" not in t["privileged"]


def test_the_history_budget_drops_the_oldest_steps(api: TestClient) -> None:
    out = contexts(api, trajectories=[{"id": "a1"}], steps=[2], history_max_chars=100)
    plain = only_step(out)["plain"]
    assert plain["omitted_steps"] == 1
    assert plain["messages"][1]["content"].startswith(
        "(1 earlier steps omitted)\n\nResult of your last action: you walk north"
    )
    assert len(plain["messages"]) == 4
    none = only_step(contexts(api, trajectories=[{"id": "a1"}], steps=[2], history_max_chars=0))["plain"]
    assert none["omitted_steps"] == 2 and len(none["messages"]) == 2


def test_a_block_never_exceeds_its_characters(api: TestClient) -> None:
    inline = {"task": TASK, "group_id": "g9", "steps": [step("a kitchen, a key on the table", "look")]}
    teachers = [
        {"kind": "evidence_card", "max_chars": 200},
        {"kind": "evidence_card", "name": "card_whole"},
        {"kind": "memory", "k": 5, "max_chars": 260},
        {"kind": "memory", "k": 5, "name": "memory_whole"},
    ]
    s = only_step(contexts(api, trajectories=[inline], teachers=teachers, leakage={"allow_same_task": True}))
    for small, whole in (("evidence_card", "card_whole"), ("memory", "memory_whole")):
        cut, full = s["teachers"][small], s["teachers"][whole]
        assert cut["applicable"] and full["applicable"]
        assert cut["chars"] <= int(teachers[0 if small == "evidence_card" else 2]["max_chars"]) < full["chars"]
        assert cut["omitted_items"] > 0 and full["omitted_items"] == 0
        assert full["privileged"].startswith(cut["privileged"].split("\n")[0])
        assert set(cut["item_ids"]) <= set(full["item_ids"])
    memory = s["teachers"]["memory_whole"]
    assert sum(memory["item_chars"].values()) < memory["chars"] and set(memory["item_chars"]) == set(memory["item_ids"])


def tokenizer_file(path: Path) -> Path:
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    sentences = ["you are in a hall, a door to the north", "a kitchen, a key on the table", "the door is locked"]
    tok.train_from_iterator(sentences, trainers.WordLevelTrainer(special_tokens=["[UNK]"]))
    tok.save(str(path))
    return path


def test_token_budgets_with_a_tokenizer_file(api: TestClient, tmp_path: Path) -> None:
    from tokenizers import Tokenizer

    path = tokenizer_file(tmp_path / "tokenizer.json")
    create_namespace(api, "tok", distill={"tokenizer_file": str(path)})
    post_trajectory(api, "tok", "t", task=TASK, group_id="g", steps=door_steps(False), outcome={"success": False})
    tok = Tokenizer.from_file(str(path))

    def count(text: str) -> int:
        return len(tok.encode(text, add_special_tokens=False).ids)

    teachers = [
        {"kind": "hindsight", "horizon": 2, "max_tokens": 30},
        {"kind": "hindsight", "horizon": 2, "name": "whole"},
        {"kind": "reflection", "max_tokens": 25, "max_chars": 10_000},
    ]
    r = api.post("/v1/namespaces/tok/distill/contexts", json={"trajectories": [{"id": "t"}], "teachers": teachers})
    assert r.status_code == 200, r.text
    for s in r.json()["trajectories"][0]["steps"]:
        assert s["plain"]["tokens"] == count(s["plain"]["text"])
        small, whole = s["teachers"]["hindsight@2"], s["teachers"]["whole"]
        assert small["tokens"] == count(small["privileged"]) <= 30
        assert whole["tokens"] == count(whole["privileged"])
        assert s["teachers"]["reflection"]["tokens"] == count(s["teachers"]["reflection"]["privileged"]) <= 25
    first = r.json()["trajectories"][0]["steps"][0]["teachers"]
    assert first["whole"]["tokens"] > 30 and first["hindsight@2"]["omitted_items"] > 0


def test_an_unloadable_tokenizer_file_is_a_503_naming_the_setting(api: TestClient, tmp_path: Path) -> None:
    create_namespace(api, "broken", distill={"tokenizer_file": str(tmp_path / "missing.json")})
    post_trajectory(api, "broken", "t", task=TASK, steps=door_steps(True))
    r = api.post("/v1/namespaces/broken/distill/contexts", json={"trajectories": [{"id": "t"}]})
    assert r.status_code == 503
    assert (r.json()["error"]["field"], r.json()["error"]["rule"]) == (
        "settings.distill.tokenizer_file",
        "tokenizer_file",
    )
    r = api.post("/v1/namespaces", json={"name": "bad", "settings": {"distill": {"tokenizer_file": ""}}})
    assert r.status_code == 422 and r.json()["error"]["field"] == "settings.distill.tokenizer_file"


def test_inline_rollout_groups(api: TestClient) -> None:
    group = [
        {"id": "n1", "task": TASK, "group_id": "new", "steps": door_steps(False), "outcome": {"success": False}},
        {"id": "n2", "task": TASK, "group_id": "new", "steps": door_steps(True)},
        {"task": "sweep", "steps": [step("a dusty floor", "sweep")]},
    ]
    out = contexts(api, trajectories=group, teachers=[{"kind": "reflection"}, {"kind": "hindsight", "horizon": 5}])
    n1, n2, anon = out["trajectories"]
    assert (n1["id"], n2["id"], anon["id"]) == ("n1", "n2", None)
    assert [s["index"] for s in n1["steps"]] == [0, 1, 2]
    assert n1["steps"][0]["teachers"]["reflection"]["applicable"] is True
    assert n2["steps"][0]["teachers"]["reflection"]["applicable"] is False
    assert "The attempt had not ended" in n2["steps"][0]["teachers"]["hindsight@5"]["privileged"]
    lone = anon["steps"][0]["teachers"]["hindsight@5"]  # no result, no later step, no outcome: nothing to tell
    assert lone["applicable"] is False and lone["reason"] == "nothing is known yet of what followed this step"


def test_reads_under_a_snapshot_see_only_what_existed_and_never_change(api: TestClient) -> None:
    post_trajectory(api, "lab", "open", task=TASK, group_id="g5", steps=door_steps(False)[:2])
    assert api.post(f"{NS}/snapshots", json={"id": "s1"}).status_code == 201
    body = {
        "snapshot": "s1",
        "trajectories": [
            {"id": "open"},
            {"id": "retry"},
            {"task": TASK, "group_id": "g9", "steps": [step("a kitchen, a key on the table", "look")]},
        ],
        "teachers": ALL_KINDS + [{"kind": "memory", "name": "memory_same_task"}],
        "leakage": {"allow_same_task": True},
    }
    first = api.post(URL, json=body)
    assert first.status_code == 200, first.text
    assert first.json()["snapshot"] == "s1"

    # the namespace goes on: the open attempt gets its last step and fails, more rollouts come
    steps = {"steps": [door_steps(False)[2]]}
    assert api.post(f"{NS}/trajectories/open/steps", json=steps).status_code == 200
    assert api.post(f"{NS}/trajectories/open/outcome", json={"success": False}).status_code == 200
    for i in range(3):
        attempt(api, f"later{i}", group="g6", success=i == 0)
    drain(api)

    again = api.post(URL, json=body)
    assert again.status_code == 200 and again.content == first.content
    pinned = again.json()["trajectories"][0]["steps"]
    assert [s["index"] for s in pinned] == [0, 1]
    assert pinned[0]["teachers"]["reflection"]["applicable"] is False  # it was open then
    live = contexts(api, **{**body, "snapshot": None})["trajectories"][0]["steps"]
    assert [s["index"] for s in live] == [0, 1, 2] and live[0]["teachers"]["reflection"]["applicable"] is True
    r = api.post(URL, json={**body, "trajectories": [{"id": "later0"}]})
    assert r.status_code == 404 and r.json()["error"]["field"] == "trajectories[0].id"


def test_the_service_method_gives_the_routes_answer(api: TestClient) -> None:
    services = api.app.state.services  # type: ignore[attr-defined]
    admin = Principal(key_id="k", role="admin", namespaces=frozenset({"*"}))
    teachers = [TeacherSpec(kind="hindsight", horizon=2), TeacherSpec(kind="reflection")]
    got = services.distill.contexts_for(admin, "lab", ["a1", "a3"], teachers, steps=[0, 2])
    route = contexts(
        api,
        trajectories=[{"id": "a1"}, {"id": "a3"}],
        teachers=[{"kind": "hindsight", "horizon": 2}, {"kind": "reflection"}],
        steps=[0, 2],
    )
    assert got.model_dump(mode="json") == route


BAD: list[tuple[str, dict[str, Any], int, str, str]] = [
    # (case, body, status, field, rule)
    ("unknown id", {"trajectories": [{"id": "a1"}, {"id": "nope"}]}, 404, "trajectories[1].id", ""),
    (
        "horizon 0",
        {"teachers": [{"kind": "hindsight", "horizon": 0}]},
        422,
        "teachers[0].horizon",
        "greater_than_equal",
    ),
    ("unknown template", {"template": "fancy"}, 422, "template", "known_template"),
    ("bad template name", {"template": "../default"}, 422, "template", "string_pattern_mismatch"),
    (
        "duplicate names",
        {"teachers": [{"kind": "memory"}, {"kind": "reflection", "name": "memory"}]},
        422,
        "teachers[1].name",
        "unique_name",
    ),
    (
        "duplicate hindsight",
        {"teachers": [{"kind": "hindsight"}, {"kind": "hindsight", "horizon": 1}]},
        422,
        "teachers[1].name",
        "unique_name",
    ),
    (
        "max_tokens, no tokenizer",
        {"teachers": [{"kind": "reflection", "max_tokens": 50}]},
        422,
        "teachers[0].max_tokens",
        "needs_tokenizer",
    ),
    (
        "horizon for memory",
        {"teachers": [{"kind": "memory", "horizon": 2}]},
        422,
        "teachers[0].horizon",
        "not_for_kind",
    ),
    ("unknown kind", {"teachers": [{"kind": "oracle"}]}, 422, "teachers[0].kind", "literal_error"),
    ("snapshot unknown", {"snapshot": "nope"}, 404, "snapshot", ""),
    ("snapshot of another namespace", {"snapshot": "other-snap"}, 404, "snapshot", ""),
    ("a ref with fields", {"trajectories": [{"id": "a1", "group_id": "g"}]}, 422, "trajectories[0]", "value_error"),
    ("neither id nor task", {"trajectories": [{}]}, 422, "trajectories[0]", "value_error"),
    ("no trajectories", {"trajectories": []}, 422, "trajectories", "too_short"),
    ("negative step", {"steps": [-1]}, 422, "steps[0]", "greater_than_equal"),
    (
        "inline step index",
        {"trajectories": [{"task": "t", "steps": [{**step("o", "a"), "index": 3}]}]},
        422,
        "trajectories[0].steps[0].index",
        "consecutive",
    ),
]


@pytest.mark.parametrize(("case", "body", "status", "field", "rule"), BAD, ids=[c[0] for c in BAD])
def test_bad_input_names_the_field_and_the_rule(
    api: TestClient, case: str, body: dict[str, Any], status: int, field: str, rule: str
) -> None:
    create_namespace(api, "other")
    assert api.post("/v1/namespaces/other/snapshots", json={"id": "other-snap"}).status_code == 201
    r = api.post(URL, json={"trajectories": [{"id": "a1"}], **body})
    assert r.status_code == status, r.text
    error = r.json()["error"]
    assert error["field"] == field, error
    if rule:
        assert error["rule"] == rule, error


def test_the_step_contexts_of_a_request_are_bounded(database_url: str, tmp_path: Path) -> None:
    settings = make_settings(database_url, tmp_path, limits={"max_context_steps": 4})
    with TestClient(create_app(settings), headers={"Authorization": f"Bearer {ADMIN_KEY}"}) as api:
        create_namespace(api, "lab")
        attempt(api, "a1", group="g1", success=False)
        attempt(api, "a2", group="g1", success=False)
        r = api.post(URL, json={"trajectories": [{"id": "a1"}, {"id": "a2"}]})  # 6 steps
        assert r.status_code == 422 and (r.json()["error"]["field"], r.json()["error"]["rule"]) == (
            "trajectories",
            "max_context_steps",
        )
        assert api.post(URL, json={"trajectories": [{"id": "a1"}, {"id": "a2"}], "steps": [0, 2]}).status_code == 200


def test_trainers_distil_agents_may_not(api: TestClient) -> None:
    def key(role: str, namespaces: list[str]) -> dict[str, str]:
        r = api.post("/v1/keys", json={"role": role, "namespaces": namespaces})
        assert r.status_code == 201, r.text
        return {"Authorization": f"Bearer {r.json()['key']}"}

    body = {"trajectories": [{"id": "a1"}], "teachers": [{"kind": "reflection"}]}
    assert api.post(URL, json=body, headers=key("trainer", ["lab"])).status_code == 200
    r = api.post(URL, json=body, headers=key("agent", ["lab"]))
    assert r.status_code == 403 and r.json()["error"]["rule"] == "role"
    assert api.post(URL, json=body, headers=key("operator", ["lab"])).status_code == 403
    create_namespace(api, "elsewhere")
    assert api.post(URL, json=body, headers=key("trainer", ["elsewhere"])).status_code == 404
    assert api.post(URL, json=body, headers={"Authorization": "Bearer nope"}).status_code == 401


def test_include_returns_only_the_renderings_asked_for(api: TestClient) -> None:
    both = contexts(api, trajectories=[{"id": "a1"}], teachers=ALL_KINDS)
    for include, kept, dropped in ((["messages"], "messages", "text"), (["text"], "text", "messages")):
        one = contexts(api, trajectories=[{"id": "a1"}], teachers=ALL_KINDS, include=include)
        for s_both, s_one in zip(both["trajectories"][0]["steps"], one["trajectories"][0]["steps"], strict=True):
            for name, full in [("plain", s_both["plain"]), *s_both["teachers"].items()]:
                part = s_one["plain"] if name == "plain" else s_one["teachers"][name]
                assert part[dropped] is None
                assert part[kept] == full[kept]
                assert {k: v for k, v in part.items() if k not in ("text", "messages")} == {
                    k: v for k, v in full.items() if k not in ("text", "messages")
                }
    r = api.post(URL, json={"trajectories": [{"id": "a1"}], "include": []})
    assert r.status_code == 422 and r.json()["error"]["field"] == "include"


PARTS_CASES = [
    {},
    {"history_max_chars": 100},
    {"history_steps": 1},
    {"steps": [2]},
    {"steps": [1, 2], "history_max_chars": 0},
]


@pytest.mark.parametrize("window", PARTS_CASES, ids=[str(c) for c in PARTS_CASES])
def test_parts_state_the_history_once_and_rebuild_every_steps_messages(api: TestClient, window: dict[str, Any]) -> None:
    inline = {"task": "open the gate", "steps": door_steps(True)}
    body = {"trajectories": [{"id": "a1"}, {"id": "a0"}, inline], "teachers": ALL_KINDS, **window}
    r_full = api.post(URL, json={**body, "include": ["messages"]})
    r_parts = api.post(URL, json={**body, "include": ["parts"]})
    assert r_full.status_code == r_parts.status_code == 200, r_parts.text
    full, parts = r_full.json(), ContextsResult.model_validate(r_parts.json())
    assert len(r_parts.content) < len(r_full.content)
    for t_full, t in zip(full["trajectories"], parts.trajectories, strict=True):
        assert t_full["history"] is None and t.history is not None
        for s_full, s in zip(t_full["steps"], t.steps, strict=True):
            assert s.plain.messages is None and s.plain.text is None
            assert step_messages(t, s) == s_full["plain"]["messages"]
            for name, teacher in s_full["teachers"].items():
                assert s.teachers[name].messages is None
                assert step_messages(t, s, name) == teacher["messages"]
                same = {k: v for k, v in teacher.items() if k not in ("messages", "system")}
                assert s.teachers[name].model_dump(exclude={"messages", "system"}) == same


def test_parts_by_hand(api: TestClient) -> None:
    """a1, step 2, 100 characters of history: steps 1 and 2 shown, step 0 omitted."""
    out = contexts(api, trajectories=[{"id": "a1"}], steps=[2], history_max_chars=100, include=["parts", "text"])
    history = out["trajectories"][0]["history"]
    assert history["system"].endswith(TASK)
    assert history["start"] == 1
    assert history["assistants"] == ["take key"]
    assert history["users"][0].startswith("Result of your last action: you walk north")
    assert len(history["users"]) == 2 and "the door is locked" in history["users"][1]
    plain = only_step(out)["plain"]
    assert plain["marker"] == "(1 earlier steps omitted)" and plain["omitted_steps"] == 1
    assert plain["text"] is not None and plain["messages"] is None  # parts and text together
    whole = contexts(api, trajectories=[{"id": "a1"}], include=["parts"])
    assert [s["plain"]["marker"] for s in whole["trajectories"][0]["steps"]] == [None, None, None]
    messages_only = ContextsResult.model_validate(contexts(api, trajectories=[{"id": "a1"}], include=["messages"]))
    with pytest.raises(ClientInvalidInput) as caught:
        step_messages(messages_only.trajectories[0], messages_only.trajectories[0].steps[0])
    assert caught.value.field == "include"
