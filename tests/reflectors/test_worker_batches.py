"""Indexing under load: a worker slot claims closed trajectories in batches and
encodes all their new texts in one call; a text some stored vector already encodes
is never encoded again, and an exemplar drafted by two jobs of a batch stores the
vectors of its own texts; the job a reader waits on (its consistency token) moves
ahead of other namespaces' backlog. On both engines."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from domain.hashing import text_hash
from domain.jobs import TRAJECTORY_CLOSED, Priority
from reflectors.exemplars import BATCH_JOBS
from reflectors.worker import Worker
from store import embeddings as embeddings_repo
from store import jobs as jobs_repo
from store.models import Embedding, Job, Reflection
from tests.factories import step
from tests.fixtures import create_namespace, drain, post_trajectory


class CountingEncoder:
    """Wraps the app's embedder: records the texts of every encoder call."""

    def __init__(self, api: TestClient) -> None:
        self.embedder = api.app.state.services.worker.handlers[TRAJECTORY_CLOSED.kind].embedder  # type: ignore[attr-defined]
        self.original = self.embedder.encode
        self.calls: list[list[str]] = []

    def __enter__(self) -> CountingEncoder:
        def encode(texts: list[str]) -> Any:
            self.calls.append(list(texts))
            return self.original(texts)

        self.embedder.encode = encode
        return self

    def __exit__(self, *_: object) -> None:
        self.embedder.encode = self.original


def worker_of(api: TestClient) -> Worker:
    return api.app.state.services.worker  # type: ignore[attr-defined,no-any-return]


def test_a_slot_indexes_many_closed_trajectories_with_one_encoder_call(client: TestClient) -> None:
    create_namespace(client, "w")
    for n in range(BATCH_JOBS + 2):
        steps = [step(f"room {n} door {d}", "open", internal_state=f"plan {n}") for d in range(3)]
        post_trajectory(client, "w", f"t{n}", steps=steps, success=True)
    worker = worker_of(client)
    with CountingEncoder(client) as enc:
        ran = worker.run_once([TRAJECTORY_CLOSED.kind], limit=1)  # what one slot does
    assert ran == BATCH_JOBS
    assert len(enc.calls) == 1 and len(enc.calls[0]) == BATCH_JOBS * 4  # 3 states + 1 plan each, distinct
    with worker.db.read() as s:
        done = s.query(Job).filter(Job.kind == TRAJECTORY_CLOSED.kind, Job.status == "done").count()
    assert done == BATCH_JOBS
    r = client.post("/v1/namespaces/w/retrieve", json={"state": {"observation": "room 3 door 1"}, "k": 1})
    assert r.json()["items"][0]["exact_match"]


def test_a_text_already_encoded_is_reused_not_encoded(client: TestClient) -> None:
    create_namespace(client, "r")
    post_trajectory(client, "r", "a", steps=[step("the hall", "go north"), step("the tower", "climb")], success=True)
    drain(client)
    with CountingEncoder(client) as enc:
        # The same states with other actions (new exemplars) and one new state.
        steps = [step("the hall", "go south"), step("the tower", "jump"), step("the moat", "swim")]
        post_trajectory(client, "r", "b", steps=steps, success=False)
        worker_of(client).run_once([TRAJECTORY_CLOSED.kind], limit=1)
    assert [sorted(c) for c in enc.calls] == [["the moat"]]
    r = client.post("/v1/namespaces/r/retrieve", json={"state": {"observation": "the hall"}, "k": 5})
    assert {i["content"]["action"] for i in r.json()["items"] if i["exact_match"]} == {"go north", "go south"}


def test_an_exemplar_drafted_by_two_jobs_of_a_batch_stores_vectors_of_its_own_texts(client: TestClient) -> None:
    """The same (state, action) under two internal states in one batch: the exemplar
    keeps the first occurrence's internal state, and its internal vector encodes that
    text, the one its hash names (not the other job's), so a later reuse by that hash
    gets the right vector; it is an exact match under both internal states."""
    create_namespace(client, "b")
    for n, plan in enumerate(("make tea", "wash up")):
        post_trajectory(
            client, "b", f"t{n}", steps=[step("the kitchen", "boil water", internal_state=plan)], success=True
        )
    worker = worker_of(client)
    assert worker.run_once([TRAJECTORY_CLOSED.kind], limit=1) == 2  # one batch
    embedder = CountingEncoder(client).embedder
    with worker.db.read() as s:
        (row,) = s.scalars(select(Reflection).where(Reflection.namespace == "b", Reflection.kind == "exemplar"))
        vectors = embeddings_repo.read_embeddings(s, [row.pk], embedder.name)[row.pk]
        digest = s.scalar(
            select(Embedding.text_hash).where(Embedding.reflection_pk == row.pk, Embedding.field == "internal")
        )
    internal = row.content["internal_state"]
    assert digest == text_hash(internal)
    assert float(vectors["internal"] @ embedder.encode([internal])[0]) == pytest.approx(1.0, abs=1e-5)
    for plan in ("make tea", "wash up"):
        body = {"state": {"observation": "the kitchen"}, "internal_state": plan, "k": 1}
        item = client.post("/v1/namespaces/b/retrieve", json=body).json()["items"][0]
        assert item["exact_match"] and item["content"]["count"] == 2


