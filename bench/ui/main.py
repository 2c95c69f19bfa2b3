"""Operator UI page render times at scale: every list page (and the pages an
operator opens from them) over HTTP from a real server, against the same store
queries alone in this process.

    python -m bench.ui [--quick | --smoke] [--backend sqlite|postgres] [--out docs/benchmarks/ui.md] [--out r.json]

1. A store of 1,000,000 steps (50,000 trajectories) and 100,000 reflections with
   their evidence, versions, vectors and lexical rows, 200,000 logged retrievals and
   the jobs a worker leaves (bench/ui/fill.py), plus a small second namespace.
2. One real uvicorn server on it (worker off; the packaged MiniLM on ONNX, which
   only search uses: it encodes the query like any retrieve), signed in through the
   login form with the admin key (the session cookie every page then reads from SQL).
3. Per page case, a warm-up, then `reps` rounds, each interleaving the page over HTTP
   (request sent -> whole HTML received) with its floor: the store functions the
   page's services call, with the same arguments, in this process on the same
   database (what the page cannot avoid: its SQL). Search's floor is the retrieval
   service in this process (encode + search + rank), not store queries alone.

It measures and reports; it asserts nothing about timings.
"""

from __future__ import annotations

import re
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx

from bench.common.cli import Sizes, reproduce_command, suite_parser
from bench.common.databases import databases
from bench.common.latency import Latency
from bench.common.machine import MachineFacts
from bench.common.output import progress, write_outputs
from bench.common.processes import server, share_models

SECTION = "ui"
ADMIN_KEY = "rfx_bench_ui_admin_key"
NS = "bench"
PAGE = 50  # the UI's default page size
HASHING_MODEL, HASHING_DIM = "hashing-256", 256  # the model-free embedder's name and size


@dataclass(frozen=True)
class Config:
    steps: int
    reflections: int
    reps: int
    embedder: str  # the server's (and the search floor's) backend; the vectors are filled for it


FULL = Config(1_000_000, 100_000, 30, "onnx")
QUICK = Config(100_000, 10_000, 10, "onnx")
SMOKE = Config(4_000, 400, 2, "hashing")  # seconds, no model export (tests/bench)
SIZES = Sizes(FULL, QUICK, SMOKE, quick_help="100k steps, 10k reflections", smoke_help="tiny: seconds, for tests/bench")


@dataclass
class CaseResult:
    page: str
    url: str
    http: Latency
    floor: Latency
    html_kb: float

    @property
    def ratio(self) -> float:
        return self.http.p50_ms / self.floor.p50_ms if self.floor.p50_ms else float("nan")


@dataclass
class Report:
    command: str
    machine: MachineFacts
    backend: str
    steps: int
    reflections: int
    fill_s: float
    reps: int
    cases: list[CaseResult] = field(default_factory=list)
    wall_s: float = 0.0


def sign_in(client: httpx.Client) -> None:
    form = client.get("/ui/login").text
    token = re.search(r'name="csrf_token" value="([^"]+)"', form).group(1)  # type: ignore[union-attr]
    r = client.post("/ui/login", data={"key": ADMIN_KEY, "csrf_token": token})
    assert r.status_code == 303, r.text


