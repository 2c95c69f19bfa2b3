"""The LLM reflectors end to end (SQLite and PostgreSQL, hashing embedder), against
the scripted OpenAI-compatible server over real HTTP: what each reflector writes
(content, evidence, reflector, prompt version, model), the heuristic pool (merge,
EDIT, UPVOTE, DOWNVOTE), activation, rubric revision, errors (malformed output,
rate limits, timeouts, 5xx storms, budgets) and idempotent re-runs."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from domain.hashing import task_hash, text_hash
from reflectors.prompted.heuristics import heuristic_id, heuristic_text
from reflectors.prompted.rubrics import rubric_id
from reflectors.prompted.skills import skill_id
from reflectors.worker import JobView, Worker
from service.app import create_app
from store import jobs as jobs_repo
from store.embedding.hashing import HashingEmbedder
from store.models import Embedding, Job, LexicalText, Reflection
from tests.conftest import ADMIN_KEY, make_settings
from tests.factories import step
from tests.fixtures import create_namespace, drain, post_trajectory
from tests.reflectors.openai_server import Answer, HttpError, ScriptedLLM, Stall, json_answer

NS = "/v1/namespaces/mem"
ENV = "house"
LLM_JOBS = {"reflect.heuristics", "reflect.skills", "reflect.golden_negative", "reflect.rubrics"}

DOOR = ("A door is locked and a key is visible somewhere in the room.", "Pick up the key and unlock the door first.")
DOOR_AGAIN = (DOOR[0], "Pick up the key and unlock the door first, then open it.")  # cosine ~0.98 to DOOR
DOOR_OTHER = (
    "A door is locked and a key lies somewhere in the same room.",
    "Take the key first, then unlock the door instead of pushing it.",
)  # cosine ~0.68 to DOOR: a neighbour for pool maintenance, not a duplicate
SEARCH = ("A search returns no results for a long query.", "Remove the least important word and search again.")


def make_ns(api: TestClient, **llm: Any) -> None:
    create_namespace(api, "mem", reflection={"llm": llm})


def worker(api: TestClient) -> Worker:
    return api.app.state.services.worker  # type: ignore[attr-defined,no-any-return]


def steps(n: int = 3, *, fail_at: int | None = None) -> list[dict[str, Any]]:
    actions = ["look around", "open door", "take key", "unlock door", "open door"]
    return [
        step(
            f"Room {i}: a locked door, a key on the table.",
            actions[i % len(actions)],
            internal_state="get out of the room",
            result="nothing happens" if i % 2 else "you see a door and a key",
            caused_failure=i == fail_at,
        )
        for i in range(n)
    ]


def post(api: TestClient, id: str, success: bool, *, task: str = "leave the room", **fields: Any) -> None:
    default_steps = steps(3, fail_at=None if success else 2)
    body = {"environment": ENV, "success": success, **fields, "steps": fields.get("steps") or default_steps}
    post_trajectory(api, "mem", id, task=task, **body)


def heuristic(
    pair: tuple[str, str], evidence_steps: tuple[int, ...] = (1, 2), polarity: str = "do", **extra: Any
) -> dict[str, Any]:
    return {
        "trigger": pair[0],
        "guideline": pair[1],
        "rationale": "At step 1 the agent pushed the locked door and nothing happened.",
        "polarity": polarity,
        "evidence_steps": list(evidence_steps),
        **extra,
    }


def heuristics_answer(*items: dict[str, Any], **options: Any) -> Answer:
    return json_answer({"heuristics": list(items)}, **options)


def pool_op(operation: str, target: str | None, pair: tuple[str, str] | None = None) -> Answer:
    return json_answer(
        {
            "operation": operation,
            "target_id": target,
            "trigger": pair[0] if pair else None,
            "guideline": pair[1] if pair else None,
            "reason": f"{operation}: compared the candidate with {target}.",
        },
        model="maintainer-model",
    )


def items(api: TestClient, kind: str, **params: Any) -> list[dict[str, Any]]:
    r = api.get(f"{NS}/reflections", params={"kind": kind, "limit": 100, **params})
    assert r.status_code == 200, r.text
    return r.json()["items"]


def get(api: TestClient, id: str) -> dict[str, Any]:
    r = api.get(f"{NS}/reflections/{id}")
    assert r.status_code == 200, r.text
    return r.json()


def text_index(api: TestClient, id: str) -> tuple[list[str | None], str | None]:
    """The stored text hashes of the item's vectors, and its lexical text."""
    with api.app.state.services.db.read() as session:  # type: ignore[attr-defined]
        pk = session.query(Reflection.pk).filter(Reflection.id == id).scalar()
        hashes = [h for (h,) in session.query(Embedding.text_hash).filter(Embedding.reflection_pk == pk)]
        lexical = session.get(LexicalText, pk)
        return hashes, lexical.text if lexical else None