def test_a_failed_batch_fails_each_of_its_jobs_for_retry(client: TestClient) -> None:
    create_namespace(client, "f")
    for n in range(3):
        post_trajectory(client, "f", f"t{n}", steps=[step(f"s{n}", "a")], success=True)
    handler = worker_of(client).handlers[TRAJECTORY_CLOSED.kind]

    def broken(_: list[str]) -> Any:
        raise TimeoutError("the encoder timed out")

    original = handler.embedder.encode  # type: ignore[attr-defined]
    handler.embedder.encode = broken  # type: ignore[attr-defined]
    try:
        assert worker_of(client).run_once([TRAJECTORY_CLOSED.kind], limit=1) == 3
    finally:
        handler.embedder.encode = original  # type: ignore[attr-defined]
    with worker_of(client).db.read() as s:
        jobs = s.query(Job).filter(Job.kind == TRAJECTORY_CLOSED.kind).all()
        assert {(j.status, j.attempts) for j in jobs} == {("queued", 1)}  # transient: back to the queue
        assert all("timed out" in (j.last_error or "") for j in jobs)


def test_the_job_a_reader_waits_on_goes_ahead_of_other_namespaces_backlog(client: TestClient) -> None:
    create_namespace(client, "busy")
    create_namespace(client, "mine")
    for n in range(5):
        post_trajectory(client, "busy", f"b{n}", steps=[step(f"busy {n}", "a")], success=True)
    mine = post_trajectory(client, "mine", "m", steps=[step("my state", "my action")], success=True)
    first, last = (int(x) for x in mine["consistency_token"].split(".")[1:])
    worker = worker_of(client)
    with worker.db.write() as s:
        assert jobs_repo.update_awaited_jobs(s, "mine", TRAJECTORY_CLOSED.kind, first, last, Priority.AWAITED) == 1
        assert s.get(Job, first).priority == Priority.AWAITED  # type: ignore[union-attr]
    # One job at a time, no batching: the awaited one is claimed before the backlog queued earlier.
    solo = Worker(worker.db, {TRAJECTORY_CLOSED.kind: worker.handlers[TRAJECTORY_CLOSED.kind]})
    solo.run_once([TRAJECTORY_CLOSED.kind], limit=1)
    with worker.db.read() as s:
        done = {j.namespace for j in s.query(Job).filter(Job.status == "done")}
    assert done == {"mine"}


def test_a_retrieve_with_a_token_moves_its_jobs_ahead(client: TestClient) -> None:
    """Through the API: the wait itself raises the priority (a 504 here: no worker runs)."""
    create_namespace(client, "q")
    token = post_trajectory(client, "q", "t", steps=[step("x", "y")], success=True)["consistency_token"]
    body = {"state": {"observation": "x"}, "consistency_token": token, "wait_timeout_ms": 50}
    assert client.post("/v1/namespaces/q/retrieve", json=body).status_code == 504
    first = int(token.split(".")[1])
    with worker_of(client).db.read() as s:
        assert s.get(Job, first).priority == Priority.AWAITED  # type: ignore[union-attr]


def test_an_awaited_job_shares_its_batch_only_with_its_namespace_and_beats_starved_jobs(client: TestClient) -> None:
    create_namespace(client, "busy")
    create_namespace(client, "mine")
    for n in range(BATCH_JOBS + 1):
        post_trajectory(client, "busy", f"b{n}", steps=[step(f"busy {n}", "a")], success=True)
    mine = [post_trajectory(client, "mine", f"m{n}", steps=[step(f"mine {n}", "a")], success=True) for n in range(2)]
    worker = worker_of(client)
    ranges = [tuple(int(x) for x in m["consistency_token"].split(".")[1:]) for m in mine]
    with worker.db.write() as s:
        backdate = s.query(Job).filter(Job.namespace == "busy").all()
        for job in backdate:  # the backlog is starved: an ageing slot would serve it first
            job.run_after = job.run_after.replace(year=job.run_after.year - 1)
        jobs_repo.update_awaited_jobs(s, "mine", TRAJECTORY_CLOSED.kind, *ranges[0], Priority.AWAITED)
    worker.run_once([TRAJECTORY_CLOSED.kind], limit=1, starved_after=5.0)  # the ageing slot
    with worker.db.read() as s:
        done = {(j.namespace, j.id) for j in s.query(Job).filter(Job.status == "done")}
    assert {ns for ns, _ in done} == {"mine"} and len(done) == 2  # the awaited one, and its namespace's other
