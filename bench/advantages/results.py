"""What bench.advantages measured: one result per case and teacher run, and the report
that main fills in and report renders (neither imports the other's module)."""

from __future__ import annotations

from dataclasses import dataclass, field

from bench.advantages.inprocess import Floor, Stages
from bench.advantages.teacher import DirectRun, TeacherRun
from bench.advantages.workload import Case
from bench.common.cpu import CpuUse
from bench.common.report import RunFacts


@dataclass
class HttpRun:
    seconds: float
    cpu: CpuUse


@dataclass
class FormatResult:
    """One body format's runs (json or binary: the request's and the answer's)."""

    request_bytes: int
    response_bytes: int
    http: list[HttpRun] = field(default_factory=list)
    stages: list[Stages] = field(default_factory=list)
    app_s: list[float] = field(default_factory=list)


@dataclass
class CaseResult:
    case: Case
    formats: dict[str, FormatResult] = field(default_factory=dict)
    floors: list[Floor] = field(default_factory=list)
    max_abs_diff: float = 0.0  # floor's advantages against the server's (JSON and binary answers are equal to the bit)


@dataclass
class TeacherResult:
    contexts: str
    runs: list[TeacherRun] = field(default_factory=list)
    direct: list[DirectRun] = field(default_factory=list)


@dataclass
class Report(RunFacts):
    cases: list[CaseResult] = field(default_factory=list)
    teacher: list[TeacherResult] = field(default_factory=list)
    wall_s: float = 0.0