def history(api: TestClient, id: str) -> list[dict[str, Any]]:
    return api.get(f"{NS}/reflections/{id}/history").json()


def made_by(item: dict[str, Any]) -> tuple[str, str, str]:
    """The reflector, the prompt version and the model that wrote an item."""
    return item["reflector"], item["reflector_version"], item["model"]


def door_lesson(api: TestClient, scripted_llm: ScriptedLLM, id: str, success: bool) -> None:
    """One attempt posted and reflected on, the LLM drawing the DOOR heuristic from it."""
    scripted_llm.script(heuristics_answer(heuristic(DOOR)))
    post(api, id, success)
    drain(api)


def jobs(api: TestClient, **params: Any) -> list[dict[str, Any]]:
    return api.get(f"{NS}/jobs", params={"limit": 500, **params}).json()["items"]


def hid(pair: tuple[str, str]) -> str:
    return heuristic_id("mem", ENV, *pair)


# -- heuristics -------------------------------------------------------------------


def test_heuristics_from_a_single_attempt(api_llm: TestClient, scripted_llm: ScriptedLLM) -> None:
    api = api_llm
    make_ns(api, reflectors=["heuristics"])
    scripted_llm.script(heuristics_answer(heuristic(DOOR, (1, 2)), heuristic(SEARCH, (0,), polarity="avoid")))
    post(api, "t1", False, outcome={"success": False, "failure_reason": "ran out of steps"})
    drain(api)

    found = {h["id"]: h for h in items(api, "heuristic")}
    assert set(found) == {hid(DOOR), hid(SEARCH)}
    door = found[hid(DOOR)]
    assert door["status"] == "candidate"
    assert made_by(door) == ("llm_heuristics", "heuristics_single.v1", "scripted-model")
    assert door["content"] == {
        "trigger": DOOR[0],
        "guideline": DOOR[1],
        "rationale": "At step 1 the agent pushed the locked door and nothing happened.",
        "polarity": "do",
        "importance": 1,
        "text": f"When: {DOOR[0]}\nGuideline: {DOOR[1]}",
    }
    assert door["text"] == door["content"]["text"] and door["environment"] == ENV
    assert door["evidence"] == [{"trajectory_id": "t1", "step_start": 1, "step_end": 2}]
    assert found[hid(SEARCH)]["evidence"] == [{"trajectory_id": "t1", "step_start": 0, "step_end": 0}]
    assert found[hid(SEARCH)]["content"]["polarity"] == "avoid"
    # Its vector encodes its text: the text's hash beside it, the text in the lexical index.
    assert text_index(api, hid(DOOR)) == ([text_hash(door["text"])], door["text"])

    # What the model saw: the task, the outcome, the steps as the prompt expects them.
    [request] = scripted_llm.requests
    user = request.messages[1]["content"]
    assert "Task: leave the room" in user and f"Environment: {ENV}" in user
    assert "Outcome: failure, failure reason: ran out of steps" in user
    assert "[0] observation: Room 0: a locked door" in user and "caused failure" in user
    assert request.response_format["json_schema"]["name"] == "HeuristicsOut"
    [job] = jobs(api, kind="reflect.heuristics")
    assert job["status"] == "done" and job["payload"]["trajectory_id"] == "t1"
    # Candidates are not served; the offline reflectors ran as usual.
    r = api.post(f"{NS}/retrieve", json={"state": {"observation": DOOR[0]}, "kinds": ["heuristic"]})
    assert r.json()["items"] == []
    assert items(api, "exemplar")


