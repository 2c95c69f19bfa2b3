"""Where a retrieve's time goes by the wall clock, and what the HTTP stack around it costs.

The app runs in this process (`create_app` with its lifespan, called as ASGI: no
socket, no client library) on a store filled as bench.retrieval fills it (SQLite or
PostgreSQL, the server's own encoder), and each stage of a retrieve is timed with
`perf_counter` around the function that runs it. py-spy's GIL samples (`python -m
bench.retrieval --profile`) say where CPU goes; these say what a request waits for.
Stages nest (the lexical matches run inside the lexical search's thread, beside the
encode), so the rows do not add up to the request. A request is timed until its
answer is sent; the retrieval log's write, which runs after that in the same ASGI
call, is reported beside it as the whole call.

Then the same requests are answered by a canned response (the last real answer) in
place of the service: what is left is the stack around it (middleware, routing,
validation, the key's lookup, the thread-pool hop, serialisation), and, beside it, a
bare ASGI handler that does only what any server must (parse and validate the body,
one thread-pool hop, serialise the answer).

    python -m bench.retrieval.stages                        # SQLite, bench corpus, 10k items
    python -m bench.retrieval.stages --backend postgres --corpus agent-states
    python -m bench.retrieval.stages --lexical-weight 0     # the dense search alone
"""

from __future__ import annotations

import argparse
import functools
import importlib
import math
import os
import shutil
import statistics
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from bench.common.databases import Databases
from bench.common.output import progress
from bench.common.processes import OFFLINE_ENV, share_models
from bench.retrieval.config import QUICK
from bench.retrieval.corpora import CORPORA, load_corpus
from bench.retrieval.populate import populate

NS = "stages"
ADMIN_KEY = "reflexa-bench-stages-admin-key-0000"

# (label, dotted path of the function it times): methods on the live service objects
# (`services.` paths), module functions in the module their callers look them up in
# (tests/bench/test_retrieval_stages.py runs every one).
STAGES: tuple[tuple[str, str], ...] = (
    ("retrieve: the service's whole call", "services.retrieval._retrieve"),
    ("encode the query", "services.retrieval.search.embed"),
    ("lexical search thread: matches and their rows (beside the encode)", "services.retrieval._lexical_live"),
    ("  the lexical index's generation (SQL)", "store.lexical.read_generation"),
    ("  lexical matches (SQL; not when reused)", "store.lexical.list_word_matches"),
    ("dense search", "services.retrieval.search.first_hits"),
    ("rank: rows read and scored", "services.retrieval._candidates"),
    ("  candidate rows read (SQL; in both threads)", "service.retrieval.repository.list_candidates"),
    ("  scores (cosines, lexical similarities, utility)", "services.retrieval._score"),
    ("evidence of the served items (SQL)", "store.evidence.list_evidence_summaries"),
    ("build the served items", "services.retrieval._item"),
)


@dataclass
class Timed:
    label: str
    calls: int
    p50_ms: float
    per_request_ms: float


def _resolve(path: str, services: Any) -> tuple[Any, str]:
    """The object holding the stage's function, and its attribute name."""
    head, _, attr = path.rpartition(".")
    if head.startswith("services."):
        owner: Any = services
        for part in head.split(".")[1:]:
            owner = getattr(owner, part)
    else:
        owner = importlib.import_module(head)
    getattr(owner, attr)  # a renamed function fails here, not silently
    return owner, attr


@contextmanager
def timed_stages(services: Any, marks: dict[str, list[float]]) -> Iterator[None]:
    """Each STAGES function wrapped to append its wall time to marks[label]; put back after."""
    undo: list[tuple[Any, str, Any, bool]] = []
    try:
        for label, path in STAGES:
            owner, attr = _resolve(path, services)
            original = getattr(owner, attr)

            def wrapper(*args: Any, _f: Callable[..., Any] = original, _label: str = label, **kw: Any) -> Any:
                t0 = time.perf_counter()
                try:
                    return _f(*args, **kw)
                finally:
                    marks[_label].append(time.perf_counter() - t0)

            functools.update_wrapper(wrapper, original)
            undo.append((owner, attr, original, attr in vars(owner)))
            setattr(owner, attr, wrapper)
        yield
    finally:
        for owner, attr, original, own in reversed(undo):
            if own:
                setattr(owner, attr, original)
            else:
                delattr(owner, attr)  # an instance's wrapper over its class's method


