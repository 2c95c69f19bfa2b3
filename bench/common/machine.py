"""Facts about what a benchmark ran on, for the top of its section: date, commit (and
uncommitted changes), cores, CPU model, RAM, kernel, Python, SQLite, PostgreSQL and
package versions."""

from __future__ import annotations

import contextlib
import os
import platform
import sqlite3
import subprocess
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path

from sqlalchemy import create_engine, text

from bench import REPO
from bench.common.databases import PG_ADMIN_URL

BENCH_PACKAGES = ("fastapi", "uvicorn", "starlette", "pydantic", "sqlalchemy", "psycopg", "httpx", "orjson")


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