def test_reindex_fills_in_the_text_index_of_pool_items_written_without_it(
    api_llm: TestClient, scripted_llm: ScriptedLLM
) -> None:
    """Pool items written before their vectors carried text hashes and lexical texts
    get both from `reflexa reindex` (no re-encoding)."""
    from sqlalchemy import delete, update

    from reflectors.reindex import reindex

    api = api_llm
    make_ns(api, reflectors=["heuristics"])
    door_lesson(api, scripted_llm, "t1", False)
    services = api.app.state.services  # type: ignore[attr-defined]
    with services.db.write() as session:  # as the pool wrote them before
        session.execute(delete(LexicalText))
        session.execute(update(Embedding).values(text_hash=None))
    assert text_index(api, hid(DOOR)) == ([None], None)
    reindex(services.db, services.embedder, services.registry, ["mem"])
    door = get(api, hid(DOOR))
    assert text_index(api, hid(DOOR)) == ([text_hash(door["text"])], door["text"])


def test_a_similar_heuristic_merges_and_evidence_activates_it(api_llm: TestClient, scripted_llm: ScriptedLLM) -> None:
    api = api_llm
    make_ns(api, reflectors=["heuristics"])
    door_lesson(api, scripted_llm, "t1", False)
    # Near-duplicates (cosine >= 0.92) merge without a pool-maintenance call.
    scripted_llm.script(heuristics_answer(heuristic(DOOR_AGAIN, (0, 1))))
    post(api, "t2", True)
    drain(api)
    [door] = items(api, "heuristic")
    assert door["id"] == hid(DOOR) and door["version"] == 1 and door["content"]["guideline"] == DOOR[1]
    assert door["content"]["importance"] == 2 and door["status"] == "candidate"
    assert {(e["trajectory_id"], e["step_start"]) for e in door["evidence"]} == {("t1", 1), ("t2", 0)}
    assert (door["evidence_count"], door["evidence_successes"], door["evidence_failures"]) == (2, 1, 1)
    assert len(scripted_llm.requests) == 2
    merge = history(api, door["id"])[-1]
    assert merge["action"] == "merge" and "near-duplicate" in merge["note"] and "t2" in merge["note"]
    assert merge["content"]["importance"] == 2

    # The third piece of evidence reaches activation_importance (3): active, and served.
    door_lesson(api, scripted_llm, "t3", True)
    door = get(api, door["id"])
    assert door["status"] == "active" and door["content"]["importance"] == 3
    assert history(api, door["id"])[-1]["action"] == "activate"
    r = api.post(f"{NS}/retrieve", json={"state": {"observation": DOOR[0]}, "kinds": ["heuristic"]})
    [served] = r.json()["items"]
    assert served["id"] == door["id"] and {e["trajectory_id"] for e in served["evidence"]} == {"t1", "t2", "t3"}

    # Deleting a voter's trajectory takes its vote with it.
    assert api.delete(f"{NS}/trajectories/t2").status_code == 200
    door = get(api, door["id"])
    assert door["content"]["importance"] == 2 and door["evidence_count"] == 2


def test_operator_activation_ignores_evidence(api_llm: TestClient, scripted_llm: ScriptedLLM) -> None:
    api = api_llm
    make_ns(api, reflectors=["heuristics"], activation="operator", activation_importance=2)
    for i in range(3):
        door_lesson(api, scripted_llm, f"t{i}", True)
    door = get(api, hid(DOOR))
    assert door["content"]["importance"] == 3 and door["status"] == "candidate"
    r = api.patch(f"{NS}/reflections/{door['id']}", json={"status": "active", "note": "looks right"})
    assert r.status_code == 200 and r.json()["status"] == "active"
    assert history(api, door["id"])[-1]["action"] == "approve"


