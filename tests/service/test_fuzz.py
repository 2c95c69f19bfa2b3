"""Schema-driven fuzzing: schemathesis against the live OpenAPI of a real server,
every v1 route, stateful where the schema links operations, on SQLite and
PostgreSQL, with a key of each role and an admin key of another namespace. Checks:
no 5xx; every status code documented; every answer (errors included, in their one
shape) valid against its documented schema, content type and headers; 405 with the
right Allow header. A small budget here (`FUZZ_EXAMPLES`, default 3 per operation);
the long run is `python -m bench.fuzz` (docs/reliability.md)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import ADMIN_KEY, LiveServer, start_server

CHECKS = ",".join(
    [
        "not_a_server_error",
        "status_code_conformance",
        "content_type_conformance",
        "response_schema_conformance",
        "response_headers_conformance",
        "unsupported_method",
    ]
)
EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "3"))
SCHEMATHESIS = shutil.which("schemathesis") or shutil.which("st")
# The per-key limits would answer most of a fuzzer's burst with (documented) 429s.
UNLIMITED = {"REFLEXA_LIMITS__REQUESTS_PER_SECOND_PER_KEY": "0", "REFLEXA_LIMITS__MAX_CONCURRENT_REQUESTS_PER_KEY": "0"}


@pytest.fixture
def fuzz_server(database_url: str, tmp_path: Path) -> Iterator[LiveServer]:
    server = start_server(database_url, tmp_path, env=UNLIMITED, log=tmp_path / "server.log")
    admin = {"Authorization": f"Bearer {ADMIN_KEY}"}
    for ns in ("proj", "elsewhere"):
        assert httpx.post(f"{server.url}/v1/namespaces", json={"name": ns}, headers=admin).status_code == 201
    step = {"state": {"observation": "a hall"}, "action": "go north"}
    body = {"id": "open", "task": "t", "steps": [step]}
    assert httpx.post(f"{server.url}/v1/namespaces/proj/trajectories", json=body, headers=admin).status_code == 201
    yield server
    server.stop()


def fuzz(server: LiveServer, key: str, examples: int, out: Path, phases: str | None = None) -> tuple[int, int, str]:
    """(exit code, test cases generated, output). `phases`: schemathesis's (default:
    all of them: examples, coverage of each schema's edges, fuzzing, stateful)."""
    assert SCHEMATHESIS, "schemathesis is a dev dependency (pip install -e '.[dev]')"
    proc = subprocess.run(
        [
            SCHEMATHESIS,
            "run",
            f"{server.url}/openapi.json",
            "--header",
            f"Authorization: Bearer {key}",
            "--checks",
            CHECKS,
            "--max-examples",
            str(examples),
            "--workers",
            "1",
            "--seed",
            "1",
            "--no-color",
            *(["--phases", phases] if phases else []),
        ],
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, "SCHEMATHESIS_HOOKS": ""},
    )
    out.write_text(proc.stdout + proc.stderr)
    generated = re.search(r"(\d+) generated", proc.stdout)
    return proc.returncode, int(generated.group(1)) if generated else 0, proc.stdout[-8000:]


def _key(server: LiveServer, role: str, ns: str) -> str:
    r = httpx.post(
        f"{server.url}/v1/keys",
        json={"role": role, "namespaces": [ns]},
        headers={"Authorization": f"Bearer {ADMIN_KEY}"},
    )
    assert r.status_code == 201, r.text
    return r.json()["key"]


@pytest.mark.slow
def test_the_live_openapi_fuzzed_as_admin_finds_no_5xx_and_no_schema_violation(
    fuzz_server: LiveServer, tmp_path: Path
) -> None:
    code, generated, output = fuzz(fuzz_server, ADMIN_KEY, EXAMPLES, tmp_path / "admin.txt")
    assert code == 0, output
    assert generated > 500, output  # every operation was exercised, not skipped


@pytest.mark.slow
@pytest.mark.parametrize(
    "role, ns", [("agent", "proj"), ("trainer", "proj"), ("operator", "proj"), ("admin", "elsewhere")]
)
def test_other_roles_and_another_namespace_get_documented_answers(
    fuzz_server: LiveServer, tmp_path: Path, role: str, ns: str
) -> None:
    key = _key(fuzz_server, role, ns)
    # Random and linked requests only: the edge-coverage phase ran as admin above.
    code, generated, output = fuzz(fuzz_server, key, 2, tmp_path / f"{role}-{ns}.txt", phases="fuzzing,stateful")
    assert code == 0, output
    assert generated > 50, output
    # The server is still itself afterwards.
    assert httpx.get(f"{fuzz_server.url}/healthz").status_code == 200
