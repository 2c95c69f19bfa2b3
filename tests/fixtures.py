"""Shared factories for the tests (plain functions; the pytest fixtures live in
conftest.py).

Through the API (a TestClient on the app, see conftest's `client`):

    ns = create_namespace(api, "mem", gamma=0.5)       # asserts 201; "/v1/namespaces/mem"
    post_trajectory(api, "mem", "t1", steps=[step("a kitchen", "boil water")], success=True)
    drain(api)                                         # run the queued jobs to completion

In the store (a `Database` on the `database_url` fixture, no HTTP):

    db = make_db(database_url, "mem")                  # with the namespace rows
    with db.write() as s:
        pk = add_trajectory(s, "mem", "t1", success=True)
        row = add_reflection(s, "mem", "ex1")
        add_vectors(s, row, "model", state=unit(1, 0, 0, 0))   # stored and on the index feed
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from typing import Any

import numpy as np
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from domain.hashing import task_hash
from reflectors.worker import Worker
from store import embeddings as embeddings_repo
from store import index_feed
from store import reflections as reflections_repo
from store import trajectories as trajectories_repo
from store.database import Database
from store.models import Namespace, Reflection, utcnow

# -- request bodies ---------------------------------------------------------------


def step(observation: str = "o", action: Any = "a", **fields: Any) -> dict[str, Any]:
    """A valid step body: the state's observation, the action, any other step field."""
    return {"state": {"observation": observation}, "action": action, **fields}


def trajectory(
    id: str | None = None,
    *,
    task: str = "t",
    steps: Iterable[dict[str, Any]] | None = None,
    success: bool | None = None,
    **fields: Any,
) -> dict[str, Any]:
    """A valid trajectory body. `success` closes it with that outcome (an explicit
    `outcome=` wins); other fields (environment, group_id, metadata, …) pass through."""
    body: dict[str, Any] = {} if id is None else {"id": id}
    body["task"] = task
    if steps is not None:
        body["steps"] = list(steps)
    if success is not None:
        body["outcome"] = {"success": success}
    body.update(fields)
    return body


# -- through the API --------------------------------------------------------------


def ns_path(namespace: str) -> str:
    return f"/v1/namespaces/{namespace}"


def create_namespace(api: TestClient, name: str, **settings: Any) -> str:
    """Create a namespace with these settings (201 asserted); returns its path."""
    body: dict[str, Any] = {"name": name}
    if settings:
        body["settings"] = settings
    r = api.post("/v1/namespaces", json=body)
    assert r.status_code == 201, r.text
    return ns_path(name)


def post_trajectory(api: TestClient, namespace: str, id: str | None = None, **body: Any) -> dict[str, Any]:
    """POST a new trajectory (the keywords of `trajectory`); asserts 201 and returns
    the response body (its `consistency_token`, `status`, …)."""
    r = api.post(f"{ns_path(namespace)}/trajectories", json=trajectory(id, **body))
    assert r.status_code == 201, r.text
    return r.json()  # type: ignore[no-any-return]


def drain(api: TestClient, *, skip: Collection[str] = ()) -> int:
    """Run the queued jobs to completion with the app's worker; returns how many ran.

    `skip`: job kinds to leave queued. The rest then run on a one-slot worker
    without those handlers (a job stays queued until a later plain `drain`)."""
    worker: Worker = api.app.state.services.worker  # type: ignore[attr-defined]
    if not skip:
        return worker.run_until_idle()
    others = {kind: handler for kind, handler in worker.handlers.items() if kind not in skip}
    return Worker(worker.db, others).run_until_idle()


# -- in the store -----------------------------------------------------------------


def make_db(database_url: str, *namespaces: str) -> Database:
    """A Database on the URL with these namespaces created (empty settings). The
    caller disposes it."""
    db = Database(database_url)
    with db.write() as session:
        for name in namespaces:
            session.add(Namespace(name=name, settings={}, created_at=utcnow()))
    return db


def add_trajectory(
    session: Session,
    namespace: str,
    id: str,
    *,
    task: str = "t",
    success: bool | None = None,
    **columns: Any,
) -> int:
    """Insert a trajectory row (closed when `success` is given); returns its pk."""
    row: dict[str, Any] = {
        "namespace": namespace,
        "id": id,
        "task": task,
        "task_hash": task_hash(task),
        "request_hash": "0" * 64,
        "status": "open" if success is None else "closed",
        "success": success,
        "closed_at": None if success is None else utcnow(),
        **columns,
    }
    return trajectories_repo.create_trajectories(session, [row])[id]


def add_reflection(
    session: Session,
    namespace: str,
    id: str,
    *,
    kind: str = "exemplar",
    content: dict[str, Any] | None = None,
    actor: str = "test",
    **columns: Any,
) -> Reflection:
    """Insert a reflection (and its "create" version) through the store."""
    values: dict[str, Any] = {
        "namespace": namespace,
        "id": id,
        "kind": kind,
        "content": {"id": id} if content is None else content,
        "text": f"text of {id}",
        "reflector": "test",
        "reflector_version": "1",
        **columns,
    }
    return reflections_repo.create_reflection(session, values, actor)


def unit(*components: float) -> np.ndarray:
    """The L2-normalised float32 vector of these components."""
    v = np.array(components, dtype=np.float32)
    return v / np.linalg.norm(v)  # type: ignore[no-any-return]


def add_vectors(session: Session, row: Reflection, model: str, **vectors: np.ndarray) -> None:
    """Store the row's vectors (field=vector) of this model and put an upsert on the
    index feed, as the embedding reflector does."""
    index_feed.lock_feed(session, row.namespace)
    embeddings_repo.update_embeddings(
        session, reflection_pk=row.pk, namespace=row.namespace, kind=row.kind, model=model, vectors=vectors
    )
    index_feed.create_changes(session, row.namespace, [(row.kind, row.pk, "upsert")])