def test_pool_maintenance_edit(api_llm: TestClient, scripted_llm: ScriptedLLM) -> None:
    api = api_llm
    make_ns(api, reflectors=["heuristics"], maintenance_similarity=0.5)
    door_lesson(api, scripted_llm, "t1", False)
    target = hid(DOOR)
    rewritten = (
        "A door is locked and a key is visible anywhere in the room, on a table or the floor.",
        "Take the key, unlock the door with it, and only then open the door.",
    )
    scripted_llm.script(heuristics_answer(heuristic(DOOR_OTHER)), pool_op("EDIT", target, rewritten))
    post(api, "t2", True)
    drain(api)

    [door] = items(api, "heuristic")  # edited in place, the candidate not added
    assert door["id"] == target and door["version"] == 2
    assert (door["content"]["trigger"], door["content"]["guideline"]) == rewritten
    assert door["text"] == f"When: {rewritten[0]}\nGuideline: {rewritten[1]}" == door["content"]["text"]
    assert door["content"]["importance"] == 2
    assert {e["trajectory_id"] for e in door["evidence"]} == {"t1", "t2"}
    edit = history(api, target)[-1]
    assert edit["action"] == "edit" and edit["version"] == 2
    assert "EDIT by pool_maintenance.v1 (maintainer-model) from attempt t2" in edit["note"]
    # The maintainer saw the candidate and its neighbour, by id.
    maintenance = scripted_llm.requests[-1].messages[1]["content"]
    assert f"id: {target}" in maintenance and f"trigger: {DOOR_OTHER[0]}" in maintenance
    # Re-embedded: the new wording is what a state now matches.
    assert api.patch(f"{NS}/reflections/{target}", json={"status": "active"}).status_code == 200
    r = api.post(f"{NS}/retrieve", json={"state": {"observation": rewritten[0]}, "kinds": ["heuristic"]})
    query, new, old = HashingEmbedder().encode([rewritten[0], door["text"], heuristic_text(*DOOR)])
    assert r.json()["items"][0]["similarity"] == pytest.approx(float(query @ new), abs=1e-4)
    assert abs(float(query @ new) - float(query @ old)) > 0.05
    assert text_index(api, target) == ([text_hash(door["text"])], door["text"])  # the new wording's


def test_pool_maintenance_upvote_add_and_downvotes_that_retire(api_llm: TestClient, scripted_llm: ScriptedLLM) -> None:
    api = api_llm
    make_ns(api, reflectors=["heuristics"], maintenance_similarity=0.5)
    target = hid(DOOR)
    door_lesson(api, scripted_llm, "t1", True)
    scripted_llm.script(heuristics_answer(heuristic(DOOR_OTHER)), pool_op("UPVOTE", target))
    post(api, "t2", True)
    drain(api)
    assert get(api, target)["content"]["importance"] == 2
    assert history(api, target)[-1]["action"] == "upvote"
    # ADD despite a neighbour: a different situation with similar words.
    scripted_llm.script(heuristics_answer(heuristic(DOOR_OTHER)), pool_op("ADD", None))
    post(api, "t3", True)
    drain(api)
    assert {h["id"] for h in items(api, "heuristic")} == {target, hid(DOOR_OTHER)}

    # Two contradicting attempts: importance 2 -> 0, retired with the reason.
    contra = (DOOR[0], "Push the door hard; locked doors in this house give way.")
    for i in (4, 5):
        scripted_llm.script(heuristics_answer(heuristic(contra, polarity="avoid")), pool_op("DOWNVOTE", target))
        post(api, f"t{i}", False)
        drain(api)
    door = get(api, target)
    assert door["status"] == "retired" and door["content"]["importance"] == 0
    last = history(api, target)[-1]
    assert last["action"] == "retire" and last["note"].startswith("importance fell to 0")
    assert "DOWNVOTE by pool_maintenance.v1" in last["note"] and "t5" in last["note"]
    # Downvotes are evidence too, counted against (value -1).
    assert {e["trajectory_id"] for e in door["evidence"]} == {"t1", "t2", "t4", "t5"}
    assert door["evidence_value"] == pytest.approx(0.0)
    assert items(api, "heuristic", status="retired") == [door]
    # A retired item has left the pool: a later candidate meets the others only.
    scripted_llm.script(heuristics_answer(heuristic(DOOR_AGAIN)), pool_op("UPVOTE", hid(DOOR_OTHER)))
    post(api, "t6", True)
    drain(api)
    maintenance = scripted_llm.requests[-1].messages[1]["content"]
    assert f"id: {hid(DOOR_OTHER)}" in maintenance and f"id: {target}" not in maintenance
    assert get(api, hid(DOOR_OTHER))["content"]["importance"] == 2
    assert get(api, target)["status"] == "retired"


