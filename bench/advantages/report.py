"""bench.advantages' section of docs/benchmarks/advantages.md, and its verdicts (the summary it prints)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import fields
from typing import TYPE_CHECKING

from bench.advantages.inprocess import FORMATS, STAGE_LABELS, Stages
from bench.advantages.workload import HORIZONS, OPD_NAME
from bench.common.cpu import BUSY_OTHER_PCT
from bench.common.latency import percentile
from bench.common.report import Table, opening

if TYPE_CHECKING:
    from bench.advantages.results import CaseResult, FormatResult, Report, TeacherResult


def p50(values: Sequence[float]) -> float:
    return percentile(list(values), 50)


def _ms(seconds: float) -> str:
    ms = 1000 * seconds
    return f"{ms:,.1f}" if ms < 100 else f"{ms:,.0f}"


def _spread(values: Sequence[float]) -> str:
    return f"**{_ms(p50(values))}** ({_ms(min(values))}–{_ms(max(values))})"


def _tokens(report: Report) -> int:
    s = report.config["shape"]
    return int(s["groups"] * s["group"] * s["tokens"])


AIM = 1.5  # issue 25: a request at most 1.5× its floor (numpy + orjson in one process)
FORMAT_LABELS = {"json": "JSON", "binary": "binary"}


def http_p50(f: FormatResult) -> float:
    return p50([h.seconds for h in f.http])


def floor_p50(c: CaseResult) -> float:
    return p50([f.total_s for f in c.floors])


def numpy_p50(c: CaseResult) -> float:
    return p50([f.numpy_s for f in c.floors])


def _rows(report: Report) -> list[tuple[CaseResult, str, FormatResult]]:
    return [(c, name, f) for c in report.cases for name, f in c.formats.items()]


def _http_table(report: Report) -> list[str]:
    s = report.config["shape"]
    table = Table(
        "method | body | trajectories × tokens | request MB | response MB | HTTP ms p50 (spread) | tokens/s "
        "| server CPU | other CPU | in-process app ms | floor ms (numpy + orjson) | **HTTP ÷ floor** | HTTP ÷ numpy",
        "lll" + "r" * 10,
    )
    for c, name, f in _rows(report):
        other = p50([h.cpu.other_pct for h in f.http])
        busy = " ⚠" if other > BUSY_OTHER_PCT else ""
        http = http_p50(f)
        table.row(
            f"{c.case.label}{busy} | {FORMAT_LABELS[name]} | {s['groups'] * s['group']} × {s['tokens']:,} "
            f"| {f.request_bytes / 1e6:.1f} | {f.response_bytes / 1e6:.1f} | {_spread([h.seconds for h in f.http])} "
            f"| {_tokens(report) / http:,.0f} | {p50([h.cpu.server_pct for h in f.http]):.0f} % "
            f"| {other:.0f} % | {_ms(p50(f.app_s))} | {_ms(floor_p50(c))} "
            f"| **{http / floor_p50(c):.2f}×** | {http / numpy_p50(c):.1f}×"
        )
    return table.lines


def _stages_table(report: Report) -> list[str]:
    names = [f.name for f in fields(Stages)]
    table = Table(
        "method | body | " + " | ".join(STAGE_LABELS[n] for n in names) + " | sum | of it decode + encode "
        "| in-process app | in-process app ÷ floor | HTTP | HTTP − app (uvicorn, loopback)",
        "ll" + "r" * (len(names) + 6),
    )
    for c, name, f in _rows(report):
        total = p50([st.total_s for st in f.stages])
        app, http = p50(f.app_s), http_p50(f)
        cells = " | ".join(_ms(p50([getattr(st, n) for st in f.stages])) for n in names)
        table.row(
            f"{c.case.label} | {FORMAT_LABELS[name]} | {cells} | **{_ms(total)}** "
            f"| {p50([st.json_s / st.total_s for st in f.stages]):.0%} | {_ms(app)} | {app / floor_p50(c):.2f}× "
            f"| {_ms(http)} | {_ms(http - app)}"
        )
    return table.lines


def _floor_table(report: Report) -> list[str]:
    table = Table(
        "method | concat ms | needs + compute ms | numpy ms | orjson decode request ms | orjson encode answer ms "
        "| JSON ms | floor ms | numpy tokens/s | JSON HTTP ÷ floor | binary HTTP ÷ floor | binary HTTP ÷ numpy "
        "| max abs(floor − server)",
        "l" + "r" * 12,
    )
    for c in report.cases:
        f = c.floors
        by_json, by_binary = http_p50(c.formats["json"]), http_p50(c.formats["binary"])
        table.row(
            f"{c.case.label} | {_ms(p50([x.concat_s for x in f]))} | {_ms(p50([x.compute_s for x in f]))} "
            f"| {_ms(numpy_p50(c))} | {_ms(p50([x.decode_s for x in f]))} | {_ms(p50([x.encode_s for x in f]))} "
            f"| {_ms(p50([x.json_s for x in f]))} | {_ms(floor_p50(c))} | {_tokens(report) / numpy_p50(c):,.0f} "
            f"| {by_json / floor_p50(c):.2f}× | {by_binary / floor_p50(c):.2f}× | {by_binary / numpy_p50(c):.1f}× "
            f"| {c.max_abs_diff:g}"
        )
    return table.lines


def teacher_numbers(t: TeacherResult) -> dict[str, float]:
    ours = p50([r.seconds for r in t.runs]) * 1000
    endpoint = p50([r.endpoint_ms for r in t.runs])
    n = t.runs[0].items
    return {
        "ours_ms": ours,
        "endpoint_ms": endpoint,
        "overhead_ms": ours - endpoint,
        "per_item_ms": (ours - endpoint) / n,
        "ratio": ours / endpoint,
        "direct_ms": p50([d.seconds for d in t.direct]) * 1000,
    }


def _teacher_table(report: Report) -> list[str]:
    table = Table(
        "contexts | items × continuation tokens | context tokens / item | scoring calls | ours ms p50 (spread) "
        "| server total_ms | endpoint_ms | tokenize_ms | overhead ms (ours − endpoint) | overhead ms / item "
        "| ours ÷ endpoint | direct to the endpoint ms | ours ÷ direct",
        "ll" + "r" * 11,
    )
    for t in report.teacher:
        r0, n = t.runs[0], teacher_numbers(t)
        table.row(
            f"{t.contexts} | {r0.items} × {r0.scored_tokens // r0.items} | {r0.prompt_tokens / r0.items:,.0f} "
            f"| {r0.requests} | {_spread([r.seconds for r in t.runs])} | {p50([r.total_ms for r in t.runs]):,.0f} "
            f"| {n['endpoint_ms']:,.0f} | {p50([r.tokenize_ms for r in t.runs]):,.1f} | {n['overhead_ms']:,.0f} "
            f"| {n['per_item_ms']:.2f} | {n['ratio']:.2f}× | {n['direct_ms']:,.0f} "
            f"| {n['ours_ms'] / n['direct_ms']:.2f}×"
        )
    return table.lines


def verdicts(report: Report) -> list[str]:
    cases = report.cases
    out = []
    for name in FORMATS:
        rate = {c.case.label: _tokens(report) / http_p50(c.formats[name]) for c in cases}
        slow, fast = min(rate, key=rate.__getitem__), max(rate, key=rate.__getitem__)
        vs_floor = {c.case.label: http_p50(c.formats[name]) / floor_p50(c) for c in cases}
        vs_numpy = [http_p50(c.formats[name]) / numpy_p50(c) for c in cases]
        app_floor = [p50(c.formats[name].app_s) / floor_p50(c) for c in cases]
        body = [p50([st.json_s / st.total_s for st in c.formats[name].stages]) for c in cases]
        compute_share = [
            p50([st.compute_s for st in c.formats[name].stages]) / http_p50(c.formats[name]) for c in cases
        ]
        met = [label for label, r in vs_floor.items() if r <= AIM]
        aim = (
            "met for every method"
            if len(met) == len(cases)
            else f"met for {len(met)} of {len(cases)} methods ({', '.join(met)})"
            if met
            else "not met"
        )
        out.append(
            f"- Advantages, {FORMAT_LABELS[name]} bodies, {_tokens(report):,} tokens per request: "
            f"**{rate[slow]:,.0f} tokens/s** ({slow}) to **{rate[fast]:,.0f} tokens/s** ({fast}) over HTTP (p50 of "
            f"{report.config['reps']}); the request takes **{min(vs_floor.values()):.2f}–{max(vs_floor.values()):.2f}× "
            f"the floor** (numpy + orjson in one process; the aim ≤ {AIM}×: {aim}) and "
            f"{min(vs_numpy):.1f}–{max(vs_numpy):.1f}× the numpy alone; the app in process (no uvicorn, no socket) "
            f"{min(app_floor):.2f}–{max(app_floor):.2f}× the floor. The compute is {min(compute_share):.0%}–"
            f"{max(compute_share):.0%} of the request; decoding and encoding the body "
            f"{min(body):.0%}–{max(body):.0%} of the server's in-process path."
        )
    for t in report.teacher:
        n, r0 = teacher_numbers(t), t.runs[0]
        out.append(
            f"- Teacher scoring, {r0.items} items × {r0.scored_tokens // r0.items} tokens after {t.contexts} contexts: "
            f"ours {n['ours_ms']:,.0f} ms against the endpoint's {n['endpoint_ms']:,.0f} ms: overhead "
            f"**{n['overhead_ms']:,.0f} ms ({n['per_item_ms']:.2f} ms per item, {n['ratio']:.2f}× the endpoint's "
            f"time)**; the same calls straight to the endpoint took {n['direct_ms']:,.0f} ms "
            f"(ours {n['ours_ms'] / n['direct_ms']:.2f}×)."
        )
    return out


def render_markdown(report: Report) -> str:
    cfg, s, t = report.config, report.config["shape"], report.config["teacher"]
    turn = -(-s["tokens"] // s["turns"])
    lines = [
        *opening(
            "Shaped advantages and teacher scoring",
            report,
            "`--quick` is 512 tokens per trajectory and fewer repetitions, `--smoke` is seconds, for tests/bench",
        ),
        "- Server: `python -m uvicorn service.app:create_app --factory --no-access-log --log-level warning` (like "
        "`reflexa serve`) on a fresh migrated SQLite database, its in-process worker off, the model-free embedder "
        "(neither route embeds), and a teacher endpoint (below) in `REFLEXA_TEACHER__*` (openai_completions with "
        "prompt_logprobs, its tokenizer file; batch, concurrency and retries at the defaults).",
        f"- Batch (`bench/advantages/workload.py`): {s['groups']} groups of {s['group']} trajectories × "
        f"{s['tokens']:,} tokens ({_tokens(report):,} tokens a request), each trajectory {s['turns']} turns of "
        f"{turn} tokens whose last quarter is tool output (mask 0), so `token_steps` and `mask` go with every request; "
        "0/1 rewards, mixed in every group; float32 log-probs sent as `tensor.tolist()` writes them (JSON) or as "
        "the client's `reflexa.binary_advantages.encode_request` writes the tensors (binary: float32 and int64 "
        "columns; the answer asked for in the same format: float64 columns). Teacher "
        f"log-probs are the student's plus noise, horizons `{'`, `'.join(HORIZONS)}`, direct_opd one (post, pre) pair "
        f"`{OPD_NAME}`; params: token_signal `clip` 1, `compress`, `discount` 0.99, or `entropy_threshold` 2 with "
        "`teacher_entropy`; the other methods at their defaults.",
        f"- Per method: one warm-up, then {cfg['reps']} repetitions, each running (order rotating), for each body "
        "format, the HTTP request (s = the body, encoded beforehand, sent -> the whole answer received), the server's "
        "stages in this process and the whole app in this process; and the floor. CPU columns are % of one core over "
        "the request (2 cores = 200 %), p50 over the repetitions; other = the machine minus the benchmark process and "
        f"the server. ⚠: other work above {BUSY_OTHER_PCT:.0f} % of a core.",
        "",
        "### POST /v1/distill/advantages",
        "",
        "tokens/s = the request's tokens (masked ones included) / its p50; floor = the numpy and orjson of the floor "
        "table below, measured in the same run; HTTP ÷ floor = the request's p50 / the floor's (the aim: ≤ "
        f"{AIM}×).",
        "",
        *_http_table(report),
        "",
        "### Where the server's time goes (in process, ms p50)",
        "",
        "`bench/advantages/inprocess.py` runs the server's path on the same body in this process, stage by stage as "
        "the route does: `service.distill.advantages.body.decode` (JSON: one orjson parse, the per-token lists to "
        "numpy in bulk, the storable check and pydantic on the rest; binary: the header and the columns), the "
        "service (params, size checks, the arrays checked and concatenated; `service.distill.signals.compute`; the "
        "response objects), then `body.encode` (orjson from numpy, or binary columns). In-process app = the whole "
        "app (`create_app`, lifespan run: middleware, the key's lookup, the threadpool) through httpx's "
        "ASGITransport, no uvicorn or socket; HTTP − app is what uvicorn and the loopback add.",
        "",
        *_stages_table(report),
        "",
        "### Raw floor (one process, no HTTP)",
        "",
        "The same batch as the trainer's arrays straight into `service.distill.signals` "
        "(`concat`, `needs`, `compute`), and "
        "the bare JSON of the same payload with orjson (decode the request body, encode the server's answer). "
        "max abs(floor − server) compares the floor's advantages with the answer's (0: the same numbers to the bit).",
        "",
        *_floor_table(report),
        "",
        "### Teacher scoring (POST …/distill/teacher_logprobs)",
        "",
        "The teacher: `tests/service/distill/teacher/teacher_servers.py`'s tiny vLLM-protocol server "
        "(a random 2-layer Llama, 64-token vocabulary, one CPU thread, one sequence at a time under a lock; "
        "it answers every prompt "
        f"position) in a process of its own (`bench/advantages/teacher.py`). A batch of {t['items']} items × "
        f"{t['continuation']} continuation tokens (token ids) after {t['context']}-token contexts, as token ids, "
        f"then as texts (tokenized by Reflexa with the teacher's tokenizer file, a BOS added); one warm-up, then "
        f"{cfg['teacher_reps']} repetition{'s' if cfg['teacher_reps'] != 1 else ''}. Ours = the client's time for the "
        "request; total_ms, endpoint_ms (wall "
        "time with a scoring call in flight) and tokenize_ms are the answer's `timing`; direct = the same scoring "
        "calls (the protocol's bodies, in batches of `teacher.max_batch`, `teacher.max_concurrency` in flight) sent "
        "from this process straight to the endpoint, text contexts tokenized here. This endpoint is slow (CPU, "
        "Python per position), so the ratio flatters us: the overhead in ms per item is what carries over to a GPU "
        "teacher.",
        "",
        *_teacher_table(report),
        "",
        "### Against the issue",
        "",
        *verdicts(report),
    ]
    return "\n".join(lines) + "\n"
