"""The benchmarks use only public names of the server packages: no `from service.x
import _y`, no `something._y` on anything but the benchmark's own objects (self,
cls). Where a raw floor needs a server step, the server makes it public; the
benchmark never copies it (docs/benchmarks.md)."""

from __future__ import annotations

import ast
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"
SERVER = ("service", "store", "domain", "reflectors", "migrations")


def _private_uses(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in SERVER:
            found += [f"{path.name}:{node.lineno} {node.module}.{a.name}" for a in node.names if a.name.startswith("_")]
        elif (
            isinstance(node, ast.Attribute)
            and node.attr.startswith("_")
            and not node.attr.startswith("__")
            and not (isinstance(node.value, ast.Name) and node.value.id in {"self", "cls"})
        ):
            found.append(f"{path.name}:{node.lineno} .{node.attr}")
    return found


def test_bench_uses_no_private_server_names() -> None:
    files = sorted(BENCH.rglob("*.py"))
    assert len(files) > 40  # the scan found the suites
    assert [use for path in files for use in _private_uses(path)] == []
