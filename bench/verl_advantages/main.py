"""A verl-shaped padded batch through reflexa.integrations.verl_advantages (the client's
splitting under the server's limits) against a live server, and the same advantages
computed with numpy in this process (the raw floor), in the same run.

    python -m bench.verl_advantages [--quick | --smoke] [--out docs/benchmarks/verl_advantages.md]

On SQLite, one real uvicorn server like `reflexa serve` (its worker off, the model-free
embedder: the route embeds nothing), with the default limits (2,000,000 tokens, 32 MiB
a body). The batch (bench/verl_advantages/workload.py): 256 prompts × 8 rollouts ×
4,096 response positions, right-padded, lengths log-normal around 1,024. Per method
(grpo: the mask alone is sent; token_signal: the student's and the teacher's log-probs
too), `reps` runs, each timed in three parts with the adapter's public functions:
prepare (rows grouped by uid, padding trimmed, tensors to lists), the batched client
call (packing, JSON, HTTP, the server, parsing, merging), write-back (the padded
float32 tensors). Tokens/s counts response tokens (padding excluded). The floor
(bench/verl_advantages/floor.py) is timed `reps` times too, and the write-back is
checked against it (max |difference|, float32). Each run is also made the adapter's
binary way (`va.shaped_advantages`: one binary request, the server's token limit raised
for it), its write-back checked equal to the JSON one's to the bit.

It measures and reports; it asserts nothing about timings.
"""

from __future__ import annotations

import os
import secrets
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from reflexa import Client
from reflexa.binary_advantages import ArrayAdvantages
from reflexa.integrations import verl_advantages as va

from bench.common.cli import Sizes, reproduce_command, suite_parser
from bench.common.databases import databases
from bench.common.machine import MachineFacts
from bench.common.output import progress, write_outputs
from bench.common.processes import OFFLINE_ENV, server
from bench.verl_advantages.floor import floor
from bench.verl_advantages.workload import Shape, VerlBatch, verl_batch
from migrations import upgrade

SECTION = "verl_advantages"
SERVER_ENV = {"REFLEXA_WORKER__IN_PROCESS": "false", "REFLEXA_EMBEDDING__BACKEND": "hashing"}
METHODS = (("grpo", {}), ("token_signal", {"beta": 1.0}))
# The server's token limit raised so that the whole batch is one binary request (the JSON
# runs still split at the client's default, 2,000,000: the server's default).
BINARY_MAX_TOKENS = 4_000_000


@dataclass(frozen=True)
class Config:
    shape: Shape
    reps: int


FULL = Config(Shape(256, 8, 4096), 2)
QUICK = Config(Shape(32, 8, 1024), 2)
SMOKE = Config(Shape(4, 4, 128), 1)
SIZES = Sizes(
    FULL, QUICK, SMOKE, quick_help="32 prompts × 8 × 1,024: seconds", smoke_help="tiny: seconds, for tests/bench"
)


@dataclass
class Run:
    prepare_s: float
    client_s: float
    write_s: float
    requests: int
    body: str = "JSON"  # or "binary": one request, the tensors' bytes (prepare and write-back inside the total)

    @property
    def total_s(self) -> float:
        return self.prepare_s + self.client_s + self.write_s


@dataclass
class MethodResult:
    method: str
    rows: int
    width: int
    tokens: int
    runs: list[Run] = field(default_factory=list)
    floors_s: list[float] = field(default_factory=list)
    max_abs_diff: float = 0.0
    body_mib: float = 0.0


def _columns(data: VerlBatch, method: str) -> tuple[Any, dict[str, Any], dict[str, Any]]:
    """What the adapter reads off the batch: the rewards, and the student and teacher
    log-probs when the method needs them."""
    batch = data.batch
    student = method != "grpo"
    logprobs = {"student": batch[va.STUDENT]} if student else {}
    teachers = {"default": batch[va.DEFAULT_TEACHER]} if student else {}
    return batch["token_level_rewards"].sum(dim=-1), logprobs, teachers


def one_run(data: VerlBatch, method: str, params: dict[str, Any], client: Client) -> tuple[Run, Any]:
    mask = va.response_mask(data.batch)
    started = time.perf_counter()
    rewards, logprobs, teachers = _columns(data, method)
    groups, rows, lengths = va.rollout_groups(rewards, mask, data.non_tensor_batch["uid"], logprobs, teachers)
    prepared = time.perf_counter()
    answer = client.distill_advantages_batched(method, groups, params=params)  # type: ignore[arg-type]
    answered = time.perf_counter()
    advantages = va.advantages_tensor(answer, rows, lengths, mask)
    written = time.perf_counter()
    run = Run(prepared - started, answered - prepared, written - answered, len(answer.requests))
    return run, advantages


def one_binary_run(data: VerlBatch, method: str, params: dict[str, Any], client: Client) -> tuple[Run, Any]:
    """The adapter's own path (va.shaped_advantages) when the batch fits one request:
    the binary body from the tensors, the float64 answer scattered back."""
    mask = va.response_mask(data.batch)
    started = time.perf_counter()
    rewards, logprobs, teachers = _columns(data, method)
    limits = {"max_tokens": BINARY_MAX_TOKENS}
    advantages, answer = va.shaped_advantages(
        client, method, params, rewards, mask, data.non_tensor_batch["uid"], logprobs, teachers, limits
    )
    assert isinstance(answer, ArrayAdvantages), "the batch did not fit one binary request"
    return Run(0.0, time.perf_counter() - started, 0.0, 1, "binary"), advantages


