"""Shaped advantages and teacher scoring: POST /v1/distill/advantages for 64
trajectories × 2,048 tokens per request, every method, against the same numpy and
the bare JSON in one process; and POST …/distill/teacher_logprobs against the
teacher endpoint's own time.

    python -m bench.advantages [--quick | --smoke] [--out docs/benchmarks/advantages.md] [--out r.json]

On SQLite, one real uvicorn server (like `reflexa serve`; its worker off, the
model-free embedder: neither route embeds), configured with a teacher endpoint:

1. Advantages (bench/advantages/workload.py: 8 groups of 8 multi-turn rollouts, mask
   0 on tool output, float32 log-probs as a trainer's `tolist()` sends them in JSON,
   or as the client's binary body writes the tensors), per method case (grpo;
   token_signal with clip, compress and discount; token_signal with teacher_entropy
   and entropy_threshold; direct_opd; step_shaping; horizon_agreement with 2
   horizons): a warm-up, then `reps` repetitions, each interleaving (order rotating),
   for the JSON body and for the binary one (its answer asked in the same format),
   the HTTP request (the body encoded beforehand: s = sent -> whole answer
   received), the server's path stage by stage in this process and the whole app in
   this process (ASGI, no uvicorn); and the floor (bench/advantages/inprocess.py).
   The floor's advantages are checked equal to the server's, the binary answer's
   to the JSON answer's (to the bit).
2. Teacher scoring (bench/advantages/teacher.py: the teacher tests' tiny vLLM-protocol
   server, in a process of its own): a batch of items × continuation tokens after
   token-id contexts, then text contexts (tokenized by Reflexa with the teacher's
   tokenizer file), a warm-up and `teacher_reps` repetitions each: the client's
   time, the answer's timing (total_ms, endpoint_ms, tokenize_ms), and the same
   scoring calls sent to the endpoint directly.

It measures and reports; it asserts nothing about timings.
"""

from __future__ import annotations

import functools
import os
import secrets
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import orjson
from reflexa.binary_advantages import decode_response

from bench.advantages.inprocess import FORMATS, InProcessApp, answer_advantages, floor, new_service, server_stages
from bench.advantages.report import render_markdown, verdicts
from bench.advantages.results import CaseResult, FormatResult, HttpRun, Report, TeacherResult
from bench.advantages.teacher import (
    DirectClient,
    TeacherShape,
    items,
    post_teacher_logprobs,
    teacher_server,
)
from bench.advantages.workload import CASES, Case, Shape, binary_body, request_body, rollouts, trajectory_tokens
from bench.common.api import NAMESPACE, headers
from bench.common.cli import Sizes, reproduce_command, suite_parser
from bench.common.cpu import CpuSample, CpuUse, wait_for_quiet
from bench.common.databases import databases
from bench.common.machine import MachineFacts
from bench.common.output import progress, write_outputs
from bench.common.processes import OFFLINE_ENV, server
from bench.common.report import summary
from migrations import upgrade

SECTION = "advantages"
ADVANTAGES = "/v1/distill/advantages"
SERVER_ENV = {"REFLEXA_WORKER__IN_PROCESS": "false", "REFLEXA_EMBEDDING__BACKEND": "hashing"}
CONTEXT_KINDS = ("token_ids", "text")


@dataclass(frozen=True)
class Config:
    shape: Shape
    reps: int
    teacher: TeacherShape
    teacher_reps: int
    quiet_wait_s: float


FULL = Config(Shape(8, 8, 2048, 8), 7, TeacherShape(64, 128, 256), 5, 10.0)
QUICK = Config(Shape(8, 8, 512, 4), 3, TeacherShape(16, 128, 128), 2, 2.0)
# Seconds: shows that every part runs (tests/bench); the numbers mean little.
SMOKE = Config(Shape(2, 4, 64, 2), 2, TeacherShape(4, 8, 8), 1, 0.5)
SIZES = Sizes(
    FULL,
    QUICK,
    SMOKE,
    quick_help="512 tokens per trajectory, 3 repetitions: seconds",
    smoke_help="tiny: seconds, for tests/bench",
)


def _http(client: httpx.Client, pid: int, raw: bytes, media_type: str) -> tuple[HttpRun, bytes]:
    cores = os.cpu_count() or 1
    headers = {"Content-Type": media_type, "Accept": media_type}
    before = CpuSample.take(pid, None)
    r = client.post(ADVANTAGES, content=raw, headers=headers)
    after = CpuSample.take(pid, None)
    r.raise_for_status()
    return HttpRun(after.at - before.at, CpuUse.between(before, after, cores)), r.content


