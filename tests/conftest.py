"""Shared fixtures: real databases (SQLite files and the machine's PostgreSQL, each
test session in databases of its own), the app in-process (with the scripted LLM
server as its LLM, for reflectors and judges), and real uvicorn servers.

PostgreSQL: REFLEXA_TEST_PG_URL (default postgresql+psycopg://postgres@127.0.0.1:5432/postgres)
names an admin connection; every database made from it is dropped at the end.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from migrations import upgrade
from service.app import create_app
from service.container import Services
from service.settings import Settings
from store.database import Database
from store.embedding import Embedder, build_embedder
from tests.factories import CITED_LONG_AGO, CITED_MODEL, add_cited_reflections, make_db
from tests.reflectors.openai_server import ScriptedLLM, serve_scripted_llm

PG_ADMIN_URL = os.environ.get("REFLEXA_TEST_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres")
ADMIN_KEY = "rfx_test_admin_" + uuid.uuid4().hex
REPO = Path(__file__).resolve().parents[1]


class PostgresDatabases:
    """Creates throwaway databases on the PostgreSQL server and drops them later."""

    def __init__(self, admin_url: str) -> None:
        self.admin_url = admin_url
        self.created: list[str] = []
        self._engine = create_engine(admin_url, isolation_level="AUTOCOMMIT")

    def create(self) -> str:
        name = f"reflexa_test_{uuid.uuid4().hex[:12]}"
        with self._engine.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{name}"'))
        self.created.append(name)
        return make_url(self.admin_url).set(database=name).render_as_string(hide_password=False)

    def drop_all(self) -> None:
        with self._engine.connect() as conn:
            for name in self.created:
                conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        self._engine.dispose()


@pytest.fixture(scope="session")
def pg_databases() -> Iterator[PostgresDatabases]:
    try:
        dbs = PostgresDatabases(PG_ADMIN_URL)
        with dbs._engine.connect() as conn:
            conn.execute(text("SELECT 1"))
    except Exception as exc:  # fail loudly: PostgreSQL is part of this machine kind
        pytest.fail(f"PostgreSQL at {PG_ADMIN_URL} is not reachable ({exc}); start it or set REFLEXA_TEST_PG_URL")
    yield dbs
    dbs.drop_all()


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'reflexa.db'}"


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """An empty, migrated database on each engine."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'reflexa.db'}"
    else:
        url = request.getfixturevalue("pg_databases").create()
    upgrade(url)
    return url


def make_settings(database_url: str, tmp_path: Path, **overrides: Any) -> Settings:
    """Test defaults: the model-free hashing embedder (tests that need the real model
    ask for it), no background worker (tests drain the queue when they mean to) and
    no freezing of the objects built at start nor other collector settings."""
    values: dict[str, Any] = {
        "database_url": database_url,
        "data_dir": tmp_path,
        "admin_key": ADMIN_KEY,
        "embedding": {"backend": "hashing"},
        "worker": {"in_process": False},
        # A full collection at every app start (0.1 s with just the app loaded, more as
        # the suite's heap grows; over a thousand starts) would add minutes to the
        # suite; tests/service/test_startup_objects_frozen.py runs the app with it.
        "freeze_startup_objects": False,
        "gc_young_threshold": None,
    }
    values.update(overrides)
    return Settings(**values)


@pytest.fixture
def settings(database_url: str, tmp_path: Path) -> Settings:
    return make_settings(database_url, tmp_path)


def admin_api(settings: Settings) -> TestClient:
    """The app in-process on `settings`, authenticated as admin (enter it: `with`)."""
    return TestClient(create_app(settings), headers={"Authorization": f"Bearer {ADMIN_KEY}"})


@pytest.fixture
def client(settings: Settings) -> Iterator[TestClient]:
    """The app in-process (real database), authenticated as admin."""
    with admin_api(settings) as c:
        yield c


@pytest.fixture
def scripted_llm() -> Iterator[ScriptedLLM]:
    """A running scripted LLM server; the test fails if it left replies unused or
    made a request the script did not foresee."""
    with serve_scripted_llm() as server:
        yield server
        assert server.unused == 0, f"{server.unused} scripted replies were never requested"
        assert server.exhausted == 0, f"{server.exhausted} requests arrived after the script ran out"


@pytest.fixture
def llm_overrides() -> dict[str, Any]:
    """LLM settings a test changes (parametrize this name to override)."""
    return {}


