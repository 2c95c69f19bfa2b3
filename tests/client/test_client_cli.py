"""The ``reflexa`` command: ingest (per-line errors, replays, splitting refused
batches), namespaces, and subcommands added by installed plugins."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from fake_reflexa import NOW, FakeReflexa, MakeClient
from reflexa import cli
from reflexa.cli import _connection, ingest

STEP = {"state": {"observation": "o"}, "action": "a"}


@pytest.fixture
def use_fake(monkeypatch: pytest.MonkeyPatch, make_client: MakeClient, sleeps: list[float]) -> None:
    """Point the CLI's client at the fake server."""
    monkeypatch.setattr(ingest, "client_from_args", lambda args: make_client(max_retries=1))


def write_jsonl(path: Path, lines: list[Any]) -> Path:
    path.write_text("\n".join(line if isinstance(line, str) else json.dumps(line) for line in lines) + "\n")
    return path


def run(*argv: str) -> int:
    return cli.main(list(argv))


def test_ingest_reports_bad_lines_by_number_and_stores_the_rest(
    tmp_path: Path, fake: FakeReflexa, use_fake: None, capsys: pytest.CaptureFixture[str]
) -> None:
    fake.trajectories["taken"] = {
        "namespace": "ns1",
        "request": {"id": "taken", "task": "x"},
        "steps": [],
        "outcome": None,
    }
    source = write_jsonl(
        tmp_path / "in.jsonl",
        [
            {"task": "one", "steps": [STEP]},  # 1
            '{"task": "broken",',  # 2: malformed JSON
            {"task": "three", "outcome": {"success": True}},  # 3
            {"steps": [STEP]},  # 4: no task (refused locally)
            "",  # 5: blank, skipped
            {"id": "taken", "task": "different"},  # 6: id stored with another body
            {"task": "refused by the server"},  # 7: refused by the server
            [1, 2],  # 8: not an object
            {"task": "nine"},  # 9
        ],
    )
    assert run("ingest", str(source), "--namespace", "ns1", "--batch-size", "10") == 1
    out, err = capsys.readouterr()
    assert "line 2: invalid JSON" in err
    assert "line 4: task: Field required" in err
    assert "line 6: id:" in err and "(conflict)" in err
    assert "line 7: task:" in err
    assert "line 8: expected a JSON object" in err
    for good in ("line 1:", "line 3:", "line 9:"):
        assert good not in err
    assert "8 lines: 3 new, 0 replays, 5 failed" in out
    assert {t["request"]["task"] for t in fake.trajectories.values()} == {"x", "one", "three", "nine"}

    # Running it again stores nothing twice: lines without an id got one from their content.
    assert run("ingest", str(source), "--namespace", "ns1") == 1
    out, _ = capsys.readouterr()
    assert "8 lines: 0 new, 3 replays, 5 failed" in out
    assert len(fake.trajectories) == 4


def test_a_clean_ingest_exits_zero_and_shows_progress(
    tmp_path: Path, fake: FakeReflexa, use_fake: None, capsys: pytest.CaptureFixture[str]
) -> None:
    source = write_jsonl(tmp_path / "in.jsonl", [{"task": f"t{i}", "steps": [STEP]} for i in range(25)])
    assert run("ingest", str(source), "-n", "ns1", "--batch-size", "10", "--progress") == 0
    out, err = capsys.readouterr()
    assert "25 lines: 25 new, 0 replays, 0 failed" in out
    assert "100%" in err and "[####" in err
    assert [len(c.body["trajectories"]) for c in fake.calls] == [10, 10, 5]


def test_identical_lines_in_one_batch_are_replays_and_a_reused_id_is_an_error(
    tmp_path: Path, fake: FakeReflexa, use_fake: None, capsys: pytest.CaptureFixture[str]
) -> None:
    source = write_jsonl(
        tmp_path / "in.jsonl",
        [
            {"task": "same"},
            {"task": "same"},
            {"id": "x", "task": "a"},
            {"id": "x", "task": "b"},
        ],
    )
    assert run("ingest", str(source), "-n", "ns1") == 1
    out, err = capsys.readouterr()
    assert "line 4: id 'x' is used by line 3 with a different body" in err
    assert "4 lines: 2 new, 1 replays, 1 failed" in out


def test_a_batch_refused_as_too_large_is_split(
    tmp_path: Path, fake: FakeReflexa, use_fake: None, capsys: pytest.CaptureFixture[str]
) -> None:
    fake.max_batch_items = 3
    source = write_jsonl(tmp_path / "in.jsonl", [{"task": f"t{i}"} for i in range(10)])
    assert run("ingest", str(source), "-n", "ns1", "--batch-size", "10") == 0
    assert len(fake.trajectories) == 10
    assert "10 lines: 10 new" in capsys.readouterr().out


def test_an_unreachable_server_stops_the_ingest_with_a_hint(
    tmp_path: Path, fake: FakeReflexa, use_fake: None, capsys: pytest.CaptureFixture[str]
) -> None:
    fake.raise_(httpx.ConnectError("refused"), times=2)
    source = write_jsonl(tmp_path / "in.jsonl", [{"task": "t"}])
    assert run("ingest", str(source), "-n", "ns1") == 1
    assert "running the same command again resumes" in capsys.readouterr().err


def test_an_unreadable_file_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run("ingest", str(tmp_path / "missing.jsonl"), "-n", "ns1") == 2
    assert "cannot read" in capsys.readouterr().err


def test_namespaces_commands(
    monkeypatch: pytest.MonkeyPatch, make_client: MakeClient, capsys: pytest.CaptureFixture[str]
) -> None:
    sent: list[Any] = []
    namespace = {"name": "prod", "settings": {"gamma": 0.5}, "created_at": NOW}

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(json.loads(request.content) if request.content else None)
        if request.method == "POST":
            return httpx.Response(201, json=namespace)
        return httpx.Response(200, json={"items": [namespace], "next_cursor": None})

    monkeypatch.setattr(_connection, "Client", lambda url, key: make_client(handler))
    assert run("namespaces", "create", "prod", "--gamma", "0.5") == 0
    assert sent == [{"name": "prod", "settings": {"gamma": 0.5}}]
    assert run("namespaces", "list") == 0
    lines = capsys.readouterr().out.splitlines()
    assert [json.loads(line)["name"] for line in lines] == ["prod", "prod"]


def test_no_command_prints_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert run() == 2
    assert "ingest" in capsys.readouterr().err


class FakeEntryPoint:
    def __init__(self, value: str, register: Any) -> None:
        self.value = value
        self._register = register

    def load(self) -> Any:
        return self._register


def test_plugins_add_subcommands_and_a_broken_one_only_warns(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
        hello = subparsers.add_parser("hello")
        hello.add_argument("--times", type=int, default=1)
        hello.set_defaults(func=lambda args: print("hi " * args.times) or 7)

    def broken(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
        raise ImportError("needs a server dependency")

    plugins = [FakeEntryPoint("good:register", register), FakeEntryPoint("bad:register", broken)]
    monkeypatch.setattr(cli, "entry_points", lambda group: plugins if group == cli.PLUGIN_GROUP else [])
    assert run("hello", "--times", "2") == 7
    out, err = capsys.readouterr()
    assert out.strip() == "hi hi"
    assert "'bad:register' not loaded: needs a server dependency" in err
