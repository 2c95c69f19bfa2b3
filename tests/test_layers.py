"""Layer rules hold: the import-linter contracts in pyproject.toml pass, they fail
on a deliberate wrong-way import, and the client package installs and imports
without any server dependency."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
LINTER = Path(sys.executable).with_name("lint-imports")
PACKAGES = ("service", "reflectors", "domain", "store", "migrations", "examples", "clients/python/reflexa", "bench")


def lint(cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(cwd)}  # ahead of the editable install's finder
    return subprocess.run([str(LINTER)], cwd=cwd, capture_output=True, text=True, env=env)


def test_import_contracts() -> None:
    result = lint(REPO)
    assert result.returncode == 0, result.stdout + result.stderr


LAYERS = "layers: reflectors > service > domain > store"


@pytest.mark.parametrize(
    ("module", "imports", "contract"),
    [
        ("domain/wrong_way.py", "import service.auth", LAYERS),
        ("service/trajectories/wrong_way.py", "import reflectors.worker", LAYERS),
        ("store/wrong_way.py", "import domain.jobs", LAYERS),
        ("reflectors/wrong_way.py", "import service.deps", "the workers never import the HTTP edge"),
        ("reflectors/wrong_way.py", "import service.rubrics.router", "the workers never import the HTTP edge"),
        ("reflectors/wrong_way.py", "import fastapi", "the workers never import the HTTP edge"),
        ("service/export/wrong_way.py", "import service.distill.repository", "repository: service.distill"),
        ("service/trajectories/wrong_way.py", "import reflectors.repository", "repository: reflectors"),
        ("reflexa/wrong_way.py", "import store.models", "the client never imports server code"),
        (
            "bench/ingest/wrong_way.py",
            "import bench.retrieval.main",
            "bench: the suites are independent (they share bench.common)",
        ),
        ("bench/common/wrong_way.py", "import bench.ingest.main", "bench: no cycles between sibling modules or suites"),
    ],
)
def test_a_wrong_way_import_breaks_a_contract(tmp_path: Path, module: str, imports: str, contract: str) -> None:
    """The contracts are not vacuous: a copy of the tree with one temporary module
    importing the wrong way fails, naming the contract it broke."""
    for package in PACKAGES:
        shutil.copytree(REPO / package, tmp_path / Path(package).name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    assert lint(tmp_path).returncode == 0  # the copy itself is clean
    (tmp_path / module).write_text(f'"""A deliberate wrong-way import."""\n\n{imports}\n')
    result = lint(tmp_path)
    assert result.returncode != 0
    assert f"{contract} BROKEN" in result.stdout, result.stdout


def test_every_repository_is_protected_for_its_own_domain() -> None:
    """A domain's repository (its own queries) has a contract saying that only its
    package imports it: a new domain cannot forget one."""
    import tomllib

    contracts = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    protected = {
        (tuple(c["protected_modules"]), tuple(c["allowed_importers"])) for c in contracts if c["type"] == "protected"
    }
    repositories = sorted(
        ".".join(path.relative_to(REPO).with_suffix("").parts).removesuffix(".__init__")
        for top in ("service", "reflectors", "domain")
        for pattern in ("repository.py", "repository/__init__.py")  # a module, or a package of them
        for path in (REPO / top).rglob(pattern)
    )
    assert repositories  # the scan found the tree
    assert "service.operator.repository" in repositories
    for module in repositories:
        domain = module.rsplit(".", 1)[0]
        assert ((module,), (domain,)) in protected, f"{module} has no protected contract for {domain}"


def test_client_imports_without_server_packages() -> None:
    # Block the server's heavy dependencies and packages; the client must not need them.
    code = (
        "import sys\n"
        "for name in ('service', 'store', 'reflectors', 'domain', 'sqlalchemy', 'fastapi', 'torch', 'faiss'):\n"
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
