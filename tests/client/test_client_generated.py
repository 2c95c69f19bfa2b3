"""The generated parts of the client are current: the committed OpenAPI document is
the live app's, and the generated modules are what the generator writes from it and
from client.py, byte for byte. Each failure names the command that fixes it."""

from __future__ import annotations

import importlib.util
import inspect
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest
from reflexa import AsyncClient, Client

from service.app import create_app
from tests.conftest import make_settings

CLIENT = Path(__file__).resolve().parents[2] / "clients" / "python"
TOOLS = CLIENT / "tools"


def load(name: str) -> ModuleType:
    """A script of clients/python/tools (not a package: loaded by path)."""
    if str(TOOLS) not in sys.path:
        sys.path.insert(0, str(TOOLS))  # generate.py imports its sibling modules
    spec = importlib.util.spec_from_file_location(f"reflexa_tools_{name}", TOOLS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_committed_openapi_is_the_live_apps(tmp_path: Path) -> None:
    export = load("export_openapi")
    live = export.render(create_app(make_settings(f"sqlite:///{tmp_path / 'unused.db'}", tmp_path)).openapi())
    committed = (CLIENT / "openapi.json").read_text(encoding="utf-8")
    if committed != live:
        pytest.fail(
            "clients/python/openapi.json is not the server's OpenAPI document: run "
            "`python clients/python/tools/export_openapi.py && python clients/python/tools/generate.py`"
        )
    assert json.loads(committed)["components"]["schemas"]  # and it is a real document


def test_generated_modules_are_current() -> None:
    generate = load("generate")
    stale = [
        str(path.relative_to(CLIENT))
        for path, text in generate.outputs().items()
        if path.read_text(encoding="utf-8") != text
    ]
    assert not stale, f"{', '.join(stale)} out of date (or edited by hand): run `{generate.COMMAND}`"


def test_generated_modules_say_how_they_are_made() -> None:
    generate = load("generate")
    for path in generate.outputs():
        first = path.read_text(encoding="utf-8").splitlines()[0]
        assert first.startswith("# Generated from ") and generate.COMMAND in first and "do not edit" in first


def test_the_async_client_has_every_public_method_of_the_sync_one() -> None:
    """Except what only the sync client has (the spool and the episode logger)."""
    sync_only = {"flush_spool", "episode", "close"}
    public = {name for name in vars(Client) if not name.startswith("_")} - sync_only
    assert public <= set(vars(AsyncClient))
    for name in public - {"session_token"}:
        method = getattr(AsyncClient, name)
        assert inspect.iscoroutinefunction(method) or inspect.isasyncgenfunction(method), name
        assert inspect.signature(method).parameters.keys() == inspect.signature(getattr(Client, name)).parameters.keys()
    assert inspect.iscoroutinefunction(AsyncClient.aclose)
