"""An in-memory stand-in for the trajectory and retrieval routes, served through
``httpx.MockTransport``, with scripted failures and hangs: what the client unit
tests talk to instead of a server."""

from __future__ import annotations

import json
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx
from reflexa import Client

BASE_URL = "http://reflexa.test"
NOW = "2026-01-01T00:00:00Z"


@dataclass(frozen=True)
class Call:
    method: str
    path: str
    params: dict[str, str]
    body: Any
    headers: httpx.Headers


class FakeReflexa:
    """Just enough of the trajectory API to check what the client sends, in what order.

    It enforces the server's rules that the client relies on: steps stored at
    contiguous indexes, identical repeats are replays, closed trajectories take no
    steps. Closing a trajectory queues one indexing job and answers with a
    consistency token naming it (``c1.<job>.<job>``; a replay names the same job),
    as the server does; other writes answer ``c1.0``. Retrieve answers one canned
    item; a retrieval outcome is taken once (identical repeat: 0 credited, different: 409).
    ``script`` queues responses (or exceptions) returned before normal handling;
    ``hang()`` makes every request wait until ``release()``.
    """

    def __init__(self) -> None:
        self.calls: list[Call] = []
        self.trajectories: dict[str, dict[str, Any]] = {}
        self.script: deque[httpx.Response | Exception] = deque()
        #: Batches with more items are refused with 413 (the server's body limit, in items).
        self.max_batch_items: int | None = None
        self.jobs = 0
        self.retrievals: dict[str, dict[str, Any] | None] = {}
        self._lock = threading.Lock()
        self._released = threading.Event()
        self._released.set()

    # --- scripting ----------------------------------------------------------------------

    def fail(self, status: int, times: int = 1, **headers: str) -> None:
        body = {
            "error": {
                "type": {429: "rate_limited", 503: "unavailable"}.get(status, "internal"),
                "message": f"scripted {status}",
            }
        }
        for _ in range(times):
            self.script.append(httpx.Response(status, json=body, headers=headers))

    def raise_(self, exc: Exception, times: int = 1) -> None:
        for _ in range(times):
            self.script.append(exc)

    def hang(self) -> None:
        self._released.clear()

    def release(self) -> None:
        self._released.set()

    def paths(self) -> list[str]:
        return [f"{c.method} {c.path}" for c in self.calls]

    # --- the transport handler ----------------------------------------------------------

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self._released.wait(timeout=60)  # a forgotten release() must not hang the suite
        body = json.loads(request.content) if request.content else None
        path = request.url.raw_path.decode("ascii").partition("?")[0]  # as sent, still escaped
        with self._lock:
            self.calls.append(Call(request.method, path, dict(request.url.params), body, request.headers))
            if self.script:
                scripted = self.script.popleft()
                if isinstance(scripted, Exception):
                    raise scripted
                return scripted
            return self._route(request.method, path.split("/"), body)

    def _route(self, method: str, parts: list[str], body: Any) -> httpx.Response:
        # parts: ['', 'v1', 'namespaces', ns, 'trajectories', id?, action?]
        if len(parts) == 5 and parts[4] == "retrieve" and method == "POST":
            return self._retrieve(body)
        if len(parts) == 7 and parts[4] == "retrievals" and parts[6] == "outcome" and method == "POST":
            return self._retrieval_outcome(parts[5], body)
        if len(parts) == 5 and method == "POST":
            return self._create(parts[3], body)
        if len(parts) == 6 and parts[5] == "batch" and method == "POST":
            return self._batch(parts[3], body["trajectories"])
        if len(parts) == 6 and method == "GET":
            found = self.trajectories.get(parts[5])
            return httpx.Response(200, json=self._read(found)) if found else _error(404, "not_found")
        if len(parts) == 7 and parts[6] == "steps" and method == "POST":
            return self._append(parts[5], body["steps"])
        if len(parts) == 7 and parts[6] == "outcome" and method == "POST":
            return self._close(parts[5], body)
        return _error(404, "not_found")

    def _create(self, namespace: str, body: dict[str, Any]) -> httpx.Response:
        stored = self.trajectories.get(body["id"])
        if stored is not None:
            if stored["request"] != body:
                return _error(409, "conflict", field="id")
            return httpx.Response(200, json=self._written(stored))
        for i, step in enumerate(body.get("steps", [])):
            if step.get("index", i) != i:
                return _error(422, "invalid_input", field=f"steps[{i}].index")
        stored = {
            "namespace": namespace,
            "request": body,
            "steps": [dict(step, index=i) for i, step in enumerate(body.get("steps", []))],
            "outcome": body.get("outcome"),
            "job": None,
        }
        self.trajectories[body["id"]] = stored
        if stored["outcome"] is not None:
            stored["job"] = self._enqueue()
        return httpx.Response(201, json=self._written(stored))

    def _batch(self, namespace: str, items: list[dict[str, Any]]) -> httpx.Response:
        """All or nothing, naming the first bad item, as the server does."""
        if self.max_batch_items is not None and len(items) > self.max_batch_items:
            return _error(413, "payload_too_large", field="body")
        seen: set[str] = set()
        for i, item in enumerate(items):
            stored = self.trajectories.get(item["id"])
            if item["id"] in seen:
                return _error(422, "invalid_input", field=f"trajectories[{i}].id")
            if stored is not None and stored["request"] != item:
                return _error(409, "conflict", field=f"trajectories[{i}].id")
            if item["task"] == "refused by the server":
                return _error(422, "invalid_input", field=f"trajectories[{i}].task")
            seen.add(item["id"])
        created = [item["id"] not in self.trajectories for item in items]
        for item in items:
            self._create(namespace, item)
        results = [
            {"id": item["id"], "created": new, "step_count": len(item.get("steps", [])), "status": "open"}
            for item, new in zip(items, created, strict=True)
        ]
        jobs = [self.trajectories[item["id"]]["job"] for item in items]
        token = _token(*(job for job in jobs if job is not None))
        return httpx.Response(201 if any(created) else 200, json={"items": results, "consistency_token": token})

    def _append(self, trajectory_id: str, steps: list[dict[str, Any]]) -> httpx.Response:
        stored = self.trajectories.get(trajectory_id)
        if stored is None:
            return _error(404, "not_found")
        appended = 0
        for i, step in enumerate(steps):
            count = len(stored["steps"])
            index = step.get("index", count)
            step = dict(step, index=index)
            if index < count:
                if stored["steps"][index] != step:
                    return _error(409, "conflict", field=f"steps[{i}]")
                continue
            if index > count:
                return _error(409, "conflict", field=f"steps[{i}].index")
            if stored["outcome"] is not None:
                return _error(409, "conflict", field="steps")
            stored["steps"].append(step)
            appended += 1
        return httpx.Response(
            200,
            json={
                "trajectory_id": trajectory_id,
                "step_count": len(stored["steps"]),
                "appended": appended,
                "consistency_token": "c1.0",
            },
        )

    def _close(self, trajectory_id: str, outcome: dict[str, Any]) -> httpx.Response:
        stored = self.trajectories.get(trajectory_id)
        if stored is None:
            return _error(404, "not_found")
        if stored["outcome"] is not None and stored["outcome"] != outcome:
            return _error(409, "conflict", field="outcome")
        stored["outcome"] = outcome
        if stored["job"] is None:
            stored["job"] = self._enqueue()
        return httpx.Response(200, json=self._written(stored))

    def _enqueue(self) -> int:
        self.jobs += 1
        return self.jobs

    def _retrieve(self, body: dict[str, Any]) -> httpx.Response:
        retrieval_id = f"r_{len(self.retrievals) + 1}"
        self.retrievals[retrieval_id] = None
        item = {
            "id": "ex_1",
            "kind": "exemplar",
            "status": "active",
            "version": 1,
            "content": {"observation": body["state"]["observation"], "action": "a"},
            "text": f"State: {body['state']['observation']}\nAction: a",
            "score": 0.9,
            "similarity": 0.95,
            "state_similarity": 0.95,
            "internal_similarity": None,
            "utility": {"mean": 0.5, "std": 0.2, "uses": 0, "successes": 0, "failures": 0, "baseline": 0.5},
            "evidence": [{"trajectory_id": "t0", "step_start": 0, "step_end": 0}],
            "evidence_count": 1,
            "environment": None,
            "created_at": NOW,
            "updated_at": NOW,
            "some_future_field": True,
        }
        context = "## Past experience\n- a" if body.get("render") else None
        return httpx.Response(
            200, json={"retrieval_id": retrieval_id, "items": [item], "context": context, "gamma": 0.95}
        )

    def _retrieval_outcome(self, retrieval_id: str, body: dict[str, Any]) -> httpx.Response:
        if retrieval_id not in self.retrievals:
            return _error(404, "not_found", field="retrieval_id")
        old = self.retrievals[retrieval_id]
        if old is not None and old != body:
            return _error(409, "conflict", field="outcome")
        self.retrievals[retrieval_id] = body
        answer = {"retrieval_id": retrieval_id, "success": body.get("success"), "reward": body.get("reward")}
        return httpx.Response(200, json=dict(answer, credited_items=0 if old is not None else 1))

    def _read(self, stored: dict[str, Any]) -> dict[str, Any]:
        request = stored["request"]
        return {
            "id": request["id"],
            "namespace": stored["namespace"],
            "task": request["task"],
            "status": "closed" if stored["outcome"] is not None else "open",
            "outcome": stored["outcome"],
            "step_count": len(stored["steps"]),
            "created_at": NOW,
            "updated_at": NOW,
            "steps": [dict(step, created_at=NOW) for step in stored["steps"]],
        }

    def _written(self, stored: dict[str, Any]) -> dict[str, Any]:
        token = _token(stored["job"]) if stored["job"] is not None else "c1.0"
        return dict(self._read(stored), steps=None, consistency_token=token)


def _token(*jobs: int) -> str:
    return f"c1.{min(jobs)}.{max(jobs)}" if jobs else "c1.0"


def _error(status: int, kind: str, field: str | None = None) -> httpx.Response:
    error: dict[str, Any] = {"type": kind, "message": f"fake {kind}"}
    if field:
        error["field"] = field
    return httpx.Response(status, json={"error": error})


#: The ``make_client`` fixture: keyword arguments go to :class:`reflexa.Client`.
MakeClient = Callable[..., Client]