class AsgiDriver:
    """POST …/retrieve straight into an ASGI app, one request at a time."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.path = f"/v1/namespaces/{NS}/retrieve"
        self.last: bytes = b""
        self.whole: list[float] = []  # each call until the app returned: the log write after the answer too

    async def post(self, body: bytes) -> float:
        """Seconds until the answer's last byte was sent (what a client waits for)."""
        sent: list[dict[str, Any]] = []
        answered: list[float] = []

        async def receive() -> dict[str, Any]:
            return {"type": "http.request", "body": body, "more_body": False}

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)
            if message["type"] == "http.response.body" and not message.get("more_body", False):
                answered.append(time.perf_counter())

        scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": "POST",
            "scheme": "http",
            "path": self.path,
            "raw_path": self.path.encode(),
            "query_string": b"",
            "root_path": "",
            "headers": [
                (b"host", b"bench"),
                (b"content-type", b"application/json"),
                (b"authorization", f"Bearer {ADMIN_KEY}".encode()),
                (b"content-length", str(len(body)).encode()),
            ],
            "client": ("127.0.0.1", 1),
            "server": ("127.0.0.1", 80),
            "state": {},
        }
        t0 = time.perf_counter()
        await self.app(scope, receive, send)
        self.whole.append(time.perf_counter() - t0)
        seconds = answered[0] - t0
        if sent[0]["status"] != 200:
            raise RuntimeError(f"retrieve answered {sent[0]['status']}: {sent[-1].get('body', b'')[:300]!r}")
        self.last = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
        return seconds

    async def run(self, texts: list[str], k: int = 10) -> list[float]:
        return [await self.post(orjson.dumps({"state": {"observation": t}, "k": k})) for t in texts]


def bare_app(services: Any) -> Callable[..., Any]:
    """The least a server does for a retrieve: parse and validate the body, one hop to
    the thread pool (the service's call), serialise the answer."""
    from starlette.concurrency import run_in_threadpool

    from service.retrieval.schemas import RetrieveRequest

    async def app(scope: dict[str, Any], receive: Callable[..., Any], send: Callable[..., Any]) -> None:
        message = await receive()
        req = RetrieveRequest.model_validate(orjson.loads(message["body"]))
        answer, _ = await run_in_threadpool(services.retrieval.retrieve_deferred, None, NS, req)
        out = answer.__pydantic_serializer__.to_json(answer)
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(out)).encode())]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": out})

    return app


def set_lexical_weight(db: Any, weight: float) -> None:
    """The namespace's `ranking.lexical_weight` (0: no lexical search, the dense one
    alone), written as its settings are stored; retrieves read it within a second."""
    from store.models import Namespace

    with db.write() as session:
        session.get(Namespace, NS).settings = {"ranking": {"lexical_weight": weight}}
    time.sleep(1.1)  # NamespaceService.ranking_inputs keeps what it read for a second


def _ms(values: list[float]) -> float:
    return statistics.median(values) * 1000 if values else float("nan")


def _cell(ms: float) -> str:
    return "–" if math.isnan(ms) else f"{ms:.2f}"  # a stage never called


def _table(marks: dict[str, list[float]], requests: int) -> list[Timed]:
    return [
        Timed(label, len(marks[label]), _ms(marks[label]), sum(marks[label]) * 1000 / requests) for label, _ in STAGES
    ]


