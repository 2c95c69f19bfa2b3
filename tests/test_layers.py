"""Layer rules hold: the import-linter contracts in pyproject.toml pass, and the
client package installs and imports without any server dependency."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_import_contracts() -> None:
    linter = Path(sys.executable).with_name("lint-imports")
    result = subprocess.run([str(linter)], cwd=REPO, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_client_imports_without_server_packages() -> None:
    # Block the server's heavy dependencies and packages; the client must not need them.
    code = (
        "import sys\n"
        "for name in ('service', 'store', 'reflectors', 'sqlalchemy', 'fastapi', 'torch', 'faiss'):\n"
        "    sys.modules[name] = None\n"
        "import reflexa, reflexa.cli\n"
        "print(reflexa.Client.__name__)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd="/")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "Client"


def test_client_declares_only_httpx_and_pydantic() -> None:
    import tomllib

    meta = tomllib.loads((REPO / "clients/python/pyproject.toml").read_text())
    deps = sorted(d.split(">")[0].split("=")[0].strip() for d in meta["project"]["dependencies"])
    assert deps == ["httpx", "pydantic"]
