"""Rubric rewards over HTTP (SQLite and PostgreSQL): creating and reading rubrics
(replay, conflict, frozen, bad criteria naming the field and rule), scoring stored
and inline trajectories (labels, explicit final answers, snapshots, stages, the
rubrics reflector's content), batches, permissions, and judged criteria through a
scripted OpenAI-compatible server over real HTTP (verdicts, the strict JSON format,
retries and the repair turn, failures, the token budget, concurrency)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from fastapi.testclient import TestClient

from reflectors.llm_client.schemas import RubricOut
from reflectors.prompted.rubrics import rubric_content
from store import llm_usage
from tests.factories import add_reflection, step
from tests.fixtures import create_namespace, drain, post_trajectory
from tests.reflectors.openai_server import Answer, HttpError, ScriptedLLM, json_answer

NS = "/v1/namespaces/lab"

MATH = {
    "id": "math",
    "name": "math answers",
    "task": "add two numbers",
    "criteria": [
        {
            "id": "correct",
            "text": "The final answer is the right number.",
            "weight": 3,
            "check": {"type": "regex", "pattern": r"\b{{label}}\b"},
        },
        {"id": "calc", "text": "Uses the calculator.", "weight": 1, "check": {"type": "tool_called", "tool": "calc"}},
        {"id": "brief", "text": "At most three steps.", "weight": 1, "check": {"type": "max_steps", "max_steps": 3}},
    ],
}
JUDGED = {
    "id": "judged",
    "name": "judged and ruled",
    "criteria": [
        {"id": "right", "text": "The answer is 42.", "weight": 1, "check": {"type": "contains", "text": "42"}},
        {"id": "clear", "text": "The answer explains itself.", "weight": 1},
    ],
}


def solved(answer: str = "The sum is 4", *, tool: bool = True) -> list[dict[str, Any]]:
    steps = [step("2 + 2 = ?", {"tool": "calc", "args": {"expr": "2+2"}}, result="4")] if tool else []
    return [*steps, step("the calculator says 4", answer)]


def inline(answer: str = "The sum is 4", **fields: Any) -> dict[str, Any]:
    return {"task": "add 2 and 2", "steps": solved(answer), **fields}


def rubric(api: TestClient, body: dict[str, Any] = MATH) -> dict[str, Any]:
    r = api.post(f"{NS}/rubrics", json=body)
    assert r.status_code == 201, r.text
    return r.json()  # type: ignore[no-any-return]


def score(api: TestClient, id: str = "math", **body: Any) -> dict[str, Any]:
    r = api.post(f"{NS}/rubrics/{id}/score", json=body)
    assert r.status_code == 200, r.text
    return r.json()  # type: ignore[no-any-return]


def error(r: Any) -> tuple[int, str, str | None]:
    e = r.json()["error"]
    return r.status_code, e.get("field"), e.get("rule")


# -- rubrics ----------------------------------------------------------------------


def test_create_replay_conflict_get_and_retrieve(client: TestClient) -> None:
    create_namespace(client, "lab")
    created = rubric(client)
    assert (created["id"], created["name"], created["status"], created["version"]) == (
        "math",
        "math answers",
        "active",
        1,
    )
    assert [(c["id"], c["method"]) for c in created["criteria"]] == [
        ("correct", "rule"),
        ("calc", "rule"),
        ("brief", "rule"),
    ]
    assert created["reflector"] == "api" and created["text"].startswith(
        "Rubric: math answers\n- [3.00] The final answer"
    )

    replay = client.post(f"{NS}/rubrics", json=MATH)
    assert replay.status_code == 200 and replay.json() == created
    other = {**MATH, "criteria": MATH["criteria"][:1]}
    assert error(client.post(f"{NS}/rubrics", json=other)) == (409, "id", "idempotent_replay")

    assert client.get(f"{NS}/rubrics/math").json() == created
    assert error(client.get(f"{NS}/rubrics/nope")) == (404, "id", None)
    [listed] = client.get(f"{NS}/reflections", params={"kind": "rubric"}).json()["items"]
    assert listed["id"] == "math" and listed["content"]["name"] == "math answers"

    # Matched by its task in retrieval once embedded, like an evidence card.
    drain(client)
    r = client.post(
        f"{NS}/retrieve", json={"state": {"observation": "x"}, "task": "add two numbers", "kinds": ["rubric"]}
    )
    assert [i["id"] for i in r.json()["items"]] == ["math"]


def test_an_id_of_another_kind_or_a_frozen_namespace_is_a_conflict(client: TestClient) -> None:
    create_namespace(client, "lab")
    with client.app.state.services.db.write() as session:  # type: ignore[attr-defined]
        add_reflection(session, "lab", "taken", kind="heuristic", content={"trigger": "t", "guideline": "g"})
    assert error(client.post(f"{NS}/rubrics", json={**MATH, "id": "taken"})) == (409, "id", "idempotent_replay")
    assert error(client.get(f"{NS}/rubrics/taken")) == (404, "id", None)  # not a rubric
    assert client.put(f"{NS}/freeze").status_code == 200
    assert error(client.post(f"{NS}/rubrics", json=MATH)) == (409, "namespace", "namespace_frozen")
    assert client.delete(f"{NS}/freeze").status_code == 200
    rubric(client)


@pytest.mark.parametrize(
    ("criteria", "field", "rule"),
    [
        (
            [{"id": "a", "text": "t", "weight": 1, "check": {"type": "regex", "pattern": "(unclosed"}}],
            "criteria[0].check.pattern",
            "regex",
        ),
        ([{"id": "a", "text": "t", "weight": 1}, {"id": "a", "text": "u", "weight": 1}], "criteria[1].id", "unique"),
        ([{"id": "a", "text": "t", "weight": 0}, {"id": "b", "text": "u", "weight": 0}], "criteria", "weights"),
        ([{"id": "a", "text": "t", "weight": -1}], "criteria[0].weight", "greater_than_equal"),
        (
            [{"id": "a", "text": "t", "weight": 1, "check": {"type": "semantic"}}],
            "criteria[0].check.type",
            "known_check_type",
        ),
        (
            [{"id": "a", "text": "t", "weight": 1, "check": {"type": "numeric", "op": "eq"}}],
            "criteria[0].check.value",
            "required",
        ),
        (
            [{"id": "a", "text": "t", "weight": 1, "check": {"type": "json_path", "path": "a[", "value": 1}}],
            "criteria[0].check.path",
            "json_path",
        ),
        ([{"id": "a", "text": "t", "weight": 1, "grade": 2}], "criteria[0].grade", "extra_forbidden"),
        ([], "criteria", "too_short"),
    ],
)
def test_bad_criteria_are_422_naming_the_field_and_rule(
    client: TestClient, criteria: list[dict[str, Any]], field: str, rule: str
) -> None:
    create_namespace(client, "lab")
    assert error(client.post(f"{NS}/rubrics", json={**MATH, "criteria": criteria})) == (422, field, rule)
    assert client.get(f"{NS}/rubrics/math").status_code == 404  # nothing stored


# -- scoring ----------------------------------------------------------------------


def test_score_stored_and_inline_trajectories(client: TestClient) -> None:
    create_namespace(client, "lab")
    rubric(client)
    post_trajectory(client, "lab", "t-good", task="add 2 and 2", steps=solved(), metadata={"label": 4}, success=True)
    post_trajectory(client, "lab", "t-bad", task="add 2 and 2", steps=solved("It is 5", tool=False), success=False)

    good = score(client, trajectory_id="t-good")  # label from metadata.label
    assert (good["rubric_id"], good["rubric_version"], good["trajectory_id"]) == ("math", 1, "t-good")
    assert good["reward"] == 1.0 and good["stages"] == []
    assert [(c["id"], c["score"], c["weight"], c["method"]) for c in good["criteria"]] == [
        ("correct", 1.0, 3.0, "rule"),
        ("calc", 1.0, 1.0, "rule"),
        ("brief", 1.0, 1.0, "rule"),
    ]
    assert good["criteria"][0]["rationale"] == r"final_answer matches /\b4\b/"

    bad = score(client, trajectory_id="t-bad", label="4")
    assert [c["score"] for c in bad["criteria"]] == [0.0, 0.0, 1.0] and bad["reward"] == pytest.approx(1 / 5)
    assert bad["criteria"][1]["rationale"] == "tool calc called 0 times (wanted 1..any)"
    # An explicit label wins over metadata.label; an explicit final answer over the last action.
    assert score(client, trajectory_id="t-good", label=5)["criteria"][0]["score"] == 0.0
    assert score(client, trajectory_id="t-bad", label=4, final_answer="so: 4")["criteria"][0]["score"] == 1.0

    inline_score = score(client, trajectory=inline(id="roll-1"), label=4)
    assert inline_score["trajectory_id"] == "roll-1" and inline_score["reward"] == 1.0
    assert client.get(f"{NS}/trajectories/roll-1").status_code == 404  # scored, not stored


def test_score_errors_name_the_field(client: TestClient) -> None:
    create_namespace(client, "lab")
    rubric(client)
    assert error(client.post(f"{NS}/rubrics/nope/score", json={"trajectory": inline(), "label": 4})) == (
        404,
        "id",
        None,
    )
    assert error(client.post(f"{NS}/rubrics/math/score", json={"trajectory_id": "ghost", "label": 4})) == (
        404,
        "trajectory_id",
        None,
    )
    r = client.post(f"{NS}/rubrics/math/score", json={"trajectory": inline()})
    assert error(r) == (422, "label", "label_required") and "'correct'" in r.json()["error"]["message"]
    assert error(client.post(f"{NS}/rubrics/math/score", json={"label": 4})) == (422, "body", "value_error")
    both = {"trajectory_id": "a", "trajectory": inline(), "label": 4}
    assert error(client.post(f"{NS}/rubrics/math/score", json=both)) == (422, "body", "value_error")
    assert error(
        client.post(f"{NS}/rubrics/math/score", json={"trajectory": inline(), "label": 4, "snapshot": "s9"})
    ) == (
        404,
        "snapshot",
        None,
    )
    assert error(client.post("/v1/namespaces/nowhere/rubrics/math/score", json={"trajectory": inline()})) == (
        404,
        "namespace",
        None,
    )
    # A stored rubric edited into something unscorable is reported like a bad body.
    r = client.patch(
        f"{NS}/reflections/math", json={"content": {"name": "x", "criteria": [{"text": "t", "weight": -2}]}}
    )
    assert r.status_code == 200, r.text
    assert error(client.post(f"{NS}/rubrics/math/score", json={"trajectory": inline(), "label": 4})) == (
        422,
        "criteria[0].weight",
        "ge_0",
    )


def test_scores_under_a_snapshot_do_not_move(client: TestClient) -> None:
    create_namespace(client, "lab")
    rubric(client)
    post_trajectory(client, "lab", "open-1", task="add 2 and 2", steps=solved())  # open: steps may follow
    assert client.post(f"{NS}/snapshots", json={"id": "s1"}).status_code == 201
    pinned = score(client, trajectory_id="open-1", label=4, snapshot="s1")

    # The rubric is edited and the trajectory grows past max_steps: live scores change.
    edited = {"name": "math answers", "criteria": [*MATH["criteria"][:2], {**MATH["criteria"][2], "weight": 5}]}
    assert client.patch(f"{NS}/reflections/math", json={"content": edited}).status_code == 200
    more = [step(f"again {i}", "recheck") for i in range(3)]
    assert client.post(f"{NS}/trajectories/open-1/steps", json={"steps": more}).status_code == 200
    live = score(client, trajectory_id="open-1", label=4, final_answer="4")
    assert live["rubric_version"] == 2 and live["criteria"][2] == {**live["criteria"][2], "score": 0.0, "weight": 5.0}
    assert score(client, trajectory_id="open-1", label=4, snapshot="s1") == pinned
    assert pinned["rubric_version"] == 1 and pinned["reward"] == 1.0

    # A rubric or trajectory created after the snapshot is not in it.
    rubric(client, {**MATH, "id": "late"})
    r = client.post(f"{NS}/rubrics/late/score", json={"trajectory_id": "open-1", "label": 4, "snapshot": "s1"})
    assert error(r) == (404, "id", None) and "snapshot 's1'" in r.json()["error"]["message"]


def test_a_batch_scores_a_rollout_group_in_order(client: TestClient) -> None:
    create_namespace(client, "lab")
    rubric(client)
    post_trajectory(client, "lab", "stored", task="add 2 and 2", steps=solved(), metadata={"label": 4})
    items = [
        {"trajectory": inline("The sum is 4", group_id="g1"), "label": 4},
        {"trajectory": inline("The sum is 5", group_id="g1"), "label": 4},
        {"trajectory_id": "stored"},
        {"trajectory": {"task": "add", "steps": solved("4", tool=False) * 4}, "label": "4"},
    ]
    r = client.post(f"{NS}/rubrics/math/score/batch", json={"items": items})
    assert r.status_code == 200, r.text
    body = r.json()
    rewards = [i["reward"] for i in body["items"]]
    assert rewards == pytest.approx([1.0, 2 / 5, 1.0, 3 / 5])
    assert [i["trajectory_id"] for i in body["items"]] == [None, None, "stored", None]
    assert body["reward_mean"] == pytest.approx(sum(rewards) / 4) and body["rubric_id"] == "math"

    no_label = [items[0], {"trajectory": inline()}]
    assert error(client.post(f"{NS}/rubrics/math/score/batch", json={"items": no_label})) == (
        422,
        "items[1].label",
        "label_required",
    )
    ghost = [items[0], {"trajectory_id": "ghost", "label": 4}]
    assert error(client.post(f"{NS}/rubrics/math/score/batch", json={"items": ghost})) == (
        404,
        "items[1].trajectory_id",
        None,
    )
    assert error(client.post(f"{NS}/rubrics/math/score/batch", json={"items": []})) == (422, "items", "too_short")


def test_stage_wise_scores_over_http(client: TestClient) -> None:
    create_namespace(client, "lab")
    staged = {
        "id": "staged",
        "name": "research then answer",
        "criteria": [
            {
                "id": "searched",
                "text": "Searches.",
                "weight": 1,
                "stage": "research",
                "check": {"type": "tool_called", "tool": "search"},
            },
            {
                "id": "cites",
                "text": "Cites a source.",
                "weight": 1,
                "stage": "answer",
                "check": {"type": "contains", "text": "[1]"},
            },
            {"id": "short", "text": "Few steps.", "weight": 1, "check": {"type": "max_steps", "max_steps": 4}},
        ],
    }
    rubric(client, staged)
    steps = [
        step("question", {"tool": "search", "args": {"q": "x"}}, result="hits", metadata={"stage": "research"}),
        step("hits", {"tool": "open", "args": {"n": 1}}, result="page", metadata={"stage": "research"}),
        step("page", "The answer is y [1].", metadata={"stage": "answer"}),
    ]
    got = score(client, "staged", trajectory={"task": "research x", "steps": steps})
    assert got["reward"] == 1.0
    assert [(c["id"], c["score"], c["stage"]) for c in got["criteria"]] == [
        ("searched", 1.0, "research"),
        ("cites", 1.0, "answer"),
        ("short", 1.0, None),
    ]
    assert [(s["stage"], s["steps"], s["reward"]) for s in got["stages"]] == [
        ("research", [0, 1], 1.0),
        ("answer", [2], 1.0),
    ]
    assert [c["id"] for c in got["stages"][0]["criteria"]] == ["searched", "short"]
    unreached = score(client, "staged", trajectory={"task": "research x", "steps": steps[:2]})
    assert unreached["criteria"][1] == {
        **unreached["criteria"][1],
        "score": 0.0,
        "rationale": "stage 'answer' has no steps",
    }
    assert unreached["reward"] == pytest.approx(2 / 3)


def test_a_rubric_the_reflector_wrote_is_scored(client: TestClient) -> None:
    """The content reflectors/prompted/rubrics.py stores (target, json_field,
    step_count; ids c1, c2, …) reads and scores as DESIGN.md's shape."""
    create_namespace(client, "lab")
    answer = RubricOut.model_validate(
        {
            "criteria": [
                {
                    "text": "The final answer names the key.",
                    "weight": 0.5,
                    "rationale": "A names the key and succeeds; B does not.",
                    "check": {"type": "regex", "target": "final_action", "pattern": "key", "negate": False},
                },
                {
                    "text": "The agent opens the door with a tool call.",
                    "weight": 0.3,
                    "rationale": "A calls open with the door; B never does.",
                    "check": {
                        "type": "json_field",
                        "target": "any_action",
                        "path": "args.what",
                        "op": "equals",
                        "value": "door",
                    },
                },
                {
                    "text": "The attempt takes at most four steps.",
                    "weight": 0.2,
                    "rationale": "Long attempts ran out of time in every failure.",
                    "check": {"type": "step_count", "min_steps": None, "max_steps": 4},
                },
            ]
        }
    )
    content = rubric_content("escape", answer.criteria, [])
    with client.app.state.services.db.write() as session:  # type: ignore[attr-defined]
        add_reflection(
            session, "lab", "rubric_x", kind="rubric", content=content, task="escape", reflector="llm_rubrics"
        )
    read = client.get(f"{NS}/rubrics/rubric_x").json()
    assert [c["id"] for c in read["criteria"]] == ["c1", "c2", "c3"] and read["name"] == "Rubric for task: escape"
    steps = [step("a door", {"tool": "open", "args": {"what": "door"}}), step("open", "I used the key")]
    got = score(client, "rubric_x", trajectory={"task": "escape", "steps": steps})
    assert [c["score"] for c in got["criteria"]] == [1.0, 1.0, 1.0] and got["reward"] == pytest.approx(1.0)


