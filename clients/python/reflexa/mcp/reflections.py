"""Reading a reflection and its evidence through the client.

The client has no reflection methods yet, so the one read this server needs
(``GET /v1/namespaces/{ns}/reflections/{id}``, docs/api.md "Reflections") is an
operation sent through the client's transport: the same key, retries and errors as
every client call. The evidence is that reflection's evidence links, each with the
steps it cites, read with :meth:`reflexa.Client.get_trajectory`.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from reflexa import _operations as ops
from reflexa.client import Client
from reflexa.errors import NotFound
from reflexa.models import ReflectionRead

#: Evidence trajectories read per resource (the newest first); the rest are counted.
MAX_EVIDENCE_TRAJECTORIES = 10
#: Cited steps shown per evidence link (a link without a step range cites the whole trajectory).
MAX_CITED_STEPS = 20


def get_reflection(client: Client, namespace: str, reflection_id: str) -> ReflectionRead:
    path = f"/v1/namespaces/{quote(namespace, safe='')}/reflections/{quote(reflection_id, safe='')}"
    return client._transport.send(ops.Operation("GET", path, ReflectionRead.model_validate))


def reflection_document(reflection: ReflectionRead) -> dict[str, Any]:
    """The reflection as the resource shows it (its evidence links stay in the evidence resource)."""
    data = reflection.model_dump(mode="json", exclude={"evidence"})
    data["evidence_uri"] = f"reflexa://reflections/{reflection.id}/evidence"
    return data


def evidence_document(client: Client, namespace: str, reflection: ReflectionRead) -> dict[str, Any]:
    """Each evidence link with its trajectory's task and outcome and the steps it cites."""
    links: list[dict[str, Any]] = []
    for n, link in enumerate(reflection.evidence):
        entry: dict[str, Any] = link.model_dump(mode="json")
        if n < MAX_EVIDENCE_TRAJECTORIES:
            entry.update(_cited(client, namespace, link.trajectory_id, link.step_start, link.step_end))
        links.append(entry)
    return {
        "reflection_id": reflection.id,
        "kind": reflection.kind,
        "text": reflection.text,
        "evidence_count": reflection.evidence_count,
        "evidence": links,
    }


def _cited(client: Client, namespace: str, trajectory_id: str, start: int | None, end: int | None) -> dict[str, Any]:
    try:
        trajectory = client.get_trajectory(namespace, trajectory_id)
    except NotFound:
        return {"trajectory": None, "note": "the trajectory is gone (deleted)"}
    first = start if start is not None else 0
    last = end if end is not None else (start if start is not None else trajectory.step_count - 1)
    steps = [
        {
            "index": s.index,
            "observation": s.state.observation,
            "internal_state": s.internal_state,
            "action": s.action,
            "result": s.result,
            "reward": s.reward,
        }
        for s in trajectory.steps or ()
        if first <= s.index <= last
    ][:MAX_CITED_STEPS]
    outcome = trajectory.outcome.model_dump(mode="json", exclude_none=True) if trajectory.outcome else None
    return {"task": trajectory.task, "status": trajectory.status, "outcome": outcome, "steps": steps}
