"""Prometheus metrics: request counts and latencies by route template, plus queue
depths read from SQL at scrape time (so every replica reports the shared truth)."""

from __future__ import annotations

import time
from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from store.database import Database
from store.jobs import count_jobs_by_status
from store.namespaces import list_frozen
from store.snapshots import count_snapshots


class _JobsCollector(Collector):
    """Shared state read from SQL at scrape time: the queue, freezes, snapshots."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily(
            "reflexa_jobs", "Jobs in the queue table by kind and status", labels=["kind", "status"]
        )
        frozen = GaugeMetricFamily(
            "reflexa_namespace_frozen", "1 for a namespace frozen for evaluation", labels=["namespace"]
        )
        snapshots = GaugeMetricFamily("reflexa_snapshots", "Snapshots kept per namespace", labels=["namespace"])
        try:
            with self.db.read() as session:
                counts = count_jobs_by_status(session)
                frozen_names = list_frozen(session)
                snapshot_counts = count_snapshots(session)
        except Exception:  # a scrape must not fail because the database blinked
            counts, frozen_names, snapshot_counts = {}, [], {}
        for (kind, status), n in sorted(counts.items()):
            family.add_metric([kind, status], n)
        for name in frozen_names:
            frozen.add_metric([name], 1.0)
        for name, n in sorted(snapshot_counts.items()):
            snapshots.add_metric([name], n)
        yield family
        yield frozen
        yield snapshots


class _ServicesCollector(Collector):
    """Process-local state read at scrape time: embedding cache and index sizes."""

    def __init__(self, embedder: object, registry: object) -> None:
        self.embedder = embedder
        self.index_registry = registry

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        hits = getattr(self.embedder, "hits", None)
        if hits is not None:
            c = CounterMetricFamily(
                "reflexa_embedding_cache", "Texts looked up in the embedding cache", labels=["result"]
            )
            c.add_metric(["hit"], float(hits))
            c.add_metric(["miss"], float(self.embedder.misses))  # type: ignore[attr-defined]
            yield c
        encoder = getattr(self.embedder, "inner", self.embedder)  # under the cache, if there is one
        idle = getattr(encoder, "idle_encodes", None)
        if idle is not None:
            yield CounterMetricFamily(
                "reflexa_embedding_idle_encodes",
                "Encoder runs that found the machine idle and ran on embedding.idle_threads",
                value=float(idle),
            )
        sizes = GaugeMetricFamily(
            "reflexa_index_vectors",
            "Vectors in this process's in-memory indexes",
            labels=["namespace", "kind", "field"],
        )
        for (ns, kind, field), n in sorted(self.index_registry.sizes().items()):  # type: ignore[attr-defined]
            sizes.add_metric([ns, kind, field], n)
        yield sizes
        rebuilding = GaugeMetricFamily(
            "reflexa_index_rebuilding",
            "1 while an index is rebuilt in the background (structure: the one serving searches meanwhile)",
            labels=["namespace", "kind", "field", "structure"],
        )
        for (ns, kind, field), (structure, busy) in sorted(self.index_registry.structures().items()):  # type: ignore[attr-defined]
            rebuilding.add_metric([ns, kind, field, structure], 1.0 if busy else 0.0)
        yield rebuilding


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "reflexa_http_requests", "HTTP requests", ["method", "route", "status"], registry=self.registry
        )
        self.latency = Histogram(
            "reflexa_http_request_seconds",
            "HTTP request latency",
            ["method", "route"],
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
            registry=self.registry,
        )
        self.rate_limited = Counter(
            "reflexa_rate_limited",
            "Requests refused with 429 by the per-key limits",
            ["rule"],
            registry=self.registry,
        )
        self.database_refused = Counter(
            "reflexa_database_refused",
            "Requests answered 503 for the database: rule database_overloaded (up but saturated) "
            "or database_unavailable (down)",
            ["rule"],
            registry=self.registry,
        )
        self._watched: list[Collector] = []

    def watch(self, db: Database, embedder: object, index_registry: object) -> None:
        """Report queue depths, cache and index sizes (called once the lifespan has them)."""
        for collector in self._watched:
            self.registry.unregister(collector)
        self._watched = [_JobsCollector(db), _ServicesCollector(embedder, index_registry)]
        for collector in self._watched:
            self.registry.register(collector)


class MetricsMiddleware:
    """Pure ASGI (no BaseHTTPMiddleware), so streaming and background tasks keep working."""

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = [500]

        async def send_wrapper(message: Message) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_wrapper)
        finally:
            route = scope.get("route")
            template = getattr(route, "path", "unmatched")
            method = scope["method"]
            self.metrics.requests.labels(method, template, str(status[0])).inc()
            self.metrics.latency.labels(method, template).observe(time.perf_counter() - start)