async def measure(app: Any, services: Any, queries: list[str], warmup: list[str]) -> dict[str, Any]:
    """Misses (novel queries), then the same queries again (embedding-cache hits), then
    the stack around the service with a canned answer."""
    from service.retrieval.schemas import RetrieveResponse

    driver = AsgiDriver(app)
    await driver.run(warmup)
    results: dict[str, Any] = {}
    for path in ("miss", "hit"):
        marks: dict[str, list[float]] = defaultdict(list)
        with timed_stages(services, marks):
            driver.whole.clear()
            times = await driver.run(queries)
        results[path] = {
            "p50_ms": _ms(times),
            "whole_p50_ms": _ms(driver.whole),
            "n": len(times),
            "stages": _table(marks, len(times)),
        }
    canned = RetrieveResponse.model_validate_json(driver.last)
    # an instance attribute over the class's method, deleted after (as timed_stages does)
    services.retrieval.retrieve_deferred = lambda principal, ns, req: (canned, lambda: None)
    try:
        texts = (queries * (1 + 2000 // max(len(queries), 1)))[:2000]
        results["stack_p50_ms"] = _ms((await driver.run(texts))[100:])
        bare = AsgiDriver(bare_app(services))
        results["bare_p50_ms"] = _ms((await bare.run(texts))[100:])
    finally:
        del services.retrieval.retrieve_deferred
    return results


def report(results: dict[str, Any], args: argparse.Namespace) -> str:
    weight = "calibrated" if args.lexical_weight is None else args.lexical_weight
    lines = [
        f"Retrieve stages in process: {args.backend}, corpus {args.corpus}, {args.items:,} items, "
        f"{args.queries} queries, lexical_weight {weight} (ms)",
        "",
        f"- miss p50 {results['miss']['p50_ms']:.2f}, cache hit p50 {results['hit']['p50_ms']:.2f} "
        "(ASGI calls, until the answer is sent: no socket, no client)",
        f"- the whole call, the retrieval log written after the answer: miss p50 "
        f"{results['miss']['whole_p50_ms']:.2f}, cache hit p50 {results['hit']['whole_p50_ms']:.2f}",
        f"- the stack around the service (canned answer) p50 {results['stack_p50_ms']:.3f}; "
        f"a bare ASGI handler p50 {results['bare_p50_ms']:.3f}",
        "",
        "| stage | miss: calls a request | p50 a call | a request | hit: calls a request | p50 a call | a request |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    n_miss, n_hit = results["miss"]["n"], results["hit"]["n"]
    for m, h in zip(results["miss"]["stages"], results["hit"]["stages"], strict=True):
        lines.append(
            f"| {m.label} | {m.calls / n_miss:.2f} | {_cell(m.p50_ms)} | {m.per_request_ms:.2f} "
            f"| {h.calls / n_hit:.2f} | {_cell(h.p50_ms)} | {h.per_request_ms:.2f} |"
        )
    return "\n".join(lines)


def run(args: argparse.Namespace) -> dict[str, Any]:
    os.environ.update(OFFLINE_ENV)
    import uvloop

    from migrations import upgrade
    from service.app import create_app
    from service.settings import Settings

    dbs = Databases()
    work = Path(tempfile.mkdtemp(prefix="reflexa_bench_stages_"))
    try:
        data_dir = share_models(work / "data")
        url = dbs.url(args.backend, "stages")
        upgrade(url)
        corpus = load_corpus(args.corpus, QUICK, args.items, args.queries, args.warmup)
        worker: Any = {"in_process": False}
        settings = Settings(database_url=url, data_dir=data_dir, admin_key=ADMIN_KEY, worker=worker)
        app = create_app(settings)

        async def main() -> dict[str, Any]:
            async with app.router.lifespan_context(app):
                services = app.state.services
                progress(f"filling {args.items:,} items ({args.backend})")
                populate(url, NS, corpus.states, corpus.vectors, services.embedder.name)
                if args.lexical_weight is not None:
                    set_lexical_weight(services.db, args.lexical_weight)
                return await measure(app, services, corpus.queries, corpus.warmup)

        return uvloop.run(main())
    finally:
        dbs.close()
        shutil.rmtree(work, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.retrieval.stages", description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--corpus", choices=CORPORA, default="bench")
    parser.add_argument("--items", type=int, default=10_000)
    parser.add_argument("--queries", type=int, default=200, help="novel queries, each a miss, then again as hits")
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument(
        "--lexical-weight", type=float, help="ranking.lexical_weight (default: calibrated; 0: dense only)"
    )
    args = parser.parse_args(argv)
    print(report(run(args), args))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
