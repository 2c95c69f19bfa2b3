"""docs/architecture.md names every package: each top-level package, each package
inside the server's top-level packages and each module directly in them. A new
domain or module fails here until the page says where it sits."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DOC = (REPO / "docs" / "architecture.md").read_text()
SERVER = ("service", "store", "domain", "reflectors")
# every folder of the repository but the prose and hidden ones; what git ignores
# (build output, test-artifacts/, a virtualenv) is not part of the tree
NOT_CODE = {"docs"}
_LISTED = subprocess.run(
    ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
    cwd=REPO,
    capture_output=True,
    text=True,
    check=True,
).stdout.splitlines()
TOP_LEVEL = sorted(
    {top for top, _, rest in (path.partition("/") for path in _LISTED) if rest and not top.startswith((".", "_"))}
    - NOT_CODE
)


def _packages() -> list[str]:
    return sorted(
        f"{path.parent.name}/"
        for top in SERVER
        for path in (REPO / top).rglob("__init__.py")
        if path.parent != REPO / top and "__pycache__" not in path.parts
    )


def _modules() -> list[str]:
    return sorted(path.name for top in SERVER for path in (REPO / top).glob("*.py") if path.name != "__init__.py")


def test_the_scan_finds_the_tree() -> None:
    assert "distill/" in _packages() and "trajectory_reader.py" in _modules()
    assert {*SERVER, "migrations", "clients", "bench", "examples", "tests"} <= set(TOP_LEVEL)


@pytest.mark.parametrize("name", [f"{top}/" for top in TOP_LEVEL])
def test_every_top_level_package_is_named(name: str) -> None:
    assert name in DOC, f"docs/architecture.md does not name {name}"


@pytest.mark.parametrize("name", _packages())
def test_every_package_is_named(name: str) -> None:
    assert name in DOC, f"docs/architecture.md does not name the package {name}"


@pytest.mark.parametrize("name", _modules())
def test_every_module_is_named(name: str) -> None:
    assert name in DOC, f"docs/architecture.md does not name {name}"