def test_roles(client: TestClient) -> None:
    create_namespace(client, "lab")
    create_namespace(client, "other")

    def key(role: str, namespaces: list[str]) -> dict[str, str]:
        r = client.post("/v1/keys", json={"role": role, "namespaces": namespaces})
        return {"Authorization": f"Bearer {r.json()['key']}"}

    trainer, agent, outsider = key("trainer", ["lab"]), key("agent", ["lab"]), key("trainer", ["other"])
    assert client.post(f"{NS}/rubrics", json=MATH, headers=trainer).status_code == 201
    body = {"trajectory": inline(), "label": 4}
    assert client.post(f"{NS}/rubrics/math/score", json=body, headers=trainer).status_code == 200
    assert client.get(f"{NS}/rubrics/math", headers=agent).status_code == 200  # reading memory
    assert error(client.post(f"{NS}/rubrics/math/score", json=body, headers=agent)) == (403, None, "role")
    assert error(client.post(f"{NS}/rubrics", json={**MATH, "id": "m2"}, headers=agent)) == (403, None, "role")
    assert error(client.post(f"{NS}/rubrics/math/score", json=body, headers=outsider)) == (404, "namespace", None)


# -- judged criteria -------------------------------------------------------------------


def test_without_an_llm_a_judged_criterion_is_503_unless_skipped(client: TestClient) -> None:
    create_namespace(client, "lab")
    rubric(client, JUDGED)
    r = client.post(f"{NS}/rubrics/judged/score", json={"trajectory": inline("42")})
    assert error(r) == (503, "criteria[1]", "no_llm") and "'clear'" in r.json()["error"]["message"]
    got = score(client, "judged", trajectory=inline("42"), skip_judged=True)
    assert [(c["id"], c["score"], c["method"]) for c in got["criteria"]] == [
        ("right", 1.0, "rule"),
        ("clear", None, "skipped"),
    ]
    assert got["reward"] == 1.0  # the skipped criterion counts in neither sum