def floors(database_url: str) -> tuple[dict[str, Callable[[], Any]], dict[str, str], Callable[[], None]]:
    """Per page case: the store calls its services make, and the ids pages open."""
    from datetime import timedelta

    from sqlalchemy import select

    from service.operator.repository import learning, overview, retrieval_log, review
    from service.retrieval import ranking
    from store import evidence
    from store import jobs as jobs_repo
    from store import namespaces as ns_repo
    from store import reflections as refl_repo
    from store import retrievals as retrieval_repo
    from store import trajectory_reader as reader
    from store.database import Database
    from store.models import Reflection, Retrieval, Trajectory
    from store.records import record_columns
    from store.reflections import ReflectionFilters
    from store.trajectory_reader import StoredStep, StoredTrajectory, TrajectoryFilter

    db = Database(database_url)
    with db.read() as s:
        inputs = ns_repo.read_ranking_inputs(s, NS)
        assert inputs is not None
        baseline = ranking.baseline_rate(inputs[1], inputs[2])
        env = s.scalar(select(Trajectory.environment).where(Trajectory.namespace == NS).limit(1))
        traj_id, traj_pk = s.execute(
            select(Trajectory.id, Trajectory.pk)
            .where(Trajectory.namespace == NS)
            .order_by(Trajectory.pk.desc())
            .limit(1)
        ).one()
        # A reflection that was served (its detail page has a served chart).
        refl_id, refl_pk = s.execute(
            select(Reflection.id, Reflection.pk)
            .where(Reflection.namespace == NS, Reflection.uses > 0)
            .order_by(Reflection.pk.desc())
            .limit(1)
        ).one()
        retrieval_id = s.scalar(
            select(Retrieval.id).where(Retrieval.namespace == NS).order_by(Retrieval.created_at.desc()).limit(1)
        )
        query_text = s.scalar(select(Reflection.text).where(Reflection.pk == refl_pk))
    rule = review.ReviewRule(baseline, ranking.PRIOR_STRENGTH, 5, 10)
    stored = record_columns(StoredTrajectory)  # the API's trajectory list reads these

    def read(fn: Callable[[Any], Any]) -> Callable[[], Any]:
        def run() -> Any:
            with db.read() as s:
                return fn(s)

        return run

    def refl_page(filters: ReflectionFilters) -> Callable[[Any], Any]:
        def run(s: Any) -> Any:
            rows = refl_repo.list_reflections(s, NS, filters, before_pk=None, limit=PAGE + 1)
            return evidence.list_evidence_summaries(s, [r.pk for r in rows], 5)

        return run

    def overview_queries(s: Any) -> Any:
        from store.models import utcnow

        since = (utcnow() - timedelta(days=29)).replace(hour=0, minute=0, second=0, microsecond=0)
        return (
            overview.list_trajectories_by_day(s, NS, since),
            overview.list_retrievals_by_day(s, NS, since),
            overview.list_recent_latencies(s, NS, 1000),
            overview.count_reflections_by_kind_status(s, NS),
            overview.list_queue_by_kind(s, NS),
            review.count_review_queue(s, NS, rule),
        )

    def trajectory_detail(s: Any) -> Any:
        reader.read_trajectory_records(s, NS, None, [traj_id], StoredTrajectory)
        reader.read_step_records(s, NS, None, [traj_pk], StoredStep)
        return retrieval_log.list_episode_retrievals(s, NS, traj_id, 500)

    def reflection_detail(s: Any) -> Any:
        row = refl_repo.read_reflection(s, NS, refl_id)
        evidence.list_evidence_summaries(s, [row.pk], 1000)
        refl_repo.list_reflection_versions(s, row.pk)
        learning.list_credited_outcomes(s, row.pk, row.id, 3)  # its utility over time
        return retrieval_log.list_served_by_day(s, row.pk)

    def learning_queries(s: Any) -> Any:
        episodes = learning.count_closed_episodes(s, NS)
        return (
            learning.list_episode_blocks(s, NS, max(1, -(-episodes // 20))),
            learning.list_policy_versions(s, NS, 50),
            learning.list_reflector_stats(s, NS, baseline, ranking.PRIOR_STRENGTH),
        )

    cases: dict[str, Callable[[], Any]] = {
        "overview": read(overview_queries),
        "learning (episode blocks, policy versions, reflectors)": read(learning_queries),
        "trajectories": read(
            lambda s: reader.read_trajectories(s, NS, None, columns=stored, newest_first=True, limit=PAGE + 1)
        ),
        "trajectories, failed in one environment": read(
            lambda s: reader.read_trajectories(
                s,
                NS,
                None,
                TrajectoryFilter(environment=env, success=False),
                columns=stored,
                newest_first=True,
                limit=PAGE + 1,
            )
        ),
        "trajectory (20 steps, its retrievals)": read(trajectory_detail),
        "reflections": read(refl_page(ReflectionFilters())),
        "reflections, active exemplars": read(refl_page(ReflectionFilters(kind="exemplar", status="active"))),
        "reflections, utility 0–0.3": read(refl_page(ReflectionFilters(utility_max=0.3, baseline=baseline))),
        "reflection (evidence, history, served and utility charts)": read(reflection_detail),
        "review queue": read(
            lambda s: (
                retrieval_repo.list_holdout_counts(s, NS),  # the negative-effect reason's input
                review.list_review_queue(s, NS, rule, before=None, limit=PAGE + 1),
                review.count_review_queue(s, NS, rule),
            )
        ),
        "jobs (failed)": read(
            lambda s: (
                jobs_repo.list_jobs(s, NS, status="failed", kind=None, before_id=None, limit=PAGE + 1),
                overview.list_queue_by_kind(s, NS),
            )
        ),
        "retrieval log": read(
            lambda s: retrieval_log.list_logged_retrievals(s, NS, trajectory_id=None, before=None, limit=PAGE + 1)
        ),
        "retrieval": read(lambda s: retrieval_log.read_logged_retrieval(s, NS, retrieval_id)),
    }
    urls = {
        "overview": f"/ui/ns/{NS}",
        "learning (episode blocks, policy versions, reflectors)": f"/ui/ns/{NS}/learning",
        "trajectories": f"/ui/ns/{NS}/trajectories",
        "trajectories, failed in one environment": f"/ui/ns/{NS}/trajectories?environment={env}&success=false",
        "trajectory (20 steps, its retrievals)": f"/ui/ns/{NS}/trajectories/{traj_id}",
        "reflections": f"/ui/ns/{NS}/reflections",
        "reflections, active exemplars": f"/ui/ns/{NS}/reflections?kind=exemplar&status=active",
        "reflections, utility 0–0.3": f"/ui/ns/{NS}/reflections?utility_max=0.3",
        "reflection (evidence, history, served and utility charts)": f"/ui/ns/{NS}/reflections/{refl_id}",
        "review queue": f"/ui/ns/{NS}/review",
        "jobs (failed)": f"/ui/ns/{NS}/jobs",
        "retrieval log": f"/ui/ns/{NS}/retrievals",
        "retrieval": f"/ui/ns/{NS}/retrievals/{retrieval_id}",
        "search by state": f"/ui/ns/{NS}/reflections?" + httpx.QueryParams({"q": query_text[:300]}).__str__(),
    }
    return cases, urls, db.dispose


PREVIEW_ACTION = "open the door"  # the preview page's optional pre-action check


def service_floors(
    database_url: str, query: str, embedder: str
) -> tuple[Callable[[], Any], Callable[[], Any], Callable[[], None]]:
    """The services in this process, minus HTTP and HTML: what search runs (retrieval)
    and what the preview runs (retrieval with the context rendered, and the check)."""
    from service.auth import Principal
    from service.container import Services
    from service.settings import Settings
    from store.database import Database

    tmp = share_models(Path(tempfile.mkdtemp(prefix="reflexa_bench_ui_")))
    settings = Settings(
        database_url=database_url,
        data_dir=tmp,
        embedding={"backend": embedder},
        worker={"in_process": False},
        index={"snapshots": False},
    )
    db = Database(database_url)
    services = Services.build(settings, db)
    principal = Principal("bench", "admin", frozenset({"*"}))

    def run() -> Any:
        return services.inspect.search(
            principal, NS, query, kind=None, statuses=["active", "candidate", "retired"], environment=None
        )

    if not run():  # builds the index from SQL once, as the server's first search did
        raise RuntimeError("the in-process search retrieved nothing: its floor would time an empty search")

    from service.check.schemas import CheckRequest
    from service.retrieval.schemas import RenderOptions, RetrieveRequest

    state = {"observation": query}
    request = RetrieveRequest.model_validate({"state": state, "render": RenderOptions().model_dump()})
    check = CheckRequest.model_validate({"state": state, "action": PREVIEW_ACTION})

    def preview() -> Any:
        return services.preview.preview(principal, NS, request, check)

    def close() -> None:
        services.worker.close()
        db.dispose()

    return run, preview, close


def timed(fn: Callable[[], Any]) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def run(cfg: Config, backend: str, command: str) -> Report:
    from bench.ui.fill import fill

    started = time.perf_counter()
    work = Path(tempfile.mkdtemp(prefix="reflexa_bench_ui_"))
    with databases() as dbs:
        url = dbs.url(backend, "ui")
        progress(f"fill: {cfg.steps:,} steps, {cfg.reflections:,} reflections on {backend}")
        t = time.perf_counter()
        vectors = {"model": HASHING_MODEL, "dim": HASHING_DIM} if cfg.embedder == "hashing" else {}
        fill(url, steps=cfg.steps, reflections=cfg.reflections, **vectors)
        fill_s = time.perf_counter() - t
        progress(f"  filled in {fill_s:.0f} s")
        report = Report(
            command,
            MachineFacts.collect(with_postgres=backend == "postgres"),
            backend,
            cfg.steps,
            cfg.reflections,
            fill_s,
            cfg.reps,
        )
        cases, urls, close_floors = floors(url)
        env = {
            "REFLEXA_WORKER__IN_PROCESS": "false",
            # The embedder the vectors were filled for: search only sees its model's vectors.
            "REFLEXA_EMBEDDING__BACKEND": cfg.embedder,
            "REFLEXA_INDEX__SNAPSHOTS": "false",
        }
        query = dict(httpx.QueryParams(urls["search by state"].split("?", 1)[1]))["q"]
        search, preview, close_search = service_floors(url, query, cfg.embedder)
        cases["search by state"] = search
        cases["preview (context and check)"] = preview
        urls["preview (context and check)"] = f"/ui/ns/{NS}/preview?" + str(
            httpx.QueryParams({"state": query[:2000], "action": PREVIEW_ACTION})
        )
        try:
            with server(url, ADMIN_KEY, work, env=env) as srv, httpx.Client(base_url=srv.url, timeout=120) as client:
                sign_in(client)
                for name, floor in cases.items():
                    page_url = urls[name]
                    first = client.get(page_url)  # warm-up (and the index load, for search)
                    assert first.status_code == 200, (name, first.status_code, first.text[:500])
                    if name == "search by state" and "Nothing retrieved" in first.text:
                        raise RuntimeError(f"the search page retrieved nothing: {page_url} would time an empty search")
                    floor()
                    http_s, floor_s = [], []
                    for i in range(cfg.reps):
                        pair = [("http", lambda u=page_url: client.get(u)), ("floor", floor)]
                        for kind, fn in pair if i % 2 == 0 else reversed(pair):
                            (http_s if kind == "http" else floor_s).append(timed(fn))
                    result = CaseResult(
                        name, page_url, Latency.of(http_s), Latency.of(floor_s), len(first.content) / 1024
                    )
                    report.cases.append(result)
                    progress(
                        f"  {name}: p50 {result.http.p50_ms:.1f} ms, p99 {result.http.p99_ms:.1f} ms; "
                        f"floor p50 {result.floor.p50_ms:.1f} ms"
                    )
        finally:
            close_floors()
            close_search()
    report.wall_s = time.perf_counter() - started
    return report


def render_markdown(r: Report) -> str:
    rows = [
        f"| {c.page} | {c.http.p50_ms:.1f} | {c.http.p99_ms:.1f} | {c.floor.p50_ms:.1f} "
        f"| {c.floor.p99_ms:.1f} | {c.ratio:.2f} | {c.html_kb:.0f} |"
        for c in r.cases
    ]
    return "\n".join(
        [
            "## Operator UI: page render times",
            "",
            f"`{r.command}` ({r.wall_s / 60:.1f} min)",
            "",
            r.machine.markdown(),
            f"- Store: {r.backend}, {r.steps:,} steps, {r.reflections:,} reflections (filled in {r.fill_s:.0f} s); "
            f"{r.reps} rounds per page, HTTP and floor interleaved",
            "",
            "Page: request sent -> whole HTML received from a real server (the signed-in session read from "
            "SQL on every page). "
            "Floor: the store queries the page's services run, in this process on the same database "
            "(search: the retrieval service in process).",
            "",
            "| page | p50 ms | p99 ms | floor p50 ms | floor p99 ms | page/floor p50 | HTML KiB |",
            "|---|---:|---:|---:|---:|---:|---:|",
            *rows,
        ]
    )


def main(argv: list[str] | None = None) -> int:
    parser = suite_parser("ui", __doc__, SECTION, SIZES, out="The table is always printed.")
    parser.add_argument("--backend", choices=("sqlite", "postgres"), default="sqlite")
    args = parser.parse_args(argv)
    cfg = SIZES.pick(args)
    backend = f" --backend {args.backend}" if args.backend != "sqlite" else ""
    report = run(cfg, args.backend, reproduce_command(parser, args, backend))
    markdown = render_markdown(report)
    write_outputs(args.out, SECTION, asdict(report), markdown)
    print(markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
