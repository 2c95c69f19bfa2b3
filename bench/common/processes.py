"""Real server and worker processes for a benchmark: `uvicorn` serving the app and
`reflexa worker`, each in a process group of its own, on free ports, with data
directories and logs under the run's work directory (never in the repository).

Everything started here is also stopped here: the context managers SIGTERM the whole
process group on exit and SIGKILL what is left after a grace period, so an
interrupted run leaves nothing listening.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from bench import REPO

# The ONNX export of the packaged model, made once and linked into every server's and
# worker's data directory (each would otherwise export its own on first start).
MODELS_DIR = REPO / "bench" / "results" / "retrieval" / "models"
OFFLINE_ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Server:
    url: str
    process: subprocess.Popen[bytes]
    workers: int
    log: Path

    @property
    def pid(self) -> int:
        return self.process.pid


def wait_healthy(proc: subprocess.Popen[bytes], url: str, log: Path, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
        try:
            if httpx.get(url + "/healthz", timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"server not healthy after {timeout:.0f} s:\n{log.read_text()[-3000:]}")


def stop_group(proc: subprocess.Popen[bytes], grace_s: float = 10.0) -> None:
    """SIGTERM the process's whole group (uvicorn workers included), then SIGKILL
    whatever is still there after `grace_s`."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=grace_s)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)


@contextlib.contextmanager
def server(
    database_url: str,
    admin_key: str,
    work_dir: Path,
    *,
    workers: int = 1,
    env: dict[str, str] | None = None,
    app: str = "service.app:create_app",
) -> Iterator[Server]:
    """A real uvicorn process serving the app, configured like `reflexa serve`
    (no access log, warnings only), on a free port, in a process group of its own.
    Its data directory and log are under `work_dir`, never in the repository; `env`
    adds settings (REFLEXA_…); `app` is another factory, for experiments only."""
    port = free_port()
    data_dir = share_models(work_dir / f"data-{port}")
    env = {
        **os.environ,
        **OFFLINE_ENV,
        "REFLEXA_DATA_DIR": str(data_dir),
        **(env or {}),
        "REFLEXA_DATABASE_URL": database_url,
        "REFLEXA_ADMIN_KEY": admin_key,
    }
    cmd = [
        sys.executable,
        "-m",
        "uvicorn",
        app,
        "--factory",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--log-level",
        "warning",
        "--no-access-log",
    ]
    if workers > 1:
        cmd += ["--workers", str(workers)]
    log = work_dir / f"server-{port}.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, env=env, cwd=REPO, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        url = f"http://127.0.0.1:{port}"
        wait_healthy(proc, url, log)
        yield Server(url=url, process=proc, workers=workers, log=log)
    finally:
        stop_group(proc)


def share_models(data_dir: Path) -> Path:
    """Create a data directory whose `models` is the shared ONNX export."""
    data_dir.mkdir(parents=True, exist_ok=True)
    models = data_dir / "models"
    if not models.exists():
        MODELS_DIR.mkdir(parents=True, exist_ok=True)
        models.symlink_to(MODELS_DIR.resolve(), target_is_directory=True)
    return data_dir


@contextlib.contextmanager
def workers(
    database_url: str, work_dir: Path, *, processes: int, concurrency: int, env: dict[str, str] | None = None
) -> Iterator[list[subprocess.Popen[bytes]]]:
    """`processes` × `reflexa worker --concurrency N` against one database, each in a
    process group of its own, logs under `work_dir`; stopped (SIGTERM, then SIGKILL)
    on exit."""
    reflexa = Path(sys.executable).with_name("reflexa")
    cmd = [str(reflexa) if reflexa.exists() else "reflexa", "worker", "--concurrency", str(concurrency)]
    data_dir = share_models(work_dir / "worker-data")
    env = {**os.environ, **OFFLINE_ENV, "REFLEXA_DATA_DIR": str(data_dir), **(env or {})}
    env["REFLEXA_DATABASE_URL"] = database_url
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for i in range(processes):
            with open(work_dir / f"worker-{i}-{uuid.uuid4().hex[:6]}.log", "wb") as out:
                procs.append(
                    subprocess.Popen(
                        cmd, env=env, cwd=REPO, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
                    )
                )
        yield procs
    finally:
        for proc in procs:
            stop_group(proc)


def proc_memory_mb(pid: int) -> tuple[float, float]:
    """(VmRSS, VmHWM) of a process in MB."""
    out = {"VmRSS": float("nan"), "VmHWM": float("nan")}
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            key, _, value = line.partition(":")
            if key in out:
                out[key] = int(value.split()[0]) / 1024
    return out["VmRSS"], out["VmHWM"]


# The API tier alone. Closing a trajectory queues derived work (embedding every step
# as an exemplar); an in-process worker would do that work on the same two cores
# and the numbers would measure the embedding model, not ingest. So the worker is
# off (jobs wait in the queue, as for a deployment with separate workers) and the
# embedder is the model-free one, which ingest never calls anyway.
API_ONLY_ENV = {"REFLEXA_WORKER__IN_PROCESS": "false", "REFLEXA_EMBEDDING__BACKEND": "hashing"}


def server_env_overrides() -> dict[str, str]:
    """REFLEXA_* settings in this environment: the servers inherit them."""
    return {k: v for k, v in sorted(os.environ.items()) if k.startswith("REFLEXA_")}


def embedder(threads: int, batch_size: int = 64, idle_threads: int = 0) -> Any:
    """The server's default embedder, no cache: the ONNX export of the packaged model,
    exported once into bench/results/retrieval/models and shared with the servers
    (`idle_threads`: store/embedding/onnx.py)."""
    from store.embedding import build_embedder

    return build_embedder(
        "onnx", cache_dir=MODELS_DIR, threads=threads, idle_threads=idle_threads, batch_size=batch_size, cache_size=0
    )


def server_embedder() -> Any:
    """The encoder a server builds on its default settings (`embedding.threads` and
    `embedding.idle_threads`, or their REFLEXA_EMBEDDING__* overrides), no cache:
    the floors' encoder, so that a floor encodes as the server does."""
    from service.settings import Settings

    settings = Settings().embedding  # read from the environment as a server reads it
    return embedder(threads=settings.threads, idle_threads=settings.idle_threads)
