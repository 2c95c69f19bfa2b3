"""Where a retrieve's server CPU goes: py-spy GIL samples bucketed by function.

Not what a request waits for: these buckets put 3-7 ms a request on the HTTP stack
(event loop, uvicorn, dependencies, the thread-pool hop), which bench.retrieval.stages
measures directly at 0.4 ms; its wall-clock stages are the ones to read for latency."""

from __future__ import annotations

import time
from pathlib import Path

import httpx

from bench.retrieval.load import sequential
from bench.retrieval.server import Server

# (bucket, function names as py-spy prints them); the innermost frame of a sample that
# names a bucket decides where it goes. Names as in the code: a renamed function falls
# into its caller's bucket (tests/bench checks each name still exists).
PROFILE_BUCKETS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("event loop: ASGI middleware, routing, FastAPI plumbing", ("Runner.run",)),
    ("uvicorn: parse HTTP, write response", ("HttpToolsProtocol.data_received", "RequestResponseCycle.send")),
    ("validate body (pydantic)", ("request_body_to_args",)),
    ("dependencies: auth, services", ("solve_dependencies",)),
    ("threadpool hand-off", ("run_in_threadpool", "WorkerThread.run", "WorkerThread._report_result")),
    ("retrieve: other (sessions, glue)", ("RetrievalService._retrieve",)),
    ("SQL: namespace settings and utility baseline (cached 1 s)", ("NamespaceService.ranking_inputs",)),
    ("index catch-up check (registry.sync)", ("IndexRegistry.sync",)),
    ("embed query (GIL-held part: tokenize, pool)", ("OnnxEmbedder.encode", "CachedEmbedder.encode")),
    ("index search (faiss)", ("VectorIndex.search",)),
    ("SQL: lexical matches (FTS5 / tsvector; while the query is encoded)", ("list_word_matches",)),
    ("SQL: load candidates with their vectors (50 rows)", ("list_candidates",)),
    ("rank candidates", ("RetrievalService._candidates", "utility", "recency_factor", "RetrievalService._choose")),
    ("SQL: evidence of served items", ("list_evidence_summaries",)),
    ("SQL: log the retrieval (after the answer: insert + commit)", ("create_retrieval", "RetrievalLog._finish")),
    ("build response items", ("RetrievalService._item",)),
    ("serialize response (pydantic)", ("serialize_response",)),
)
_BUCKET_OF = {name: bucket for bucket, names in PROFILE_BUCKETS for name in names}


def profile_table(raw: Path, *, rate: int, requests: int) -> str:
    """A py-spy --gil raw profile as GIL-held ms per request, by bucket."""
    counts: dict[str, int] = {}
    for line in raw.read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        if not stack or not n.isdigit():
            continue
        frames = [f.split(" (", 1)[0] for f in stack.split(";")]
        bucket = next((_BUCKET_OF[f] for f in reversed(frames) if f in _BUCKET_OF), "other")
        counts[bucket] = counts.get(bucket, 0) + int(n)
    total = sum(counts.values())
    per_request = 1000 / rate / max(requests, 1)
    lines = ["| where (GIL held) | share | ms per request |", "|---|---:|---:|"]
    for bucket, n in sorted(counts.items(), key=lambda kv: -kv[1]):
        lines.append(f"| {bucket} | {n / max(total, 1):.1%} | {n * per_request:.2f} |")
    lines.append(f"| total | 100% | {total * per_request:.2f} |")
    return "\n".join(lines)


def profiled(srv: Server, client: httpx.Client, ns: str, texts: list[str], out: Path) -> str:
    """Sequential requests with py-spy attached (GIL-held samples); returns the table
    with the latencies it saw (perturbed by the sampling: not for the results)."""
    from bench.common import pyspy

    with pyspy.record(srv.pid, out, rate=pyspy.RATE_HZ):
        time.sleep(1.0)  # py-spy attaches
        res = sequential(client, ns, texts)
    return f"{len(texts)} sequential requests, p50 {res.latency.p50_ms:.1f} ms (py-spy attached)\n\n" + profile_table(
        out, rate=pyspy.RATE_HZ, requests=len(texts)
    )
