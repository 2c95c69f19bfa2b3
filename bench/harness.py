"""What every benchmark needs: throwaway databases, real server processes, CPU
accounting, machine facts, and writing its own section of docs/benchmarks.md.

Everything that starts something also stops it: databases are dropped and server
process groups are killed in `finally` blocks, so an interrupted run leaves
nothing listening and no `reflexa_bench_*` database behind.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import platform
import re
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path

import httpx
from sqlalchemy import Engine, create_engine, text
from sqlalchemy.engine import make_url

REPO = Path(__file__).resolve().parents[1]
# The ONNX export of the packaged model, made once and linked into every server's and
# worker's data directory (each would otherwise export its own on first start).
MODELS_DIR = REPO / "bench" / "results" / "retrieval" / "models"
OFFLINE_ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
PG_ADMIN_URL = os.environ.get("REFLEXA_BENCH_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres")
BENCH_PACKAGES = ("fastapi", "uvicorn", "starlette", "pydantic", "sqlalchemy", "psycopg", "httpx", "orjson")
_CLK_TCK = os.sysconf("SC_CLK_TCK")


# -- databases -----------------------------------------------------------------


class Databases:
    """Hands out empty databases of one engine and removes them all at close().

    SQLite files live in one temporary directory; PostgreSQL databases are created
    as `reflexa_bench_<random>` on the server at PG_ADMIN_URL and dropped WITH (FORCE)
    so a connection a killed server left behind cannot keep one alive.
    """

    def __init__(self) -> None:
        self._tmp = Path(tempfile.mkdtemp(prefix="reflexa_bench_"))
        self._pg_names: list[str] = []
        self._pg_admin: Engine | None = None

    def sqlite(self, name: str) -> str:
        return f"sqlite:///{self._tmp / (name + '.db')}"

    def postgres(self, template: str | None = None) -> str:
        if self._pg_admin is None:
            self._pg_admin = create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
        name = f"reflexa_bench_{uuid.uuid4().hex[:10]}"
        with self._pg_admin.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{name}"' + (f' TEMPLATE "{template}"' if template else "")))
        self._pg_names.append(name)
        return make_url(PG_ADMIN_URL).set(database=name).render_as_string(hide_password=False)

    def url(self, backend: str, name: str) -> str:
        return self.sqlite(name) if backend == "sqlite" else self.postgres()

    def copy(self, url: str, name: str) -> str:
        """A new database with the contents of `url`, which nothing may be connected to
        (PostgreSQL copies it as a template; SQLite copies the file and its WAL)."""
        if url.startswith("sqlite"):
            source, target = Path(make_url(url).database or ""), self._tmp / (name + ".db")
            for suffix in ("", "-wal"):
                if Path(f"{source}{suffix}").exists():
                    shutil.copyfile(f"{source}{suffix}", f"{target}{suffix}")
            return f"sqlite:///{target}"
        return self.postgres(template=make_url(url).database)

    def close(self) -> None:
        try:
            if self._pg_admin is not None:
                with self._pg_admin.connect() as conn:
                    for name in self._pg_names:
                        conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
                self._pg_admin.dispose()
        finally:
            shutil.rmtree(self._tmp, ignore_errors=True)


@contextlib.contextmanager
def databases() -> Iterator[Databases]:
    dbs = Databases()
    try:
        yield dbs
    finally:
        dbs.close()


# -- server processes -----------------------------------------------------------


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


# -- CPU accounting ---------------------------------------------------------------


@dataclass(frozen=True)
class _Proc:
    ppid: int
    cpu: float  # utime + stime, seconds
    reaped: float  # cutime + cstime: CPU of its children that have exited and been waited for


def _read_proc(pid: int) -> _Proc | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    f = stat.rsplit(")", 1)[1].split()  # f[0] is field 3 (state) of proc(5)
    return _Proc(ppid=int(f[1]), cpu=(int(f[11]) + int(f[12])) / _CLK_TCK, reaped=(int(f[13]) + int(f[14])) / _CLK_TCK)


def _pids() -> list[int]:
    return [int(e.name) for e in Path("/proc").iterdir() if e.name.isdigit()]


def tree_cpu_seconds(pid: int) -> float:
    """CPU time of a process and its direct children (uvicorn's worker processes)."""
    total = 0.0
    for p in _pids():
        proc = _read_proc(p)
        if proc is not None and (p == pid or proc.ppid == pid):
            total += proc.cpu
    return total


def postgres_backends(database: str) -> dict[int, _Proc]:
    """The PostgreSQL backends connected to `database`, found by their process title
    ('postgres: 15/main: postgres <database> 127.0.0.1(…) idle')."""
    needle = f" {database} ".encode()
    out = {}
    for pid in _pids():
        try:
            title = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if title.startswith(b"postgres:") and needle in title:
            proc = _read_proc(pid)
            if proc is not None:
                out[pid] = proc
    return out


def machine_busy_seconds() -> tuple[float, float]:
    """(busy, total) CPU seconds over all cores since boot, from /proc/stat."""
    parts = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = parts[3] + parts[4]  # idle + iowait
    total = sum(parts[:8])  # guest time is already inside user/nice
    return (total - idle) / _CLK_TCK, total / _CLK_TCK


def machine_busy_pct(seconds: float, cores: int) -> float:
    """How busy the machine is over `seconds`, in % of one core."""
    busy0, total0 = machine_busy_seconds()
    time.sleep(seconds)
    busy1, total1 = machine_busy_seconds()
    return 100 * cores * (busy1 - busy0) / max(total1 - total0, 1e-9)


def wait_for_quiet(cores: int, *, threshold_pct: float = 25.0, max_wait_s: float = 15.0) -> float:
    """Wait (bounded) until other work on the machine stops, so a level is not measured
    while, say, a test suite runs next to it. Returns the last background reading."""
    start = time.monotonic()
    said = -math.inf
    busy = machine_busy_pct(0.5, cores)
    while busy > threshold_pct and time.monotonic() - start < max_wait_s:
        if time.monotonic() - said > 30:
            said = time.monotonic()
            print(
                f"  machine busy ({busy:.0f} % of a core); waiting up to {max_wait_s:.0f} s",
                file=sys.stderr,
                flush=True,
            )
        busy = machine_busy_pct(2.0, cores)
    return busy


@dataclass
class CpuSample:
    """A snapshot to subtract from a later one: this process, the server's process
    tree, the PostgreSQL backends of its database (and what their postmaster has
    reaped, so backends that exit mid-window still count), the whole machine."""

    at: float
    own: float
    server: float
    pg_backends: dict[int, float]
    pg_reaped: tuple[int, float] | None  # (postmaster pid, its children's reaped CPU)
    machine_busy: float
    machine_total: float

    @classmethod
    def take(cls, server_pid: int | None, pg_database: str | None) -> CpuSample:
        backends = postgres_backends(pg_database) if pg_database else {}
        reaped = None
        if backends:
            postmaster_pid = next(iter(backends.values())).ppid
            postmaster = _read_proc(postmaster_pid)
            reaped = (postmaster_pid, postmaster.reaped) if postmaster else None
        busy, total = machine_busy_seconds()
        return cls(
            at=time.perf_counter(),
            own=time.process_time(),
            server=tree_cpu_seconds(server_pid) if server_pid else 0.0,
            pg_backends={pid: proc.cpu for pid, proc in backends.items()},
            pg_reaped=reaped,
            machine_busy=busy,
            machine_total=total,
        )


def _postgres_cpu(a: CpuSample, b: CpuSample) -> float:
    live = sum(cpu - a.pg_backends.get(pid, 0.0) for pid, cpu in b.pg_backends.items())
    exited = 0.0
    if a.pg_reaped and b.pg_reaped and a.pg_reaped[0] == b.pg_reaped[0]:
        # Every backend reaped in the window, whichever database: exact on a quiet machine.
        exited = b.pg_reaped[1] - a.pg_reaped[1]
    return live + exited


@dataclass
class CpuUse:
    """Average use over a window, in % of ONE core (so 2 cores fully busy = 200 %).
    `other` is the machine minus the three we account for: PostgreSQL's shared
    background processes, the kernel, and anything else running at the time.
    `pg_connections_opened` / `_closed` count backends of the database there at the end
    but not the start, and the reverse: connections the server's pool opened and
    closed during the window (ones that came and went in between are not seen)."""

    client_pct: float
    server_pct: float
    postgres_pct: float
    other_pct: float
    machine_pct: float
    server_cpu_s: float
    pg_connections_opened: int
    pg_connections_closed: int

    @classmethod
    def between(cls, a: CpuSample, b: CpuSample, cores: int) -> CpuUse:
        wall = max(b.at - a.at, 1e-9)
        client = 100 * (b.own - a.own) / wall
        server = 100 * (b.server - a.server) / wall
        postgres = 100 * _postgres_cpu(a, b) / wall
        machine = 100 * cores * (b.machine_busy - a.machine_busy) / max(b.machine_total - a.machine_total, 1e-9)
        return cls(
            client_pct=client,
            server_pct=server,
            postgres_pct=postgres,
            other_pct=max(machine - client - server - postgres, 0.0),
            machine_pct=machine,
            server_cpu_s=b.server - a.server,
            pg_connections_opened=len(b.pg_backends.keys() - a.pg_backends.keys()),
            pg_connections_closed=len(a.pg_backends.keys() - b.pg_backends.keys()),
        )


# -- statistics ---------------------------------------------------------------------


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (no interpolation: p99 is a latency some request really had)."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered), max(1, math.ceil(q / 100 * len(ordered)))) - 1]


@dataclass
class Latency:
    n: int
    p50_ms: float
    p95_ms: float
    p99_ms: float
    mean_ms: float
    max_ms: float = float("nan")

    @classmethod
    def of(cls, seconds: list[float]) -> Latency:
        ms = [s * 1000 for s in seconds]
        mean = sum(ms) / len(ms) if ms else 0.0
        return cls(len(ms), percentile(ms, 50), percentile(ms, 95), percentile(ms, 99), mean, max(ms, default=math.nan))


# -- machine facts -----------------------------------------------------------------


def _cpu_model() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def _ram_gib() -> float:
    with contextlib.suppress(OSError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) / 1024**2
    return 0.0


def _postgres_version() -> str:
    try:
        engine = create_engine(PG_ADMIN_URL)
        try:
            with engine.connect() as conn:
                return str(conn.execute(text("SHOW server_version")).scalar())
        finally:
            engine.dispose()
    except Exception as exc:  # the facts block must not stop a SQLite-only run
        return f"unavailable ({type(exc).__name__})"


def _package_version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "not installed"


def code_version() -> str:
    """The commit measured, and whether the working tree differed from it (and where)."""
    try:
        commit = subprocess.run(
            ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
        status = subprocess.run(
            ["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.splitlines()
    except (OSError, subprocess.CalledProcessError):
        return "not a git checkout"
    changed = sorted(line[3:] for line in status)
    if not changed:
        return f"commit {commit}"
    shown = ", ".join(changed[:6]) + (f" and {len(changed) - 6} more" if len(changed) > 6 else "")
    return f"commit {commit} with uncommitted changes to {shown}"


@dataclass
class MachineFacts:
    date: str
    code: str
    cores: int
    cpu_model: str
    ram_gib: float
    kernel: str
    python: str
    sqlite: str
    postgres: str
    packages: dict[str, str] = field(default_factory=dict)

    @classmethod
    def collect(cls, with_postgres: bool = True) -> MachineFacts:
        return cls(
            date=datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
            code=code_version(),
            cores=os.cpu_count() or 1,
            cpu_model=_cpu_model(),
            ram_gib=round(_ram_gib(), 1),
            kernel=platform.release(),
            python=platform.python_version(),
            sqlite=sqlite3.sqlite_version,
            postgres=_postgres_version() if with_postgres else "not used",
            packages={name: _package_version(name) for name in BENCH_PACKAGES},
        )

    def markdown(self) -> str:
        pkgs = ", ".join(f"{k} {v}" for k, v in self.packages.items())
        return "\n".join(
            [
                f"- Date: {self.date}; code: {self.code}",
                f"- Machine: {self.cores} cores ({self.cpu_model}), {self.ram_gib} GiB RAM, Linux {self.kernel}",
                f"- Python {self.python}, SQLite {self.sqlite}, PostgreSQL {self.postgres} (same machine)",
                f"- Packages: {pkgs}",
            ]
        )


# -- docs/benchmarks.md -------------------------------------------------------------

DOC_HEADER = """# Benchmarks

Measured results of the benchmarks in `bench/`, with the machine and the code they ran
on. Each benchmark writes and replaces only its own section, between
`<!-- bench:NAME:start -->` and `<!-- bench:NAME:end -->`; text outside the markers is
written by hand and kept. Numbers are from one machine at one time: compare rows of
the same run, and re-run before comparing against a change.

Run every benchmark (from the repository root, server dependencies installed,
PostgreSQL reachable at `REFLEXA_BENCH_PG_URL`, default
`postgresql+psycopg://postgres@127.0.0.1:5432/postgres`, which may create and drop
`reflexa_bench_*` databases):

    python -m bench                 # ingest, retrieval, reflect: full runs, updates docs/benchmarks.md
    python -m bench --quick         # smoke runs, into a temporary file

or one: `python -m bench.ingest --out docs/benchmarks.md`.
"""


def add_out_option(parser: argparse.ArgumentParser, section: str, without: str) -> None:
    """The `--out` every benchmark takes: markdown files get their section replaced,
    JSON files the raw results; `without` says what happens when none is given."""
    parser.add_argument(
        "--out",
        action="append",
        default=[],
        type=Path,
        help=f"a .md file (its {section} section is replaced) or a .json file; repeatable. {without}",
    )


def write_section(path: Path, name: str, body: str) -> None:
    """Replace the `name` section of a markdown file (append it when missing;
    create the file with DOC_HEADER when it does not exist)."""
    start, end = f"<!-- bench:{name}:start -->", f"<!-- bench:{name}:end -->"
    block = f"{start}\n{body.strip()}\n{end}"
    doc = path.read_text() if path.exists() else DOC_HEADER
    pattern = re.compile(re.escape(start) + r".*?" + re.escape(end), re.DOTALL)
    if pattern.search(doc):
        doc = pattern.sub(lambda _: block, doc, count=1)
    else:
        doc = doc.rstrip("\n") + "\n\n" + block + "\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(doc)
