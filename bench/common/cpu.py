"""CPU accounting from /proc: a process tree's CPU time, the PostgreSQL backends of a
database, how busy the whole machine is, a bounded wait for it to be quiet, and
CpuSample / CpuUse to split a measured window's CPU between the benchmark, the
server, PostgreSQL and everything else."""

from __future__ import annotations

import math
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

_CLK_TCK = os.sysconf("SC_CLK_TCK")


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


BUSY_OTHER_PCT = 25.0  # "other" CPU above this during a level: the machine was not ours alone
