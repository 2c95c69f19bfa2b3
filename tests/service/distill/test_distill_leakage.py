"""The leakage guards of teacher contexts, with the real packaged model, on both
engines. The traps: memory items whose only evidence is the trajectory itself, a
sibling of its rollout group, or another attempt at its task must not appear by
default, and each appears once its guard is opted out of; the same for an inline
rollout group not stored yet; the defensive check drops what a retrieval let
through; the task-scoped kinds (evidence card, attempt summary) keep the trajectory
and group guards only; and the step's own action never appears in any teacher's
privileged block (random actions, hypothesis)."""

from __future__ import annotations

import json
import os
import re
from typing import Any

import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reflectors.embed import write_vectors
from store import evidence as evidence_repo
from store import trajectories as trajectories_repo
from store.embedding import Embedder
from tests.factories import add_reflection, step
from tests.fixtures import create_namespace, drain, post_trajectory

os.environ.setdefault("HF_HUB_OFFLINE", "1")

URL = "/v1/namespaces/leak/distill/contexts"
TEA, SOUP = "make tea", "make soup"
KITCHEN = "You are in a kitchen. A kettle sits on the cold stove."
# trajectory -> (task, group, action at the kitchen state); created in this order
SOURCES = {
    "peer": (TEA, "h", "light stove"),  # another attempt at the task, another rollout group
    "sib": (TEA, "g", "fill kettle"),  # a sibling in self's rollout group
    "self": (TEA, "g", "boil water"),  # the trajectory the contexts are for
    "far": (SOUP, None, "open tap"),  # another task
}
ALLOW_ALL = {"allow_same_trajectory": True, "allow_same_group": True, "allow_same_task": True}


@pytest.fixture
def app(api_onnx: TestClient) -> TestClient:
    create_namespace(api_onnx, "leak")
    return api_onnx


def add_skill(api: TestClient, model: Embedder, name: str, source: str) -> None:
    """An active skill whose only evidence is `source`'s first step."""
    text = f"Skill {name}: in a kitchen with a kettle on the stove, heat water for tea."
    vector = model.encode([text])[0]
    db = api.app.state.services.db  # type: ignore[attr-defined]
    with db.write() as s:
        traj = trajectories_repo.read_trajectory(s, "leak", source)
        assert traj is not None
        content = {"name": name, "when_to_use": "a kitchen with a kettle", "steps": ["heat water"], "text": text}
        row = add_reflection(s, "leak", name, kind="skill", status="active", content=content, text=text)
        write_vectors(s, row, model.name, {"state": vector}, {"state": text})
        evidence_repo.create_evidence(s, row.pk, [evidence_repo.EvidenceIn(traj.pk, 0, 0, success=True)])
        evidence_repo.update_evidence_stats(s, [row.pk])


@pytest.fixture
def api(app: TestClient, onnx_model: Embedder) -> TestClient:
    for id_, (task, group, action) in SOURCES.items():
        steps = [step(KITCHEN + f" ({id_})", action, result="something happens")]
        if id_ == "self":
            steps.append(step("The kettle whistles.", "pour water", caused_failure=True, result="it spills"))
        outcome = {"success": id_ != "self", **({"failure_reason": "tea spilt"} if id_ == "self" else {})}
        post_trajectory(app, "leak", id_, task=task, group_id=group, steps=steps, outcome=outcome)
    drain(app)
    for id_ in SOURCES:
        add_skill(app, onnx_model, f"skill-{id_}", id_)
    return app


def exemplar_ids(api: TestClient) -> dict[str, str]:
    """source trajectory -> the id of its kitchen exemplar."""
    r = api.get("/v1/namespaces/leak/reflections?kind=exemplar&limit=100")
    assert r.status_code == 200, r.text
    by_action = {item["content"]["action"]: item["id"] for item in r.json()["items"]}
    return {id_: by_action[action] for id_, (_, _, action) in SOURCES.items()}


def memory_for(api: TestClient, kind: str, leakage: dict[str, bool], trajectory: dict[str, Any] | None = None) -> Any:
    body = {
        "trajectories": [trajectory or {"id": "self"}],
        "steps": [0],
        "teachers": [{"kind": "memory", "kinds": [kind], "k": 20}],
        "leakage": leakage,
    }
    r = api.post(URL, json=body)
    assert r.status_code == 200, r.text
    return r.json()["trajectories"][0]["steps"][0]["teachers"]["memory"]