# -- golden negatives, skills, rubrics ----------------------------------------------


def test_golden_negative_from_an_expert_failure(api_llm: TestClient, scripted_llm: ScriptedLLM) -> None:
    api = api_llm
    make_ns(api)
    analysis = {
        "critical_step": 1,
        "what_went_wrong": "At step 1 the expert pushed the door although step 0 showed the key on the table.",
        "corrected_action": "take key",
        "hint": "Look at what lies on the table before touching the door.",
        "heuristics": [heuristic(DOOR, (0, 1))],
    }
    scripted_llm.script(json_answer(analysis, model="expert-judge"))
    post(api, "x1", False, metadata={"expert": True})
    drain(api)
    [h] = items(api, "heuristic")
    assert made_by(h) == ("llm_golden_negative", "golden_negative.v1", "expert-judge")
    assert h["content"]["golden_negatives"] == [
        {
            "trajectory_id": "x1",
            "task": "leave the room",
            "critical_step": 1,
            "what_went_wrong": analysis["what_went_wrong"],
            "corrected_action": "take key",
            "hint": analysis["hint"],
        }
    ]
    assert h["evidence"] == [{"trajectory_id": "x1", "step_start": 0, "step_end": 1}]
    kinds = {j["kind"] for j in jobs(api)}
    assert "reflect.golden_negative" in kinds and "reflect.heuristics" not in kinds and "reflect.skills" not in kinds
    assert "expert policy" in scripted_llm.requests[0].messages[0]["content"]

    # A later ordinary attempt with the same lesson merges into it (one pool).
    door_lesson(api, scripted_llm, "t2", False)
    [h] = items(api, "heuristic")
    assert h["content"]["importance"] == 2 and len(h["content"]["golden_negatives"]) == 1


def skill(name: str, when: str, **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "when_to_use": when,
        "preconditions": ["The door is closed."],
        "parameters": [{"name": "item", "description": "what unlocks the door"}],
        "steps": ["Take the {item} from the table.", "Unlock the door with the {item}.", "Open the door."],
        "step_range": [1, 2],
        **extra,
    }


def test_skills_from_successes(api_llm: TestClient, scripted_llm: ScriptedLLM) -> None:
    api = api_llm
    make_ns(api, reflectors=["skills"])
    when = "The agent must leave a room through a locked door and an item that opens it is in the room."
    scripted_llm.script(json_answer({"skills": [skill("unlock_and_open_door", when)]}))
    post(api, "t1", True)
    post(api, "f1", False)  # failures make no skills
    drain(api)
    [s] = items(api, "skill")
    assert s["id"] == skill_id("mem", ENV, "unlock_and_open_door")
    assert made_by(s) == ("llm_skills", "skills.v1", "scripted-model") and s["status"] == "candidate"
    c = s["content"]
    assert (c["name"], c["when_to_use"], c["preconditions"], c["importance"]) == (
        "unlock_and_open_door",
        when,
        ["The door is closed."],
        1,
    )
    assert c["steps"][0] == "Take the {item} from the table." and c["parameters"][0]["name"] == "item"
    assert s["text"].startswith(f"Skill unlock_and_open_door: {when}") and "2. Unlock the door" in s["text"]
    assert s["evidence"] == [{"trajectory_id": "t1", "step_start": 1, "step_end": 2}]
    assert [j["payload"]["trajectory_id"] for j in jobs(api, kind="reflect.skills")] == ["t1"]

    # The next success sees the library; a near-duplicate under another name merges.
    scripted_llm.script(json_answer({"skills": [skill("open_locked_door", when)]}))
    post(api, "t2", True)
    drain(api)
    assert "unlock_and_open_door: The agent must leave" in scripted_llm.requests[-1].messages[1]["content"]
    [s] = items(api, "skill")
    assert s["content"]["importance"] == 2 and {e["trajectory_id"] for e in s["evidence"]} == {"t1", "t2"}


