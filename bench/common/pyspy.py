"""Where a server's CPU goes: record py-spy profiles and sum them into buckets.

The server is one Python process whose threads share the GIL, so what limits its
throughput is GIL-held time. Profiles are therefore taken with `py-spy record --gil`
(only the thread holding the GIL is sampled), in py-spy's raw collapsed-stack format.

Each sample is charged to one bucket: the innermost frame on its stack that names
a bucket wins, so a JSON encoder called while binding step rows is charged to
"insert steps", and pydantic validation of the request body to "validate body",
although both also sit under the request's outer frames. py-spy must be installed
(`pip install py-spy`) and allowed to ptrace the server.
"""

from __future__ import annotations

import contextlib
import shutil
import signal
import subprocess
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

# (bucket, function qualnames as py-spy prints them). Listed roughly in request order.
BUCKETS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("event loop: ASGI middleware, routing, FastAPI plumbing", ("Runner.run",)),
    (
        "uvicorn: parse HTTP, receive body, write response",
        ("HttpToolsProtocol.data_received", "RequestResponseCycle.send"),
    ),
    ("read body + json.loads (event loop)", ("Request.json", "Request.body")),
    ("validate body: pydantic StepCreate ×50 (event loop)", ("request_body_to_args",)),
    ("dependencies: auth, services (threadpool hop)", ("solve_dependencies",)),
    ("threadpool hand-off (both sides)", ("run_in_threadpool", "WorkerThread.run", "WorkerThread._report_result")),
    ("limit checks: regex + JSON walk per step", ("LimitChecker.steps", "LimitChecker.trajectory")),
    ("step content hashing: model_dump + orjson + sha256", ("_step_hash",)),
    ("SQL: select trajectory (FOR UPDATE)", ("get_trajectory", "get_trajectories_by_ids", "get_step_hashes")),
    ("SQL: insert steps (ORM bulk insert, executemany)", ("insert_steps",)),
    ("SQL: insert trajectory", ("insert_trajectories",)),
    ("SQL: update trajectory step_count / outcome", ("set_trajectory_fields",)),
    ("SQL: enqueue job (close)", ("enqueue_job",)),
    ("commit", ("SessionTransaction.commit",)),
    ("unit of work: session, begin, connection checkout", ("Database.write", "Database.run_write")),
    ("build response model", ("written", "StepsAppended.__init__")),
    ("serialize response", ("serialize_response",)),
    ("endpoint code (rest)", ("append_steps", "create_trajectory", "close_trajectory")),
)
RATE_HZ = 200
_BY_NAME = {name: bucket for bucket, names in BUCKETS for name in names}
OTHER = "other"


def _function(frame: str) -> str:
    """'Session.execute (sqlalchemy/orm/session.py:2555)' -> 'Session.execute'."""
    return frame.split(" (", 1)[0]


def bucket_of(frames: list[str]) -> str:
    for frame in reversed(frames):
        bucket = _BY_NAME.get(_function(frame))
        if bucket is not None:
            return bucket
    return OTHER


def summarise(raw: Path) -> tuple[int, dict[str, int]]:
    """(total samples, samples per bucket) of a py-spy raw file, biggest bucket first."""
    counts: Counter[str] = Counter()
    for line in raw.read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        if not stack or not n.isdigit():
            continue
        frames = [f for f in stack.split(";") if not f.startswith(("process ", "thread "))]
        counts[bucket_of(frames)] += int(n)
    return sum(counts.values()), dict(counts.most_common())


def markdown_table(raw: Path, *, rate: int, window_s: float, requests: int) -> str:
    """Buckets as a markdown table, in share of GIL-held samples and in GIL-held ms per
    request (samples / rate / requests answered in the window)."""
    total, counts = summarise(raw)
    per_request = 1000 / rate / max(requests, 1)
    lines = [
        f"GIL held {total / rate / window_s:.0%} of the {window_s:.0f} s window "
        f"({total:,} samples at {rate} Hz, {requests:,} requests answered).",
        "",
        "| where | share of GIL-held samples | GIL ms per request |",
        "|---|---:|---:|",
    ]
    for bucket, n in counts.items():
        lines.append(f"| {bucket} | {n / max(total, 1):.1%} | {n * per_request:.2f} |")
    lines.append(f"| total | 100% | {total * per_request:.2f} |")
    return "\n".join(lines)


def available() -> bool:
    return shutil.which("py-spy") is not None


@contextlib.contextmanager
def record(pid: int, out: Path, *, rate: int = RATE_HZ) -> Iterator[None]:
    """Sample `pid` (and its worker processes) while the block runs; SIGINT makes
    py-spy write its file and exit."""
    cmd = [
        "py-spy",
        "record",
        "--pid",
        str(pid),
        "--subprocesses",
        "--gil",
        "--threads",
        "--rate",
        str(rate),
        "--format",
        "raw",
        "--output",
        str(out),
    ]
    with open(out.with_suffix(".log"), "wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    try:
        yield
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