def run(cfg: Config, command: str) -> dict[str, Any]:
    started = time.perf_counter()
    os.environ.update(OFFLINE_ENV)
    facts = MachineFacts.collect(with_postgres=False)
    data = verl_batch(cfg.shape)
    results = []
    with databases() as dbs, tempfile.TemporaryDirectory(prefix="reflexa_bench_verl_") as tmp:
        url = dbs.sqlite("verl-advantages")
        upgrade(url)
        key = "rfx_bench_" + secrets.token_urlsafe(24)
        env = {**SERVER_ENV, "REFLEXA_LIMITS__MAX_ADVANTAGE_TOKENS": str(BINARY_MAX_TOKENS)}
        with server(url, key, Path(tmp), env=env) as srv, Client(srv.url, key, timeout=900) as client:
            for method, params in METHODS:
                result = MethodResult(method, cfg.shape.rows, cfg.shape.width, data.tokens)
                want = floor(data, method)
                check = VerlBatch(dict(data.batch), dict(data.non_tensor_batch))
                va.compute_advantages(check, method, params, client=client)  # the adapter's own entry point
                for rep in range(cfg.reps):
                    t = time.perf_counter()
                    floor(data, method)
                    result.floors_s.append(time.perf_counter() - t)
                    for r, advantages in (
                        one_run(data, method, params, client),
                        one_binary_run(data, method, params, client),
                    ):
                        result.runs.append(r)
                        assert np.array_equal(advantages.numpy(), check.batch["advantages"].numpy())
                        result.max_abs_diff = float(np.max(np.abs(advantages.numpy() - want)))
                        progress(
                            f"  {method} {r.body} {rep + 1}: {r.total_s:.1f} s (prepare {r.prepare_s:.1f}, client "
                            f"{r.client_s:.1f}, write-back {r.write_s:.1f}), {r.requests} requests; floor "
                            f"{1000 * result.floors_s[-1]:.0f} ms"
                        )
                results.append(result)
    return {
        "command": command,
        "config": asdict(cfg),
        "machine": asdict(facts),
        "machine_md": facts.markdown(),
        "results": [asdict(r) | {"runs": [asdict(x) | {"total_s": x.total_s} for x in r.runs]} for r in results],
        "wall_s": time.perf_counter() - started,
    }


def render_markdown(report: dict[str, Any]) -> str:
    shape = report["config"]["shape"]
    lines = [
        "## verl batch advantages (client splitting)",
        "",
        f"`{report['command']}` — {shape['prompts']} prompts × {shape['rollouts']} rollouts × "
        f"{shape['width']:,} response positions, right-padded; best of {report['config']['reps']} runs.",
        "",
        report["machine_md"],
        "",
        "### Through the client (prepare → split requests → write-back)",
        "",
        "JSON: `va.rollout_groups` (lists) → `Client.distill_advantages_batched` (split under the default limits) → "
        "`va.advantages_tensor`; binary: `va.shaped_advantages`, the adapter's own path when the batch fits one "
        "request (the server's token limit raised to "
        f"{BINARY_MAX_TOKENS:,} for it): the tensors' bytes in one binary body, the float64 answer scattered back "
        "(its prepare and write-back are inside the total).",
        "",
        "| method | body | rows × width | response tokens | padded positions | requests | total s | prepare s | "
        "client s | write-back s | tokens/s |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]

    def best_of(r: dict[str, Any], body: str) -> dict[str, Any] | None:
        runs = [x for x in r["runs"] if x.get("body", "JSON") == body]
        return min(runs, key=lambda x: x["total_s"]) if runs else None

    for r in report["results"]:
        padded = r["rows"] * r["width"]
        for body in ("JSON", "binary"):
            best = best_of(r, body)
            if best is None:
                continue
            parts = (
                f"{best['prepare_s']:.2f} | {best['client_s']:.2f} | {best['write_s']:.2f}"
                if body == "JSON"
                else f"— | {best['client_s']:.2f} | —"
            )
            lines.append(
                f"| {r['method']} | {body} | {r['rows']} × {r['width']} | {r['tokens']:,} | {padded:,} "
                f"| {best['requests']} | {best['total_s']:.2f} | {parts} | {r['tokens'] / best['total_s']:,.0f} |"
            )
    lines += [
        "",
        "### Raw floor (numpy on the padded tensors, one process)",
        "",
        "| method | ms | tokens/s | JSON client ÷ floor | binary client ÷ floor | max abs diff |",
        "|---|---|---|---|---|---|",
    ]
    for r in report["results"]:
        fl = min(r["floors_s"])
        ratios = []
        for body in ("JSON", "binary"):
            best = best_of(r, body)
            ratios.append(f"{best['total_s'] / fl:,.1f}×" if best else "—")
        lines.append(
            f"| {r['method']} | {1000 * fl:,.1f} | {r['tokens'] / fl:,.0f} | {ratios[0]} | {ratios[1]} "
            f"| {r['max_abs_diff']:.1e} |"
        )
    lines += ["", f"Whole run: {report['wall_s'] / 60:.1f} min."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = suite_parser("verl_advantages", __doc__, SECTION, SIZES, out="The summary is always printed.")
    args = parser.parse_args(argv)
    report = run(SIZES.pick(args), reproduce_command(parser, args))
    markdown = render_markdown(report)
    write_outputs(args.out, SECTION, report, markdown)
    print(markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
