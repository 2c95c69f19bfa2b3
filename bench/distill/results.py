"""What bench.distill measured per backend, and the report that main fills in and
report renders (neither imports the other's module)."""

from __future__ import annotations

from dataclasses import dataclass, field

from bench.common.report import RunFacts
from bench.distill.floor import ContextsFloorRun, ExportFloorRun
from bench.distill.http_runs import ContextsRun, ExportRun, SnapshotRun
from bench.reflect.drain import DrainResult


@dataclass
class Ingested:
    trajectories: int = 0
    steps: int = 0
    seconds: float = 0.0


@dataclass
class BackendResult:
    backend: str
    background: Ingested
    rollouts: Ingested
    drain: DrainResult
    snapshot: SnapshotRun
    floor_load_s: float
    floor_vectors: int
    warm: ContextsRun
    contexts: list[ContextsRun]
    floors: list[ContextsFloorRun]
    repeat: ContextsRun
    repeat_floor: ContextsFloorRun
    # the measured batches again on a warm embedding cache: the default form, include=["parts"], the floor
    again: list[ContextsRun] = field(default_factory=list)
    parts: list[ContextsRun] = field(default_factory=list)
    warm_floors: list[ContextsFloorRun] = field(default_factory=list)
    exports: list[ExportRun] = field(default_factory=list)
    export_floors: dict[str, ExportFloorRun] = field(default_factory=dict)
    server_rss_mb: float = float("nan")


@dataclass
class Report(RunFacts):
    results: list[BackendResult]
    wall_s: float = 0.0
