"""Start a throwaway Reflexa (``reflexa serve``) for an experiment or the demo.

A subprocess on a temporary data directory and a free port, with an admin key we
choose, so nothing on the machine is touched and nothing outlives the run. It uses
the server's real defaults (SQLite, the ONNX MiniLM embedder, the in-process
worker), which is what the experiments are meant to measure.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class EmbeddedServer:
    """``with EmbeddedServer() as server: Client(server.url, api_key=server.admin_key)``."""

    def __init__(
        self,
        *,
        data_dir: Path | None = None,
        env: dict[str, str] | None = None,
        startup_timeout: float = 180.0,
    ) -> None:
        self._own_dir = data_dir is None
        self.data_dir = Path(tempfile.mkdtemp(prefix="reflexa-example-")) if data_dir is None else data_dir
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.admin_key = "rfx_example_" + secrets.token_hex(16)
        self.log_path = self.data_dir / "server.log"
        self._extra_env = env or {}
        self._startup_timeout = startup_timeout
        self._process: subprocess.Popen[bytes] | None = None

    def start(self) -> EmbeddedServer:
        # A terminated run must still stop its server: turn SIGTERM into SystemExit so
        # `finally` / `with` blocks run (only from the main thread, where signals land).
        if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
            with contextlib.suppress(ValueError):
                signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
        self.data_dir.mkdir(parents=True, exist_ok=True)
        env = {
            **os.environ,
            "REFLEXA_DATA_DIR": str(self.data_dir),
            "REFLEXA_ADMIN_KEY": self.admin_key,
            "HF_HUB_OFFLINE": "1",  # the packaged model only: never reach for a hub
            **self._extra_env,
        }
        # `python -m reflexa.cli` would need a __main__; the console script may not be on
        # PATH when the venv is not activated, so call its entry point through this interpreter.
        command = [sys.executable, "-c", "import sys; from reflexa.cli import main; sys.exit(main())"]
        command += ["serve", "--host", "127.0.0.1", "--port", str(self.port)]
        with open(self.log_path, "wb") as log:
            self._process = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
        self._wait_ready()
        return self

    def _wait_ready(self) -> None:
        assert self._process is not None
        deadline = time.monotonic() + self._startup_timeout
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise RuntimeError(f"reflexa serve exited with {self._process.returncode}; see {self.log_path}")
            try:
                if httpx.get(self.url + "/healthz", timeout=1).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"reflexa serve was not healthy within {self._startup_timeout:.0f} s; see {self.log_path}")

    def stop(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        self._process = None
        if self._own_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def __enter__(self) -> EmbeddedServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