RUBRIC = {
    "criteria": [
        {
            "text": "The agent takes the key before opening the door.",
            "weight": 0.6,
            "rationale": "A and C take the key and succeed; B pushes the door and fails.",
            "check": {
                "type": "contains",
                "target": "any_action",
                "text": "take key",
                "case_sensitive": False,
                "negate": False,
            },
        },
        {
            "text": "The attempt ends with the door open.",
            "weight": 0.4,
            "rationale": "Only the successful attempts end with the door open.",
            "check": None,
        },
    ]
}


def test_rubric_from_mixed_outcomes_is_revised_by_a_new_group(api_llm: TestClient, scripted_llm: ScriptedLLM) -> None:
    api = api_llm
    make_ns(api, reflectors=["rubrics"])
    post(api, "solo", True, task="escape")  # one outcome only: no rubric job
    drain(api)
    assert jobs(api, kind="reflect.rubrics") == []

    scripted_llm.script(json_answer(RUBRIC))
    for id_, ok in (("g1-a", False), ("g1-b", True)):
        post(api, id_, ok, task="escape", group_id="g1")
    drain(api)
    assert len(jobs(api, kind="reflect.rubrics")) == 1  # coalesced: one job for the task
    [rubric] = items(api, "rubric")
    assert rubric["id"] == rubric_id("mem", task_hash("escape"))
    assert made_by(rubric) == ("llm_rubrics", "rubrics.v1", "scripted-model") and rubric["task"] == "escape"
    c = rubric["content"]
    assert [x["weight"] for x in c["criteria"]] == pytest.approx([0.6, 0.4])
    assert c["criteria"][0]["check"]["type"] == "contains" and c["criteria"][1]["check"] is None
    assert [(a["label"], a["trajectory_id"], a["success"]) for a in c["attempts"]] == [
        ("A", "solo", True),
        ("B", "g1-a", False),
        ("C", "g1-b", True),
    ]
    assert "- [0.60] The agent takes the key" in rubric["text"] and "(judged)" in rubric["text"]
    assert {e["trajectory_id"] for e in rubric["evidence"]} == {"solo", "g1-a", "g1-b"}
    assert rubric["status"] == "active"  # 3 attempts with both outcomes = activation_importance
    shown = scripted_llm.requests[0].messages[1]["content"]
    assert "### Attempt A: success" in shown and "### Attempt B: failure" in shown and "Task: escape" in shown
    # Matched by task, like an evidence card.
    r = api.post(f"{NS}/retrieve", json={"state": {"observation": "x"}, "task": "escape", "kinds": ["rubric"]})
    assert [i["id"] for i in r.json()["items"]] == [rubric["id"]]

    # A new group revises it in place.
    revised = {"criteria": [dict(RUBRIC["criteria"][0], weight=0.5), dict(RUBRIC["criteria"][1], weight=0.5)]}
    scripted_llm.script(json_answer(revised, model="scripted-model-2"))
    for id_, ok in (("g2-a", True), ("g2-b", False)):
        post(api, id_, ok, task="escape", group_id="g2")
    drain(api)
    rubric = get(api, rubric["id"])
    assert rubric["version"] == 2 and rubric["model"] == "scripted-model-2"
    assert [x["weight"] for x in rubric["content"]["criteria"]] == [0.5, 0.5]
    assert {e["trajectory_id"] for e in rubric["evidence"]} == {"solo", "g1-a", "g1-b", "g2-a", "g2-b"}
    assert [h["action"] for h in history(api, rubric["id"])] == ["create", "activate", "edit"]
    # One new attempt is not enough to rewrite it (rubric_min_new_attempts 2): no LLM call.
    post(api, "g3-a", False, task="escape", group_id="g3")
    drain(api)
    assert get(api, rubric["id"])["version"] == 2 and len(scripted_llm.requests) == 2


