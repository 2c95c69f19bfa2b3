"""Reward capabilities and OpenRLHF's remote reward model, against a real uvicorn
server (SQLite and PostgreSQL) with its access log on: the capability lifecycle
(create, list, score without a bearer key, revoke -> 404), the secret absent from
the database in plain text, from the server's log and from /metrics, and the
payload exactly as OpenRLHF sends it.

OpenRLHF's client, as of OpenRLHF/OpenRLHF@3c3be6234e0c (2026-08):
openrlhf/utils/agent.py, SingleTurnAgentExecutor.execute and _fetch_rewards_via_http:
`query = hf_tokenizer.decode(prompt_ids + action_ids, skip_special_tokens=False)`, then
aiohttp `session.post(url, json={"query": [...], "prompts": [...], "labels": [...]})`
(Content-Type application/json, no other header we could key on), reading
`rewards`, `scores` (falling back to rewards) and `extra_logs`; samples_generator.py
turns each extra_logs value into a tensor per sample. The older
openrlhf/utils/remote_rm_utils.py (remote_rm_fn) posted `{"query": queries}` alone
with `headers={"Content-Type": "application/json"}` and read `rewards`.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from sqlalchemy import create_engine, text

from tests.conftest import ADMIN_KEY, REPO, LiveServer, free_port

RUBRIC = {
    "id": "gsm",
    "name": "grade-school math",
    "criteria": [
        {
            "id": "correct",
            "text": "The response ends with the right number.",
            "weight": 3,
            "check": {"type": "regex", "pattern": r"\b{{label}}\s*(<\|im_end\|>)?$"},
        },
        {
            "id": "shows_work",
            "text": "The response shows its arithmetic.",
            "weight": 1,
            "check": {"type": "contains", "text": "="},
        },
    ],
}
PROMPT = "<|im_start|>user\nWhat is 6 * 7?<|im_end|>\n<|im_start|>assistant\n"


@pytest.fixture
def logged_server(database_url: str, tmp_path: Path) -> Iterator[tuple[LiveServer, Path]]:
    """A real uvicorn server with its access log on (log level info), logging to a file."""
    port = free_port()
    log = tmp_path / "server.log"
    env = {
        **os.environ,
        "REFLEXA_DATABASE_URL": database_url,
        "REFLEXA_ADMIN_KEY": ADMIN_KEY,
        "REFLEXA_DATA_DIR": str(tmp_path),
        "REFLEXA_EMBEDDING__BACKEND": "hashing",
        "HF_HUB_OFFLINE": "1",
    }
    command = [sys.executable, "-m", "uvicorn", "service.app:create_app", "--factory", "--port", str(port)]
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [*command, "--log-level", "info"], env=env, cwd=REPO, stdout=out, stderr=subprocess.STDOUT
        )
    url = f"http://127.0.0.1:{port}"
    server = LiveServer(url=url, admin_key=ADMIN_KEY, database_url=database_url, process=proc)
    deadline = time.monotonic() + 60
    while True:
        try:
            if httpx.get(url + "/healthz", timeout=1).status_code == 200:
                break
        except httpx.TransportError:
            pass
        assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
        time.sleep(0.1)
    yield server, log
    server.stop()


def openrlhf_post(url: str, path: str, payload: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """POST as OpenRLHF does: a JSON body with a Content-Type header and nothing else
    (http.client adds only Host, Accept-Encoding and Content-Length)."""
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
    try:
        conn.request("POST", path, body=json.dumps(payload), headers={"Content-Type": "application/json"})
        response = conn.getresponse()
        return response.status, json.loads(response.read() or b"null")
    finally:
        conn.close()


def test_capability_lifecycle_and_the_openrlhf_payload(logged_server: tuple[LiveServer, Path]) -> None:
    server, log = logged_server
    admin = httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {server.admin_key}"}, timeout=30)
    assert admin.post("/v1/namespaces", json={"name": "rl"}).status_code == 201
    assert admin.post("/v1/namespaces/rl/rubrics", json=RUBRIC).status_code == 201
    trainer_key = admin.post("/v1/keys", json={"role": "trainer", "namespaces": ["rl"]}).json()["key"]
    trainer = httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {trainer_key}"}, timeout=30)

    r = trainer.post("/v1/namespaces/rl/rubrics/gsm/capabilities", json={"note": "ppo run 7"})
    assert r.status_code == 201, r.text
    cap = r.json()
    secret, path = cap["secret"], cap["path"]
    assert path == f"/v1/reward/{secret}" and secret.startswith("rfxrw_") and len(secret) > 40
    assert (cap["namespace"], cap["rubric_id"], cap["note"], cap["revoked_at"]) == ("rl", "gsm", "ppo run 7", None)
    assert trainer.post("/v1/namespaces/rl/rubrics/nope/capabilities", json={}).status_code == 404
    listed = trainer.get("/v1/namespaces/rl/rubrics/gsm/capabilities").json()["items"]
    assert [c["id"] for c in listed] == [cap["id"]] and "secret" not in listed[0]

    # SingleTurnAgentExecutor: one sample per request, prompt + response decoded with special tokens.
    right = {"query": [PROMPT + "6 * 7 = 42<|im_end|>"], "prompts": [PROMPT], "labels": ["42"]}
    status, body = openrlhf_post(server.url, path, right)
    assert status == 200, body
    assert body == {
        "rewards": [1.0],
        "scores": [1.0],
        "extra_logs": {"rubric/correct": [1.0], "rubric/shows_work": [1.0]},
    }
    # A batch, as a reward server may be sent (the same shape, N per list).
    batch = {
        "query": [PROMPT + "It is 42<|im_end|>", PROMPT + "6 * 7 = 41<|im_end|>", "<s>" + PROMPT + "= 42"],
        "prompts": [PROMPT, PROMPT, PROMPT],
        "labels": ["42", "42", "42"],
    }
    status, body = openrlhf_post(server.url, path, batch)
    assert status == 200, body
    assert body["rewards"] == pytest.approx([0.75, 0.25, 1.0]) and body["scores"] == body["rewards"]
    assert body["extra_logs"] == {"rubric/correct": [1.0, 0.0, 1.0], "rubric/shows_work": [0.0, 1.0, 1.0]}
    # The older remote_rm_fn: the query alone (no prompt, no label) — a rubric reading {{label}} needs one.
    status, body = openrlhf_post(server.url, path, {"query": [PROMPT + "42"]})
    assert status == 422 and body["error"]["field"] == "labels[0]" and body["error"]["rule"] == "label_required"
    status, body = openrlhf_post(server.url, path, {"query": ["a", "b"], "prompts": ["a"], "labels": ["1", "2"]})
    assert status == 422 and (body["error"]["field"], body["error"]["rule"]) == ("prompts", "same_length")
    # Extra fields a newer OpenRLHF might add are ignored.
    status, body = openrlhf_post(server.url, path, {**right, "images": [None]})
    assert status == 200 and body["rewards"] == [1.0]

    # Unknown, malformed and (below) revoked capabilities are the same 404, naming no secret.
    for wrong in ("/v1/reward/rfxrw_" + "x" * 43, "/v1/reward/not-a-capability", path + "x"):
        status, body = openrlhf_post(server.url, wrong, right)
        assert status == 404 and body["error"]["message"] == "reward capability not found (unknown or revoked)"
    # A bearer key is neither needed nor a way around the capability.
    assert admin.post("/v1/reward/rfxrw_guess", json=right).status_code == 404

    assert trainer.delete(f"/v1/namespaces/rl/rubrics/gsm/capabilities/{cap['id']}").status_code == 204
    assert trainer.delete(f"/v1/namespaces/rl/rubrics/gsm/capabilities/{cap['id']}").status_code == 204  # idempotent
    assert (
        trainer.delete("/v1/namespaces/rl/rubrics/gsm/capabilities/cap_nope").json()["error"]["field"]
        == "capability_id"
    )
    status, body = openrlhf_post(server.url, path, right)
    assert status == 404 and body["error"]["message"] == "reward capability not found (unknown or revoked)"
    [revoked] = trainer.get("/v1/namespaces/rl/rubrics/gsm/capabilities").json()["items"]
    assert revoked["revoked_at"] is not None

    # An agent key may not mint capabilities.
    agent_key = admin.post("/v1/keys", json={"role": "agent", "namespaces": ["rl"]}).json()["key"]
    r = httpx.post(
        f"{server.url}/v1/namespaces/rl/rubrics/gsm/capabilities",
        json={},
        headers={"Authorization": f"Bearer {agent_key}"},
    )
    assert r.status_code == 403

    # The secret: only its SHA-256 in the database, nowhere in the log or the metrics.
    engine = create_engine(server.database_url)
    with engine.connect() as conn:
        rows = [dict(r._mapping) for r in conn.execute(text("SELECT * FROM reward_capabilities"))]
    engine.dispose()
    assert len(rows) == 1 and rows[0]["secret_hash"] == hashlib.sha256(secret.encode()).hexdigest()
    assert all(secret not in str(value) for value in rows[0].values())
    metrics = admin.get("/metrics").text
    assert 'route="/v1/reward/{capability}"' in metrics and secret not in metrics
    admin.close()
    trainer.close()
    server.stop()
    logged = log.read_text()
    assert "POST /v1/reward/<redacted> HTTP/1.1" in logged  # the access log was on, and redacted
    assert secret not in logged and "rfxrw_" + "x" * 43 not in logged
