"""Factories: the data of a Reflexa store, built through the real code paths, for the
tests and the benchmarks alike.

Why here (tests/factories.py) and not under bench/: tests/ is where the architecture
puts its factories, the benchmarks already run from a checkout that holds tests/
(bench.advantages serves the teacher tests' tiny LLM server), and nothing here needs
a benchmark. Everything writes through the server's own functions: request bodies
the API accepts, rows through `store` (`create_trajectories`, `create_reflection`,
`update_embeddings`, `create_changes`), reflections as the reflectors' own builders
make them (`exemplar_draft`: `reflectors.exemplars.build_exemplars`).

Request bodies (for a TestClient, tests/fixtures.py, or httpx against a server):

    step("a kitchen", "boil water")                    # one step body
    trajectory("t1", steps=[step()], success=True)     # a trajectory body, closed

In the store (a `Database` on the `database_url` fixture, no HTTP):

    db = make_db(database_url, "mem")                  # with the namespace rows
    with db.write() as s:
        pk = add_trajectory(s, "mem", "t1", success=True)
        row = add_reflection(s, "mem", "ex1")
        add_vectors(s, row, "model", state=unit(1, 0, 0, 0))   # stored and on the index feed

Reflections as a reflector builds them (bench.retrieval.populate, bench.ui.fill):

    draft, texts = exemplar_draft("mem", step_row(0, observation="a kitchen", action="boil water"))
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

import numpy as np
from sqlalchemy.orm import Session

from domain.hashing import task_hash
from domain.reflections import ReflectionDraft
from domain.settings import NamespaceSettings
from reflectors.exemplars import build_exemplars
from store import embeddings as embeddings_repo
from store import evidence as evidence_repo
from store import index_feed
from store import reflections as reflections_repo
from store import trajectories as trajectories_repo
from store.database import Database
from store.evidence import EvidenceIn
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


def door_steps(success: bool) -> list[dict[str, Any]]:
    """Three steps of one attempt at "open the door" (hall, key, door), each with its
    result; a failed attempt kicks the door and its last step caused the failure."""
    return [
        step(
            "you are in a hall, a door to the north", "go north", internal_state="find the key", result="you walk north"
        ),
        step("a kitchen, a key on the table", "take key", reward=0.5, result="you hold the key"),
        step(
            "holding the key, the door is locked",
            "unlock door" if success else "kick door",
            reward=1.0 if success else 0.0,
            caused_failure=not success,
            result="the door opens" if success else "ouch",
        ),
    ]


def door_outcome(success: bool) -> dict[str, Any]:
    """The outcome of a `door_steps` attempt; a failure says why."""
    outcome: dict[str, Any] = {"success": success, "reward": 1.0 if success else 0.0}
    if not success:
        outcome["failure_reason"] = "the door held"
    return outcome


#: A rubric criterion checked by rule: the final answer equals the item's label.
RIGHT_NUMBER = {
    "id": "correct",
    "text": "The final answer is the right number.",
    "weight": 3,
    "check": {"type": "numeric", "op": "eq", "value": "{{label}}"},
}


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


# -- as the reflectors read and build them -------------------------------------------

STEP_DEFAULTS: dict[str, Any] = {
    "observation": "o",
    "state_data": None,
    "internal_state": None,
    "action": "a",
    "result": None,
    "reward": None,
    "caused_failure": False,
    "truncated": False,
}


def step_row(index: int, **columns: Any) -> SimpleNamespace:
    """A step as a stored `Step` row reads to the reflectors' builders (the columns
    they use), without a database."""
    return SimpleNamespace(index=index, **{**STEP_DEFAULTS, **columns})


def trajectory_row(namespace: str, **columns: Any) -> SimpleNamespace:
    """A trajectory as a stored `Trajectory` row reads to the reflectors' builders."""
    defaults = {"pk": 0, "id": "t", "environment": None, "task": None, "success": None, "reward": None}
    return SimpleNamespace(namespace=namespace, **{**defaults, **columns})


def exemplar_draft(
    namespace: str,
    step: SimpleNamespace,
    *,
    trajectory: SimpleNamespace | None = None,
    settings: NamespaceSettings | None = None,
) -> tuple[ReflectionDraft, dict[str, str]]:
    """The exemplar the exemplar reflector builds from this one step (its id, content,
    text, status) and the texts its vectors encode (field -> text)."""
    traj = trajectory or trajectory_row(namespace)
    (exemplar,) = build_exemplars(traj, [step], settings or NamespaceSettings())  # type: ignore[arg-type]
    return exemplar.draft, exemplar.texts


def unique(prefix: str) -> str:
    """A name no other test uses (tests on one live server share its namespaces)."""
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


CITED_MODEL = "test-model"  # add_cited_reflections' vectors, in the cited_db fixture
CITED_LONG_AGO = datetime(2024, 1, 1, tzinfo=UTC)  # when its "tea" was created there


def add_cited_reflections(db: Database, model: str, long_ago: datetime) -> dict[str, int]:
    """Two trajectories (tea by ann on v1, coffee by bob on v2) in namespace "mem" and
    the reflections distilled from them: "tea" (created `long_ago`) and "coffee"
    exemplars, a "both" heuristic citing each, "bare" with no vector of `model`, and
    "far", namespace "other"'s. Name -> reflection pk."""
    with db.write() as s:
        tea = add_trajectory(s, "mem", "tea", task="make tea", agent="ann", policy_version="v1", success=True)
        coffee = add_trajectory(s, "mem", "coffee", task="make coffee", agent="bob", policy_version="v2", success=False)
        other = add_trajectory(s, "other", "tea", task="make tea")
        rows = {
            "tea": add_reflection(s, "mem", "tea", status="active", environment="house"),
            "coffee": add_reflection(s, "mem", "coffee", status="active", environment="house", content={"a": [1]}),
            "both": add_reflection(s, "mem", "both", kind="heuristic", environment="garden"),
            "bare": add_reflection(s, "mem", "bare", status="active", environment="house"),
            "far": add_reflection(s, "other", "far", status="active", environment="house"),
        }
        rows["tea"].created_at = long_ago
        add_vectors(s, rows["tea"], model, state=unit(1, 0, 0))
        add_vectors(s, rows["coffee"], model, state=unit(0, 1, 0), internal=unit(0, 0, 1))
        add_vectors(s, rows["both"], model, state=unit(1, 1, 0))
        add_vectors(s, rows["bare"], "another-model", state=unit(1, 0, 0))
        add_vectors(s, rows["far"], model, state=unit(1, 0, 0))
        for name, cited in (("tea", [tea]), ("coffee", [coffee]), ("both", [tea, coffee]), ("far", [other])):
            evidence_repo.create_evidence(s, rows[name].pk, [EvidenceIn(t, 0, 0) for t in cited])
        return {name: row.pk for name, row in rows.items()}