# -- errors ---------------------------------------------------------------------------


def test_malformed_json_twice_fails_the_job_with_the_raw_answers(
    api_llm: TestClient, scripted_llm: ScriptedLLM
) -> None:
    api = api_llm
    make_ns(api, reflectors=["heuristics"])
    scripted_llm.script(Answer("Here are my heuristics: be careful."), Answer('{"heuristics": [{"trigger": "x"'))
    post(api, "t1", False)
    drain(api)
    [job] = jobs(api, status="failed")
    assert job["kind"] == "reflect.heuristics" and job["attempts"] == 1  # permanent: not retried
    assert "LLMOutputError" in job["last_error"] and "unusable after 2 attempts" in job["last_error"]
    assert "Here are my heuristics: be careful." in job["last_error"]
    assert '{"heuristics": [{"trigger": "x"' in job["last_error"]
    assert items(api, "heuristic") == []


def test_rate_limit_then_success(api_llm: TestClient, scripted_llm: ScriptedLLM) -> None:
    api = api_llm
    make_ns(api, reflectors=["heuristics"])
    scripted_llm.script(HttpError(429, "slow down", retry_after=0), heuristics_answer(heuristic(DOOR)))
    post(api, "t1", False)
    drain(api)
    [job] = jobs(api, kind="reflect.heuristics")
    assert (job["status"], job["attempts"], job["last_error"]) == ("done", 2, None)
    assert [h["id"] for h in items(api, "heuristic")] == [hid(DOOR)]


@pytest.mark.parametrize("llm_overrides", [{"timeout_seconds": 0.5}])
def test_a_timeout_is_transient_and_writes_nothing(api_llm: TestClient, scripted_llm: ScriptedLLM) -> None:
    api = api_llm
    make_ns(api, reflectors=["heuristics"])
    scripted_llm.script(Stall(5))
    post(api, "t1", False)
    drain(api)
    [job] = jobs(api, kind="reflect.heuristics")
    assert job["status"] == "queued" and job["attempts"] == 1
    assert "LLMUnavailable" in job["last_error"] and "unreachable" in job["last_error"]
    # Deferred by the first backoff (2 s base, jitter down to half) from when it failed;
    # measured from the job's own clock, not the test's, which a slow machine delays.
    failed_at = datetime.fromisoformat(job["updated_at"])
    assert datetime.fromisoformat(job["run_after"]) - failed_at >= timedelta(seconds=1)
    assert items(api, "heuristic") == []


def test_a_500_storm_fails_after_max_attempts(api_llm: TestClient, scripted_llm: ScriptedLLM) -> None:
    api = api_llm
    make_ns(api, reflectors=["heuristics"])
    worker(api).config.backoff_base = 0.0  # retry at once
    scripted_llm.script(*[HttpError(500, "GPU on fire") for _ in range(5)])
    post(api, "t1", False)
    drain(api)
    [job] = jobs(api, status="failed")
    assert job["kind"] == "reflect.heuristics" and job["attempts"] == job["max_attempts"] == 5
    assert "unavailable (500)" in job["last_error"] and "GPU on fire" in job["last_error"]
    assert items(api, "heuristic") == []


@pytest.mark.parametrize("llm_overrides", [{"token_budget_per_namespace_per_day": 100}])
def test_an_exhausted_token_budget_waits_for_the_next_day(api_llm: TestClient, scripted_llm: ScriptedLLM) -> None:
    api = api_llm
    make_ns(api, reflectors=["heuristics"])
    post(api, "t1", False)
    drain(api)
    [job] = jobs(api, kind="reflect.heuristics")
    assert job["status"] == "queued" and "LLM token budget" in job["last_error"]
    assert datetime.fromisoformat(job["run_after"]) > datetime.now(UTC)  # the next UTC day
    assert scripted_llm.requests == []