@pytest.fixture
def api_llm(api_llm: TestClient) -> TestClient:
    """conftest's app with an LLM, with the namespace and the judged rubric in place."""
    create_namespace(api_llm, "lab")
    rubric(api_llm, JUDGED)
    return api_llm


def verdicts(*pairs: tuple[str, float], **options: Any) -> Answer:
    return json_answer(
        {"verdicts": [{"id": id_, "score": s, "rationale": f"the evidence for {id_}"} for id_, s in pairs]}, **options
    )


def test_judged_criteria_through_the_llm(api_llm: TestClient, scripted_llm: ScriptedLLM) -> None:
    scripted_llm.script(verdicts(("clear", 0.5)))
    got = score(api_llm, "judged", trajectory=inline("The answer is 42 because 6*7"), label="42")
    assert [(c["id"], c["score"], c["method"]) for c in got["criteria"]] == [
        ("right", 1.0, "rule"),
        ("clear", 0.5, "llm"),
    ]
    assert got["criteria"][1]["rationale"] == "the evidence for clear" and got["reward"] == pytest.approx(0.75)

    [request] = scripted_llm.requests
    assert request.model == "configured-model"
    fmt = request.response_format or {}
    assert fmt["type"] == "json_schema" and fmt["json_schema"]["strict"] is True
    assert fmt["json_schema"]["name"] == "RubricJudgeOut"
    user = request.messages[1]["content"]
    assert '"id": "clear"' in user and '"id": "right"' not in user  # only the judged criterion is asked
    assert "Final answer: The answer is 42 because 6*7" in user and "Reference answer: 42" in user
    assert "Task: add 2 and 2" in user and "[1] observation: the calculator says 4" in user
    # Charged to the namespace's shared daily budget, like the reflectors.
    with api_llm.app.state.services.db.read() as session:  # type: ignore[attr-defined]
        assert llm_usage.read_tokens_spent(session, "lab", datetime.now(UTC).date()) > 0