def run_case(case: Case, groups: Any, cfg: Config, client: httpx.Client, pid: int, app: InProcessApp) -> CaseResult:
    bodies = {"json": orjson.dumps(request_body(groups, case)), "binary": binary_body(groups, case)}
    arrays = trajectory_tokens(groups, case)
    service = new_service()
    wait_for_quiet(os.cpu_count() or 1, max_wait_s=cfg.quiet_wait_s)
    # warm-up (not measured): every path once, and the check that they agree
    result = CaseResult(case)
    answers = {}
    for name, raw in bodies.items():
        _, content = _http(client, pid, raw, FORMATS[name])
        _, ours = server_stages(raw, service, FORMATS[name])
        assert ours == content, f"{name}: the in-process stages and the server answer differently"
        app.post(ADVANTAGES, raw, FORMATS[name])
        result.formats[name] = FormatResult(len(raw), len(content))
        answers[name] = content
    answer = orjson.loads(answers["json"])
    got = answer_advantages(answer)
    binary = decode_response(answers["binary"]).advantages
    assert binary.tobytes() == got.tobytes(), "the binary answer's advantages differ from the JSON answer's"
    _, advantages = floor(case.method, case.params, arrays, bodies["json"], answer)
    assert got.shape == advantages.shape
    result.max_abs_diff = float(np.max(np.abs(got - advantages), initial=0.0))

    def one_http(name: str) -> None:
        result.formats[name].http.append(_http(client, pid, bodies[name], FORMATS[name])[0])

    def one_stages(name: str) -> None:
        result.formats[name].stages.append(server_stages(bodies[name], service, FORMATS[name])[0])

    def one_app(name: str) -> None:
        result.formats[name].app_s.append(app.post(ADVANTAGES, bodies[name], FORMATS[name])[0])

    def one_floor() -> None:
        result.floors.append(floor(case.method, case.params, arrays, bodies["json"], answer)[0])

    steps = [functools.partial(f, name) for name in FORMATS for f in (one_http, one_stages, one_app)] + [one_floor]
    for rep in range(cfg.reps):
        k = rep % len(steps)
        for step in steps[k:] + steps[:k]:  # who goes first rotates
            step()
    return result


def run_teacher(cfg: Config, client: httpx.Client, direct: DirectClient, tokenizer_file: Path) -> list[TeacherResult]:
    out = []
    for kind in CONTEXT_KINDS:
        batch = items(cfg.teacher, tokenizer_file, kind)
        raw = orjson.dumps({"items": batch})
        wait_for_quiet(os.cpu_count() or 1, max_wait_s=cfg.quiet_wait_s)
        post_teacher_logprobs(client, NAMESPACE, raw)  # warm-up (not measured): connections, tokenizer file
        direct.run(batch)
        result = TeacherResult(kind)
        for rep in range(cfg.teacher_reps):
            if rep % 2:
                result.direct.append(direct.run(batch))
                result.runs.append(post_teacher_logprobs(client, NAMESPACE, raw))
            else:
                result.runs.append(post_teacher_logprobs(client, NAMESPACE, raw))
                result.direct.append(direct.run(batch))
            r = result.runs[-1]
            progress(
                f"  teacher ({kind} contexts) {rep + 1}: {1000 * r.seconds:,.0f} ms, endpoint {r.endpoint_ms:,.0f} ms; "
                f"direct {1000 * result.direct[-1].seconds:,.0f} ms"
            )
        out.append(result)
    return out


def run(cfg: Config, command: str, small: bool) -> Report:
    started = time.perf_counter()
    os.environ.update(OFFLINE_ENV)
    report = Report(command, small, asdict(cfg), MachineFacts.collect(with_postgres=False))
    groups = rollouts(cfg.shape)
    with databases() as dbs, tempfile.TemporaryDirectory(prefix="reflexa_bench_advantages_") as tmp:
        work = Path(tmp)
        url, app_url = dbs.sqlite("advantages"), dbs.sqlite("advantages-in-process")
        upgrade(url)
        upgrade(app_url)
        key = "rfx_bench_" + secrets.token_urlsafe(24)
        with (
            teacher_server(work / "teacher") as teacher,
            server(url, key, work, env={**SERVER_ENV, **teacher.env()}) as srv,
            httpx.Client(base_url=srv.url, headers=headers(key), timeout=900) as client,
            InProcessApp(app_url, key, work / "in-process") as app,
        ):
            client.post("/v1/namespaces", json={"name": NAMESPACE}).raise_for_status()
            for case in CASES:
                report.cases.append(run_case(case, groups, cfg, client, srv.pid, app))
                c = report.cases[-1]
                fastest = {name: 1000 * min(h.seconds for h in f.http) for name, f in c.formats.items()}
                progress(
                    f"  {case.label}: HTTP JSON {fastest['json']:,.1f} ms, binary {fastest['binary']:,.1f} ms "
                    f"(fastest); floor {1000 * min(f.total_s for f in c.floors):,.1f} ms"
                )
            direct = DirectClient(teacher)
            try:
                report.teacher = run_teacher(cfg, client, direct, teacher.tokenizer_file)
            finally:
                direct.close()
    report.wall_s = time.perf_counter() - started
    return report


def main(argv: list[str] | None = None) -> int:
    parser = suite_parser("advantages", __doc__, SECTION, SIZES, out="The summary is always printed.")
    args = parser.parse_args(argv)
    report = run(SIZES.pick(args), reproduce_command(parser, args), args.quick or args.smoke)
    progress(f"  done in {report.wall_s / 60:.1f} min")
    markdown = render_markdown(report)
    write_outputs(args.out, SECTION, asdict(report), markdown)
    print(summary("advantages", verdicts(report)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