def visible(api: TestClient, kind: str, teacher: dict[str, Any]) -> set[str]:
    ids = exemplar_ids(api) if kind == "exemplar" else {s: f"skill-{s}" for s in SOURCES}
    return {source for source, id_ in ids.items() if id_ in teacher["item_ids"]}


LATTICE = [
    ({}, {"far"}),
    ({"allow_same_task": True}, {"far", "peer"}),
    ({"allow_same_task": True, "allow_same_group": True}, {"far", "peer", "sib"}),
    (ALLOW_ALL, {"far", "peer", "sib", "self"}),
    ({"allow_same_trajectory": True, "allow_same_group": True}, {"far"}),  # the task guard still holds
    ({"allow_same_task": True, "allow_same_trajectory": True}, {"far", "peer", "self"}),
]


@pytest.mark.parametrize("kind", ["exemplar", "skill"])
def test_memory_never_shows_the_trajectory_its_group_or_its_task_unless_allowed(api: TestClient, kind: str) -> None:
    for leakage, expected in LATTICE:
        teacher = memory_for(api, kind, leakage)
        assert visible(api, kind, teacher) == expected, (kind, leakage)
        guards = teacher["leakage"]
        assert guards["excluded_tasks"] == (0 if leakage.get("allow_same_task") else 1)
        own = 0 if leakage.get("allow_same_trajectory") else 1
        assert guards["excluded_trajectories"] == own + (0 if leakage.get("allow_same_group") else 1)
        assert guards["dropped_items"] == 0  # the retrieval filters did it; nothing left for the defensive check
    everything = memory_for(api, kind, ALLOW_ALL)
    if kind == "exemplar":  # self's own exemplar is there, its action (this step's) withheld
        assert "boil water" not in everything["privileged"]
        assert "Action taken: [action withheld]" in everything["privileged"]
        assert everything["leakage"]["redacted_actions"] >= 1
        for source in ("peer", "sib", "far"):
            assert SOURCES[source][2] in everything["privileged"]


def test_each_trajectory_of_one_request_is_guarded_by_its_own_filters(api: TestClient) -> None:
    """One request for two trajectories of different tasks: their steps' retrievals run
    as one batch over the same candidates, and each keeps its own guards (the rows
    one lets through are not taken as let through for the other)."""
    for pair in (["self", "far"], ["far", "self"]):
        body = {
            "trajectories": [{"id": id_} for id_ in pair],
            "steps": [0],
            "teachers": [{"kind": "memory", "kinds": ["exemplar"], "k": 20}],
        }
        r = api.post(URL, json=body)
        assert r.status_code == 200, r.text
        seen = {}
        for id_, traj in zip(pair, r.json()["trajectories"], strict=True):
            teacher = traj["steps"][0]["teachers"]["memory"]
            seen[id_] = visible(api, "exemplar", teacher)
            assert teacher["leakage"]["dropped_items"] == 0, pair
        assert seen == {"self": {"far"}, "far": {"peer", "sib", "self"}}, pair