# -- idempotency --------------------------------------------------------------------------


def test_a_job_run_twice_writes_once(api_llm: TestClient, scripted_llm: ScriptedLLM) -> None:
    """A lost lease: two runs of one job both produce their writes; applying both
    neither duplicates items nor counts a vote twice."""
    api = api_llm
    make_ns(api, reflectors=["heuristics"])
    door_lesson(api, scripted_llm, "t1", False)
    services = api.app.state.services  # type: ignore[attr-defined]
    handler = services.worker.handlers["reflect.heuristics"]
    post(api, "t2", True)
    drain(api, skip={"reflect.heuristics"})  # index t2, leave its reflection job queued
    with services.db.read() as session:
        [row] = jobs_repo.list_jobs(session, "mem", status="queued", kind=None, before_id=None, limit=9)
        job = JobView(row.id, row.namespace, row.kind, dict(row.payload), 1)
    answer = heuristics_answer(heuristic(DOOR_AGAIN), heuristic(SEARCH, (0,)))  # a merge and an ADD
    scripted_llm.script(answer, answer)
    first, second = handler(job), handler(job)  # both ran before either wrote
    for write in (first, second):
        with services.db.write() as session:
            write(session)
    door, search = get(api, hid(DOOR)), get(api, hid(SEARCH))
    assert door["content"]["importance"] == 2 and door["evidence_count"] == 2
    assert search["content"]["importance"] == 1 and search["evidence_count"] == 1
    assert len(items(api, "heuristic")) == 2
    assert [h["action"] for h in history(api, door["id"])] == ["create", "merge"]
    # The job itself then runs (or completes) once more: no LLM call, no change.
    drain(api)
    with services.db.read() as session:
        assert session.get(Job, job.id).status == "done"
    assert get(api, hid(DOOR))["content"]["importance"] == 2 and len(scripted_llm.requests) == 3


def test_long_attempts_show_their_first_and_last_steps() -> None:
    from reflectors.prompted.common import show_steps
    from store.models import Step

    many = [Step(index=i, observation=f"obs {i}", action=f"act {i}") for i in range(100)]
    shown, text = show_steps(many, 20)
    assert shown == [*range(5), *range(85, 100)]
    assert "(… 80 steps omitted …)" in text and "[4] observation: obs 4" in text and "[85] observation" in text
    assert "[5] observation" not in text
    assert show_steps(many[:20], 20)[0] == list(range(20))


# -- configuration --------------------------------------------------------------------------


def test_without_an_llm_no_llm_job_is_registered_or_queued(database_url: str, tmp_path: Path) -> None:
    with TestClient(
        create_app(make_settings(database_url, tmp_path)), headers={"Authorization": f"Bearer {ADMIN_KEY}"}
    ) as api:
        assert not LLM_JOBS & set(worker(api).handlers)
        make_ns(api)
        post(api, "ok", True, task="t", group_id="g")
        post(api, "bad", False, task="t", group_id="g", metadata={"expert": True})
        drain(api)
        assert not LLM_JOBS & {j["kind"] for j in jobs(api)}
        assert items(api, "exemplar") and items(api, "evidence_card")  # the offline reflectors still work


def test_llm_reflection_can_be_switched_off_per_namespace(api_llm: TestClient, scripted_llm: ScriptedLLM) -> None:
    api = api_llm
    assert set(worker(api).handlers) >= LLM_JOBS
    make_ns(api, enabled=False)
    post(api, "ok", True)
    drain(api)
    assert not LLM_JOBS & {j["kind"] for j in jobs(api)}


def test_similarity_thresholds_are_checked(api_llm: TestClient) -> None:
    body = {
        "name": "bad",
        "settings": {"reflection": {"llm": {"dedup_similarity": 0.8, "maintenance_similarity": 0.9}}},
    }
    r = api_llm.post("/v1/namespaces", json=body)
    assert r.status_code == 422 and "maintenance_similarity" in json.dumps(r.json())