@pytest.fixture
def api_llm(
    database_url: str, tmp_path: Path, scripted_llm: ScriptedLLM, llm_overrides: dict[str, Any]
) -> Iterator[TestClient]:
    """The app on each engine, authenticated as admin, with an LLM configured: the
    scripted server (no retries unless a test overrides them)."""
    llm = {
        "base_url": scripted_llm.url,
        "model": "configured-model",
        "api_key": "sk-test",
        "timeout_seconds": 10.0,
        "max_retries": 0,
        **llm_overrides,
    }
    with admin_api(make_settings(database_url, tmp_path, llm=llm)) as api:
        yield api


@pytest.fixture(scope="module")
def onnx_model(tmp_path_factory: pytest.TempPathFactory) -> Embedder:
    """The real packaged model (all-MiniLM-L6-v2 on ONNX Runtime), loaded once per module."""
    return build_embedder("onnx", cache_dir=tmp_path_factory.mktemp("models"))


@pytest.fixture
def api_onnx(
    database_url: str, tmp_path: Path, onnx_model: Embedder, monkeypatch: pytest.MonkeyPatch
) -> Iterator[TestClient]:
    """The app on each engine with the real model, authenticated as admin."""
    # The app builds its services in the lifespan; hand it the already-loaded model.
    real_build = Services.build
    monkeypatch.setattr(Services, "build", classmethod(lambda cls, s, db: real_build.__func__(cls, s, db, onnx_model)))
    with admin_api(make_settings(database_url, tmp_path)) as api:
        yield api


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class LiveServer:
    url: str
    admin_key: str
    database_url: str
    process: subprocess.Popen[bytes]

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()


def start_server(
    database_url: str,
    data_dir: Path,
    *,
    env: dict[str, str] | None = None,
    log: Path | None = None,
    port: int | None = None,
) -> LiveServer:
    """A real uvicorn process serving the app over HTTP on a free port (or `port`:
    a server brought back where its clients expect it)."""
    port = port or free_port()
    full_env = {
        **os.environ,
        "REFLEXA_DATABASE_URL": database_url,
        "REFLEXA_ADMIN_KEY": ADMIN_KEY,
        "REFLEXA_DATA_DIR": str(data_dir),
        "REFLEXA_EMBEDDING__BACKEND": "hashing",
        "HF_HUB_OFFLINE": "1",
        **(env or {}),
    }
    out = open(log, "wb") if log else subprocess.DEVNULL  # noqa: SIM115 - handed to the child
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "uvicorn",
            "service.app:create_app",
            "--factory",
            "--port",
            str(port),
            "--log-level",
            "warning",
        ],
        env=full_env,
        cwd=REPO,
        stdout=out,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}; log: {log}")
        try:
            if httpx.get(url + "/healthz", timeout=1).status_code == 200:
                return LiveServer(url=url, admin_key=ADMIN_KEY, database_url=database_url, process=proc)
        except httpx.TransportError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError("server did not become healthy within 60 s")


def start_worker(
    database_url: str, data_dir: Path, *, log: Path, args: Sequence[str] = (), env: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """A `reflexa worker` process on the database (hashing embedder), writing to `log`."""
    full_env = {
        **os.environ,
        "REFLEXA_DATABASE_URL": database_url,
        "REFLEXA_DATA_DIR": str(data_dir),
        "REFLEXA_EMBEDDING__BACKEND": "hashing",
        **(env or {}),
    }
    out = open(log, "wb")  # noqa: SIM115 - handed to the child
    command = [str(Path(sys.executable).with_name("reflexa")), "worker", *args]
    return subprocess.Popen(command, env=full_env, stdout=out, stderr=subprocess.STDOUT)


@pytest.fixture(scope="session")
def live_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """One real uvicorn server on SQLite for the whole session (client tests)."""
    root = tmp_path_factory.mktemp("live")
    url = f"sqlite:///{root / 'reflexa.db'}"
    upgrade(url)
    server = start_server(url, root, log=root / "server.log")
    yield server
    server.stop()


@pytest.fixture
def live_server_any(database_url: str, tmp_path: Path) -> Iterator[LiveServer]:
    """A real uvicorn server on each engine (SQLite and PostgreSQL)."""
    server = start_server(database_url, tmp_path, log=tmp_path / "server.log")
    yield server
    server.stop()


@pytest.fixture
def cited_db(database_url: str) -> Iterator[Database]:
    """Namespaces "mem" and "other" holding tests.factories.add_cited_reflections' rows."""
    db = make_db(database_url, "mem", "other")
    yield db
    db.dispose()


@pytest.fixture
def cited_pks(cited_db: Database) -> dict[str, int]:
    """Name -> pk of cited_db's reflections (vectors of CITED_MODEL)."""
    return add_cited_reflections(cited_db, CITED_MODEL, CITED_LONG_AGO)
