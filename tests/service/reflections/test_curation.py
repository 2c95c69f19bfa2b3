"""Operators browse and curate reflections (versions, history, status) and manage
jobs (failed ones keep their error and can be retried)."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.factories import step
from tests.fixtures import create_namespace, drain, post_trajectory

NS = "/v1/namespaces/cur"
HALL = "A long hall with portraits; a staircase leads up."


@pytest.fixture
def api(client: TestClient) -> TestClient:
    create_namespace(client, "cur")
    steps = [step(HALL, "climb stairs"), step("A dusty attic.", "open chest")]
    post_trajectory(client, "cur", "t", task="explore", environment="mansion", success=True, steps=steps)
    drain(client)
    return client


def key(api: TestClient, role: str) -> dict[str, str]:
    secret = api.post("/v1/keys", json={"role": role, "namespaces": ["cur"]}).json()["key"]
    return {"Authorization": f"Bearer {secret}"}


def actions(api: TestClient, obs: str) -> list[str]:
    r = api.post(f"{NS}/retrieve", json={"state": {"observation": obs}})
    return [i["content"]["action"] for i in r.json()["items"]]


def test_list_get_and_history(api: TestClient) -> None:
    page = api.get(f"{NS}/reflections", params={"kind": "exemplar", "limit": 1}).json()
    assert len(page["items"]) == 1 and page["next_cursor"]
    rest = api.get(f"{NS}/reflections", params={"kind": "exemplar", "cursor": page["next_cursor"]}).json()
    assert len(rest["items"]) == 1 and rest["next_cursor"] is None
    assert api.get(f"{NS}/reflections", params={"status": "retired"}).json()["items"] == []
    rid = next(i["id"] for i in page["items"] + rest["items"] if i["content"]["action"] == "climb stairs")
    one = api.get(f"{NS}/reflections/{rid}").json()
    assert one["evidence"] == [{"trajectory_id": "t", "step_start": 0, "step_end": 0}]
    assert (one["reflector"], one["status"], one["version"], one["evidence_successes"]) == ("exemplar", "active", 1, 1)
    history = api.get(f"{NS}/reflections/{rid}/history").json()
    assert [(h["version"], h["action"], h["actor"]) for h in history] == [(1, "create", "reflector:exemplar")]
    assert api.get(f"{NS}/reflections/nope").status_code == 404


def test_retire_and_restore_change_what_is_served(api: TestClient) -> None:
    rid = api.get(f"{NS}/reflections").json()["items"][-1]["id"]
    operator = key(api, "operator")
    r = api.patch(f"{NS}/reflections/{rid}", json={"status": "retired", "note": "misleading"}, headers=operator)
    assert r.status_code == 200 and r.json()["status"] == "retired"
    assert "climb stairs" not in actions(api, HALL)
    r = api.patch(f"{NS}/reflections/{rid}", json={"status": "active"}, headers=operator)
    assert r.json()["status"] == "active"
    assert actions(api, HALL)[0] == "climb stairs"
    history = api.get(f"{NS}/reflections/{rid}/history").json()
    assert [h["action"] for h in history] == ["create", "retire", "restore"]
    assert history[1]["note"] == "misleading" and history[1]["actor"].startswith("key:")
    # Agents read but do not curate.
    assert (
        api.patch(f"{NS}/reflections/{rid}", json={"status": "retired"}, headers=key(api, "agent")).status_code == 403
    )


def test_edit_is_a_new_version_and_is_reembedded(api: TestClient) -> None:
    rid = next(i["id"] for i in api.get(f"{NS}/reflections").json()["items"] if i["content"]["action"] == "open chest")
    content = {"observation": "A cold wine cellar under the kitchen.", "action": "open chest"}
    r = api.patch(f"{NS}/reflections/{rid}", json={"content": content, "expected_version": 1, "note": "typo"})
    assert r.status_code == 200 and r.json()["version"] == 2 and r.json()["content"] == content
    stale = api.patch(f"{NS}/reflections/{rid}", json={"text": "x", "expected_version": 1})
    assert stale.status_code == 409 and stale.json()["error"]["field"] == "expected_version"
    drain(api)  # the re-embed job
    assert actions(api, "a cold wine cellar under the kitchen")[0] == "open chest"
    history = api.get(f"{NS}/reflections/{rid}/history").json()
    assert [(h["version"], h["action"]) for h in history] == [(1, "create"), (2, "edit")]
    assert history[0]["content"]["observation"] == "A dusty attic."


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({}, "body"),
        ({"content": {"observation": "x"}}, "content"),
        ({"status": "gone"}, "status"),
        ({"text": ""}, "text"),
        ({"colour": 1}, "colour"),
    ],
)
def test_bad_edits(api: TestClient, body: dict[str, Any], field: str) -> None:
    rid = api.get(f"{NS}/reflections").json()["items"][0]["id"]
    r = api.patch(f"{NS}/reflections/{rid}", json=body)
    assert r.status_code == 422 and r.json()["error"]["field"] == field
    assert api.get(f"{NS}/reflections/{rid}").json()["version"] == 1


def test_failed_jobs_keep_their_error_and_can_be_retried(api: TestClient) -> None:
    worker = api.app.state.services.worker  # type: ignore[attr-defined]
    real = worker.handlers["trajectory.closed"]

    def broken(job: Any) -> None:
        raise ValueError("the reflector choked on this trajectory")

    worker.handlers["trajectory.closed"] = broken
    post_trajectory(api, "cur", "bad", success=False)
    drain(api)
    failed = api.get(f"{NS}/jobs", params={"status": "failed"}).json()["items"]
    assert len(failed) == 1 and "the reflector choked" in failed[0]["last_error"]
    assert failed[0]["attempts"] == 1  # not transient: failed at once, no pointless retries
    jid = failed[0]["id"]
    worker.handlers["trajectory.closed"] = real
    r = api.post(f"{NS}/jobs/{jid}/retry")
    assert r.status_code == 200 and r.json()["status"] == "queued"
    drain(api)
    assert api.get(f"{NS}/jobs/{jid}").json()["status"] == "done"
    assert api.post(f"{NS}/jobs/{jid}/retry").status_code == 409
    assert api.get(f"{NS}/jobs/999999").status_code == 404
    assert api.get(f"{NS}/jobs/abc").status_code == 422
    assert api.post(f"{NS}/jobs/{jid}/retry", headers=key(api, "agent")).status_code == 403