def test_the_defensive_check_drops_what_a_retrieval_lets_through(
    api: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    retrieval = api.app.state.services.retrieval  # type: ignore[attr-defined]
    original = retrieval.retrieve_many

    def unguarded(principal: Any, ns: str, reqs: list[Any], **kw: Any) -> Any:
        open_reqs = [
            r.model_copy(
                update={"filters": r.filters.model_copy(update={"exclude_tasks": [], "exclude_trajectory_ids": []})}
            )
            for r in reqs
        ]
        return original(principal, ns, open_reqs, **kw)

    monkeypatch.setattr(retrieval, "retrieve_many", unguarded)
    teacher = memory_for(api, "skill", {})
    assert visible(api, "skill", teacher) == {"far"}
    assert teacher["leakage"]["dropped_items"] == 3  # self's, sib's and peer's skills, dropped after retrieval
    teacher = memory_for(api, "skill", {"allow_same_task": True})
    assert visible(api, "skill", teacher) == {"far", "peer"} and teacher["leakage"]["dropped_items"] == 2


def test_an_inline_rollout_group_is_guarded_like_a_stored_one(api: TestClient) -> None:
    inline = {"task": TEA, "group_id": "g", "steps": [step(KITCHEN, "stir")]}  # not stored; a sibling of sib and self
    for kind in ("exemplar", "skill"):
        assert visible(api, kind, memory_for(api, kind, {}, inline)) == {"far"}
        assert visible(api, kind, memory_for(api, kind, {"allow_same_task": True}, inline)) == {"far", "peer"}
        teacher = memory_for(api, kind, {"allow_same_task": True, "allow_same_group": True}, inline)
        assert visible(api, kind, teacher) == {"far", "peer", "sib", "self"}
        fresh = {"task": TEA, "group_id": "z", "steps": [step(KITCHEN, "stir")]}
        assert visible(api, kind, memory_for(api, kind, {"allow_same_task": True}, fresh)) == set(SOURCES)


def test_task_scoped_kinds_keep_the_trajectory_and_group_guards(api: TestClient) -> None:
    def teachers(trajectory: dict[str, Any], leakage: dict[str, bool]) -> dict[str, Any]:
        body = {
            "trajectories": [trajectory],
            "steps": [0],
            "teachers": [{"kind": "evidence_card"}, {"kind": "attempt_summary", "k": 5}],
            "leakage": leakage,
        }
        r = api.post(URL, json=body)
        assert r.status_code == 200, r.text
        return r.json()["trajectories"][0]["steps"][0]["teachers"]  # type: ignore[no-any-return]

    own = teachers({"id": "self"}, {})
    card, summary = own["evidence_card"], own["attempt_summary"]
    # the card draws on peer (group h), sib and self (group g): rebuilt from peer alone, not dropped
    assert card["applicable"] and card["leakage"]["task_scoped"] is True
    assert card["leakage"]["subtracted_evidence"] == 2 and card["leakage"]["dropped_items"] == 0
    assert "Task: make tea\nEvidence from 1 rollout group(s): 1 rollouts, 1 succeeded." in card["privileged"]
    assert "fill kettle" not in card["privileged"] and "tea spilt" not in card["privileged"]
    assert summary["applicable"] and summary["item_ids"] == ["peer"]  # sib is self's group; far another task
    assert summary["leakage"]["task_scoped"] is True and summary["leakage"]["allow_same_task"] is False

    opened = teachers({"id": "self"}, {"allow_same_group": True, "allow_same_trajectory": True})
    assert opened["evidence_card"]["applicable"] is True
    assert opened["evidence_card"]["leakage"]["subtracted_evidence"] == 0
    assert "Evidence from 2 rollout group(s): 3 rollouts, 2 succeeded." in opened["evidence_card"]["privileged"]
    assert "Failure reasons: tea spilt (1x)" in opened["evidence_card"]["privileged"]
    assert opened["attempt_summary"]["item_ids"] == ["sib", "peer"]  # newest first, stored before self

    # a rollout of a new group: the card is about its task by design, no task guard
    fresh = teachers({"task": TEA, "group_id": "z", "steps": [step(KITCHEN, "stir")]}, {})
    assert fresh["evidence_card"]["applicable"] is True
    assert "light stove" in fresh["evidence_card"]["privileged"]
    assert fresh["attempt_summary"]["item_ids"] == ["self", "sib", "peer"]


def test_a_card_drawing_only_on_the_trajectory_and_its_group_says_so(api: TestClient) -> None:
    for id_, success in (("c1", True), ("c2", False)):
        post_trajectory(
            api, "leak", id_, task="make coffee", group_id="c", steps=[step("a grinder", "grind")], success=success
        )
    drain(api)
    body = {"trajectories": [{"id": "c1"}], "steps": [0], "teachers": [{"kind": "evidence_card"}]}
    r = api.post(URL, json=body)
    assert r.status_code == 200, r.text
    card = r.json()["trajectories"][0]["steps"][0]["teachers"]["evidence_card"]
    assert card["applicable"] is False and card["privileged"] == "" and card["chars"] == 0
    assert card["reason"] == (
        "the task's evidence card draws only on its rollout group and this trajectory: "
        "nothing is left once they are subtracted (leakage guard)"
    )
    assert card["leakage"]["dropped_items"] == 1 and card["leakage"]["subtracted_evidence"] == 2


def merged_twin(api: TestClient) -> str:
    """A rollout of self's group g that met peer's state and took peer's action and
    failed: peer's exemplar is now merged from two evidence rows, one of g. Returns its id."""
    steps = [step(KITCHEN + " (peer)", "light stove", result="something happens")]
    post_trajectory(api, "leak", "twin", task=TEA, group_id="g", steps=steps, outcome={"success": False})
    drain(api)
    merged = exemplar_ids(api)["peer"]
    r = api.get(f"/v1/namespaces/leak/reflections/{merged}")
    assert r.status_code == 200 and r.json()["evidence_count"] == 2, r.text
    return merged


def test_merged_exemplars_have_the_guarded_evidence_subtracted_not_the_item_hidden(api: TestClient) -> None:
    merged = merged_twin(api)
    # allow_same_task: peer's attempt may be shown; the twin (self's group) may not: subtracted
    teacher = memory_for(api, "exemplar", {"allow_same_task": True})
    assert merged in teacher["item_ids"] and visible(api, "exemplar", teacher) == {"far", "peer"}
    assert (
        "Action taken: light stove\n  Result: something happens\n  (1/1 attempts succeeded, return-to-go 1.00)"
        in (teacher["privileged"])
    )
    assert teacher["leakage"]["subtracted_evidence"] == 1 and teacher["leakage"]["dropped_items"] == 0
    # the group allowed too: both rows count
    opened = memory_for(api, "exemplar", {"allow_same_task": True, "allow_same_group": True})
    assert "(1/2 attempts succeeded, return-to-go 0.50)" in opened["privileged"]
    assert opened["leakage"]["subtracted_evidence"] == 0
    # the task guard on: both rows are the task's, nothing is left: hidden
    assert merged not in memory_for(api, "exemplar", {})["item_ids"]


def test_a_subtracted_exemplar_shows_an_occurrence_left_not_a_guarded_one(api: TestClient) -> None:
    # the exemplar's stored content is its first occurrence: here one of self's group
    pantry = "You are in a pantry. A tin of tea leaves is on the shelf."
    for id_, group, result in (("early-sib", "g", "the lid sticks"), ("other", "h3", "the tin opens")):
        steps = [step(pantry, "open tin", result=result)]
        post_trajectory(api, "leak", id_, task=TEA, group_id=group, steps=steps, success=True)
        drain(api)  # one at a time: the sibling's occurrence is the stored first
    teacher = memory_for(api, "exemplar", {"allow_same_task": True})
    assert "Action taken: open tin\n  Result: the tin opens\n  (1/1 attempts succeeded" in teacher["privileged"]
    assert "the lid sticks" not in teacher["privileged"]
    opened = memory_for(api, "exemplar", {"allow_same_task": True, "allow_same_group": True})
    assert "Result: the lid sticks\n  (2/2 attempts succeeded" in opened["privileged"]  # as stored


def test_subtracted_exemplars_are_deterministic_under_a_snapshot(api: TestClient) -> None:
    merged = merged_twin(api)
    r = api.post("/v1/namespaces/leak/snapshots", json={"id": "pin"})
    assert r.status_code in (200, 201), r.text
    body = {
        "snapshot": "pin",
        "trajectories": [{"id": "self"}],
        "teachers": [{"kind": "memory", "kinds": ["exemplar"], "k": 20}, {"kind": "evidence_card"}],
        "leakage": {"allow_same_task": True},
    }
    first = api.post(URL, json=body)
    assert first.status_code == 200, first.text
    # more of the same state and action since: a success of another group, another of self's group
    for id_, group, success in (("later", "h2", True), ("later-sib", "g", True)):
        steps = [step(KITCHEN + " (peer)", "light stove", result="something happens")]
        post_trajectory(api, "leak", id_, task=TEA, group_id=group, steps=steps, success=success)
    drain(api)
    again = api.post(URL, json=body)
    assert again.status_code == 200 and again.content == first.content
    memory = first.json()["trajectories"][0]["steps"][0]["teachers"]["memory"]
    assert merged in memory["item_ids"] and "(1/1 attempts succeeded, return-to-go 1.00)" in memory["privileged"]
    live = api.post(URL, json={k: v for k, v in body.items() if k != "snapshot"}).json()
    live_memory = live["trajectories"][0]["steps"][0]["teachers"]["memory"]
    assert (
        "(2/2 attempts succeeded, return-to-go 1.00)" in live_memory["privileged"]
    )  # peer and later; twin and later-sib subtracted
    assert live_memory["leakage"]["subtracted_evidence"] == 2


# -- the own-action guard, through the API --------------------------------------------


def shows(action: Any, text: str) -> bool:
    """An independent check: the action's words in order as whole words, any case
    and spacing; a tool call as its JSON with every space removed."""
    if not isinstance(action, str):
        squeezed = re.sub(r"\s+", "", text).lower()
        forms = {json.dumps(action, sort_keys=s, separators=(",", ":"), ensure_ascii=a) for s in (0, 1) for a in (0, 1)}
        return any(f.lower() in squeezed for f in forms)
    words = action.split()
    if len(" ".join(words)) < 2:
        return False
    body = r"\s+".join(re.escape(w) for w in words)
    start = r"(?<!\w)" if re.match(r"\w", words[0][0]) else ""
    end = r"(?!\w)" if re.match(r"\w", words[-1][-1]) else ""
    return re.search(start + body + end, text, re.IGNORECASE) is not None


ALL_TEACHERS = [
    {"kind": "memory", "k": 20},
    {"kind": "memory", "kinds": ["exemplar", "evidence_card"], "name": "memory_cards", "k": 20},
    {"kind": "hindsight", "horizon": 1},
    {"kind": "hindsight", "horizon": 3},
    {"kind": "evidence_card"},
    {"kind": "reflection"},
    {"kind": "attempt_summary", "k": 5},
]


def own_action_episode(action: Any, task: str = TEA) -> dict[str, Any]:
    """The action at steps 0 and 2 (so hindsight of step 0 shows it), flagged as the
    failure's cause at step 2 (so the reflection shows it)."""
    return {
        "task": task,
        "group_id": "inline",
        "steps": [
            step(KITCHEN, action, result="nothing yet"),
            step("The kettle is on.", "wait", result="it hums", internal_state=f"then {json.dumps(action)}"),
            step(KITCHEN, action, result="it spills", caused_failure=True),
        ],
        "outcome": {"success": False, "failure_reason": f"doing {json.dumps(action)} twice"},
    }


@pytest.mark.parametrize(
    "action", ["boil water", "Light Stove", "press [enter]", "é-clair", {"name": "heat", "args": {"to": 100}}]
)
def test_the_step_s_own_action_never_appears_in_a_teacher_block(api: TestClient, action: Any) -> None:
    # the action is everywhere: in stored attempts of the task (exemplars, the card, attempt summaries)
    for i in range(3):
        steps = [step(KITCHEN + f" ({i})", action, result="steam"), step("The tea is ready.", "serve")]
        post_trajectory(api, "leak", f"other{i}", task=TEA, group_id="k", steps=steps, success=i != 1)
    drain(api)
    body = {"trajectories": [own_action_episode(action)], "teachers": ALL_TEACHERS, "leakage": ALLOW_ALL}
    r = api.post(URL, json=body)
    assert r.status_code == 200, r.text
    seen_redaction = 0
    for s in r.json()["trajectories"][0]["steps"]:
        own = body["trajectories"][0]["steps"][s["index"]]["action"]  # type: ignore[index]
        for name, teacher in s["teachers"].items():
            if own == action:
                assert not shows(action, teacher["privileged"]), (name, teacher["privileged"])
            seen_redaction += teacher["leakage"]["redacted_actions"]
    assert seen_redaction >= 3  # hindsight, reflection and the stored material all carried it


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(action=st.text(alphabet=st.sampled_from("abXY -.[]é1"), min_size=2, max_size=10).filter(lambda a: a.strip()))
def test_random_actions_never_appear_in_hindsight_or_reflection(app: TestClient, action: str) -> None:
    body = {
        "trajectories": [own_action_episode(action)],
        "teachers": [{"kind": "hindsight", "horizon": 2}, {"kind": "reflection"}],
    }
    r = app.post(URL, json=body)
    assert r.status_code == 200, r.text
    for s in r.json()["trajectories"][0]["steps"]:
        if s["index"] in (0, 2):
            for teacher in s["teachers"].values():
                assert not shows(action, teacher["privileged"]), (action, teacher["privileged"])
