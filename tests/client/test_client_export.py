"""Client.export / AsyncClient.export against a real server (``live_server``:
uvicorn over HTTP on SQLite): datasets streamed to files, counted in rows or
bytes, with a progress bar; errors before any file appears; the route and its
parameters as the server's OpenAPI has them."""

from __future__ import annotations

import inspect
import io
import json
from pathlib import Path
from typing import Any

import httpx
import pyarrow.parquet as pq
import pytest
from reflexa import AsyncClient, Client, errors
from reflexa import _operations as operations

from tests.factories import unique

HALL = {"observation": "a hall", "data": {"room": "hall"}}


def post(admin: Client, path: str, body: dict[str, Any]) -> None:
    """A request the client has no method for (its models lag the server's retry fields)."""
    headers = {"Authorization": f"Bearer {admin.config.api_key}"}
    r = httpx.post(f"{admin.config.base_url}{path}", json=body, headers=headers)
    assert r.status_code == 201, r.text


@pytest.fixture
def namespace(admin: Client) -> str:
    ns = admin.create_namespace(unique("export")).name
    trajectories = [
        {
            "id": "won",
            "task": "find the key",
            "steps": [{"state": HALL, "action": "go north"}, {"state": {"observation": "a key"}, "action": "take"}],
            "outcome": {"success": True, "reward": 1.0},
        },
        {
            "id": "lost",
            "task": "find the key",
            "steps": [{"state": HALL, "action": {"tool": "move", "to": "south"}, "caused_failure": True}],
            "outcome": {"success": False, "reward": 0.0, "failure_reason": "a pit"},
        },
        {
            "id": "retry",
            "task": "find the key",
            "parent_trajectory_id": "lost",
            "attempt": 2,
            "steps": [{"state": HALL, "action": "go north"}],
            "outcome": {"success": True},
        },
    ]
    post(admin, f"/v1/namespaces/{ns}/trajectories/batch", {"trajectories": trajectories})
    return ns


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_export_each_dataset_as_jsonl_and_parquet(admin: Client, namespace: str, tmp_path: Path) -> None:
    expected = {"trajectories": 3, "sft": 3, "preferences": 1, "attempts": 1}
    for dataset, rows in expected.items():
        path = tmp_path / f"{dataset}.jsonl"
        assert admin.export(namespace, dataset, path, progress=False) == rows  # type: ignore[arg-type]
        assert len(lines(path)) == rows and not path.with_name(path.name + ".part").exists()
        parquet = tmp_path / f"{dataset}.parquet"
        size = admin.export(namespace, dataset, parquet, format="parquet", progress=False)  # type: ignore[arg-type]
        assert size == parquet.stat().st_size and pq.read_table(parquet).num_rows == rows
    (pair,) = lines(tmp_path / "preferences.jsonl")
    chosen, rejected = pair["chosen"][0]["content"], pair["rejected"][0]["content"]
    assert (chosen, rejected) == ("go north", '{"to":"south","tool":"move"}')  # a tool call as its JSON text


def test_filters_snapshot_and_progress(
    admin: Client, namespace: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "out.jsonl"
    assert admin.export(namespace, "trajectories", path, success=False, progress=False) == 1
    assert [r["id"] for r in lines(path)] == ["lost"]
    assert admin.export(namespace, "sft", path, limit=2, history=0, progress=False) == 2

    # Under a snapshot the file is the same bytes later, whatever arrived since.
    post(admin, f"/v1/namespaces/{namespace}/snapshots", {"id": "s1"})
    first, second = tmp_path / "a.parquet", tmp_path / "b.parquet"
    admin.export(namespace, "sft", first, format="parquet", snapshot="s1", progress=False)
    admin.create_trajectory(
        namespace, task="find the key", steps=[{"state": HALL, "action": "x"}], outcome={"success": True}
    )
    admin.export(namespace, "sft", second, format="parquet", snapshot="s1", progress=False)
    assert first.read_bytes() == second.read_bytes()
    assert admin.export(namespace, "sft", path, progress=False) == 4  # live: the new one too

    capsys.readouterr()
    admin.export(namespace, "sft", path)  # progress=True by default: a tqdm bar on stderr
    assert "rows" in capsys.readouterr().err
    admin.export(namespace, "sft", tmp_path / "p.parquet", format="parquet")
    assert "B" in capsys.readouterr().err


def test_errors_come_before_any_file(admin: Client, live_server: Any, namespace: str, tmp_path: Path) -> None:
    path = tmp_path / "never.jsonl"
    with pytest.raises(errors.NotFound) as caught:
        admin.export(namespace, "sft", path, snapshot="nope", progress=False)
    assert caught.value.field == "snapshot"
    with pytest.raises(errors.InvalidInput) as invalid:
        admin.export(namespace, "sft", path, limit=10**12, progress=False)
    assert invalid.value.field == "limit" and invalid.value.status == 422
    with pytest.raises(errors.InvalidInput) as local:  # refused before sending
        admin.export(namespace, "sft", path, colour="blue", progress=False)
    assert local.value.field == "colour" and local.value.status == 422
    with pytest.raises(errors.InvalidInput):
        admin.export(namespace, "dpo", path, progress=False)  # type: ignore[arg-type]
    agent = admin.create_key("agent", [namespace])
    with Client(live_server.url, agent.key) as client, pytest.raises(errors.Forbidden):
        client.export(namespace, "sft", path, progress=False)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.anyio
async def test_async_export(live_server: Any, namespace: str, tmp_path: Path) -> None:
    async with AsyncClient(live_server.url, live_server.admin_key, namespace=namespace) as client:
        assert await client.export(None, "attempts", tmp_path / "a.jsonl", progress=False) == 1
        size = await client.export(None, "preferences", tmp_path / "p.parquet", format="parquet", progress=False)
        with pytest.raises(errors.NotFound):
            await client.export(None, "sft", tmp_path / "x.jsonl", snapshot="nope", progress=False)
    (row,) = lines(tmp_path / "a.jsonl")
    assert (row["first"]["id"], row["next"]["id"], row["improved"]) == ("lost", "retry", True)
    table = pq.read_table(io.BytesIO((tmp_path / "p.parquet").read_bytes()))
    assert size == (tmp_path / "p.parquet").stat().st_size and table.num_rows == 1
    assert not (tmp_path / "x.jsonl").exists()


def test_export_route_and_parameters_exist_in_the_servers_openapi(live_server: Any) -> None:
    download = operations.export_dataset("nsx", "sft", "jsonl", {})
    openapi = httpx.get(f"{live_server.url}/openapi.json").json()
    route = openapi["paths"][download.path.replace("/nsx/", "/{ns}/")]["get"]
    known = {p["name"] for p in route["parameters"] if p["in"] == "query"}
    assert known == operations.EXPORT_FILTERS | {"dataset", "format"}
    schema = {p["name"]: p["schema"] for p in route["parameters"]}
    assert set(schema["dataset"]["enum"]) == set(operations.EXPORT_DATASETS)
    assert set(schema["format"]["enum"]) == set(operations.EXPORT_FORMATS)
    assert set(route["responses"]["200"]["content"]) == {"application/x-ndjson", "application/vnd.apache.parquet"}
    # Both clients take the same arguments.
    assert inspect.signature(Client.export) == inspect.signature(AsyncClient.export)