@pytest.mark.parametrize("llm_overrides", [{"max_retries": 1}])
def test_the_judge_retries_and_repairs(api_llm: TestClient, scripted_llm: ScriptedLLM) -> None:
    scripted_llm.script(
        HttpError(503, "overloaded", retry_after=0),  # the openai client's own retry
        verdicts(("wrong_id", 1.0)),  # unusable: one repair turn quoting the problem
        verdicts(("clear", 1.0)),
    )
    got = score(api_llm, "judged", trajectory=inline("42"))
    assert got["criteria"][1]["score"] == 1.0 and len(scripted_llm.requests) == 3
    repair = scripted_llm.requests[2].messages[-1]["content"]
    assert "missing ['clear']" in repair and "not shown ['wrong_id']" in repair


def test_a_judge_that_fails_is_503_naming_the_criterion(api_llm: TestClient, scripted_llm: ScriptedLLM) -> None:
    scripted_llm.script(Answer("not json"), Answer("still not json"))
    r = api_llm.post(f"{NS}/rubrics/judged/score", json={"trajectory": inline("42")})
    assert error(r) == (503, "criteria[1]", "llm_output") and "['clear']" in r.json()["error"]["message"]
    scripted_llm.script(HttpError(500, "boom"))
    assert error(api_llm.post(f"{NS}/rubrics/judged/score", json={"trajectory": inline("42")})) == (
        503,
        "criteria[1]",
        "llm_unavailable",
    )


@pytest.mark.parametrize("llm_overrides", [{"token_budget_per_namespace_per_day": 10}])
def test_the_token_budget_holds(api_llm: TestClient, scripted_llm: ScriptedLLM) -> None:
    r = api_llm.post(f"{NS}/rubrics/judged/score", json={"trajectory": inline("42")})
    assert error(r) == (503, "criteria[1]", "llm_budget") and "budget" in r.json()["error"]["message"]
    assert scripted_llm.requests == []  # refused before any call


@pytest.mark.parametrize("llm_overrides", [{"max_concurrency": 4}])
def test_a_batch_asks_the_judge_concurrently(api_llm: TestClient, scripted_llm: ScriptedLLM) -> None:
    scripted_llm.script(*(verdicts(("clear", 1.0), delay=0.3) for _ in range(4)))
    items = [{"trajectory": inline(f"answer {i}: 42")} for i in range(4)]
    r = api_llm.post(f"{NS}/rubrics/judged/score/batch", json={"items": items})
    assert r.status_code == 200, r.text
    assert [i["reward"] for i in r.json()["items"]] == [1.0] * 4
    assert scripted_llm.max_in_flight > 1
