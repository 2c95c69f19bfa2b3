"""Liveness, readiness, metrics, and the refusal to run on an out-of-date schema."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from service.app import SchemaOutOfDate, create_app
from tests.conftest import make_settings
from tests.factories import step
from tests.fixtures import create_namespace, drain, post_trajectory


def test_healthz_readyz(client: TestClient) -> None:
    assert client.get("/healthz").json() == {"status": "ok"}
    r = client.get("/readyz")
    assert r.status_code == 200
    assert r.json()["checks"]["schema"]["ok"] is True


def test_metrics_count_requests_and_jobs(client: TestClient) -> None:
    create_namespace(client, "m")
    post_trajectory(client, "m", success=True)
    text = client.get("/metrics").text
    assert (
        'reflexa_http_requests_total{method="POST",route="/v1/namespaces/{ns}/trajectories",status="201"} 1.0' in text
    )
    assert 'reflexa_jobs{kind="trajectory.closed",status="queued"} 1.0' in text
    assert "reflexa_http_request_seconds_bucket" in text


def test_refuses_out_of_date_schema_and_names_the_fix(tmp_path: Path) -> None:
    settings = make_settings(f"sqlite:///{tmp_path / 'empty.db'}", tmp_path)
    with pytest.raises(SchemaOutOfDate, match=r"run `reflexa db upgrade`"), TestClient(create_app(settings)):
        pass


def test_readyz_reports_workers_and_index(client: TestClient) -> None:
    checks = client.get("/readyz").json()["checks"]
    assert checks["workers"] == {
        "ok": True,
        "in_process": False,
        "queued": 0,
        "running": 0,
        "failed": 0,
        "oldest_queued_seconds": None,
    }
    assert checks["index"]["embedder"] == "hashing-256"
    create_namespace(client, "m")
    post_trajectory(client, "m", success=True)
    workers = client.get("/readyz").json()["checks"]["workers"]
    assert workers["queued"] == 1 and workers["oldest_queued_seconds"] >= 0


def test_metrics_report_cache_and_index_sizes(client: TestClient) -> None:
    create_namespace(client, "m")
    post_trajectory(client, "m", steps=[step("o", "a")], success=True)
    drain(client)
    client.post("/v1/namespaces/m/retrieve", json={"state": {"observation": "o"}})
    text = client.get("/metrics").text
    assert 'reflexa_index_vectors{field="state",kind="exemplar",namespace="m"} 1.0' in text
    assert 'reflexa_index_rebuilding{field="state",kind="exemplar",namespace="m",structure="exact"} 0.0' in text
    assert 'reflexa_embedding_cache_total{result="hit"}' in text
