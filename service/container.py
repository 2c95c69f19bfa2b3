"""The process's long-lived objects, built once in the lifespan (or by a worker
process) and reached through dependencies (tests build their own)."""

from __future__ import annotations

from dataclasses import dataclass

from reflectors.llm_client import LLMClient, SqlTokenBudget
from reflectors.registry import build_handlers
from reflectors.rubric_judge import build_rubric_judge
from reflectors.worker import Worker, WorkerConfig
from service.check.service import CheckService
from service.distill.advantages.service import AdvantageService
from service.distill.contexts.service import DistillService
from service.distill.prefixes.service import PrefixService
from service.distill.teacher.service import TeacherService
from service.export.service import ExportService
from service.jobs.service import JobService
from service.keys.service import KeyService
from service.limits.checks import LimitChecker
from service.namespaces.service import NamespaceService
from service.operator.bulk import BulkService
from service.operator.inspect import InspectService
from service.operator.learning import LearningService
from service.operator.overview import OverviewService
from service.operator.preview import PreviewService
from service.operator.review import ReviewRuleFactory, ReviewService
from service.reflections.service import ReflectionService
from service.retrieval.log import RetrievalLog, journal_directory
from service.retrieval.service import RetrievalService
from service.rubrics.service import RubricService
from service.settings import Settings
from service.snapshots.service import SnapshotService
from service.tasks.service import TaskService
from service.trajectories.service import TrajectoryService
from service.ui.sessions import UiSessionService
from store.database import Database
from store.embedding import Embedder, build_embedder
from store.index_registry import IndexRegistry


def make_embedder(settings: Settings) -> Embedder:
    e = settings.embedding
    return build_embedder(
        e.backend,
        model_path=e.model_path,
        cache_dir=settings.data_dir / "models",
        threads=e.threads,
        idle_threads=e.idle_threads,
        batch_size=e.batch_size,
        cache_size=e.cache_size,
        openai_base_url=e.openai_base_url,
        openai_api_key=e.openai_api_key,
        openai_model=e.openai_model,
        openai_dim=e.openai_dim,
    )


def make_worker(settings: Settings, db: Database, embedder: Embedder) -> Worker:
    w = settings.worker
    config = WorkerConfig(
        concurrency=w.concurrency,
        starved_after=w.starved_after_seconds,
        lease_seconds=w.lease_seconds,
        poll_interval=w.poll_interval_ms / 1000,
        express_slot=w.express_slot,
    )
    llm = (  # one per process (its connection pool and limits); the token budget is shared in SQL
        LLMClient(settings.llm, budget=SqlTokenBudget(db, settings.llm.token_budget_per_namespace_per_day))
        if settings.llm.enabled
        else None
    )
    # Every declared reflector (reflectors/registry.py); with no LLM configured the
    # LLM ones are neither queued nor claimed. With one, they run in the slow lane,
    # so a minute-long LLM call never delays indexing.
    handlers = build_handlers(db, embedder, llm)
    worker = Worker(db, handlers.by_kind, config, slow_kinds=handlers.slow_kinds, batch_sizes=handlers.batch_sizes)
    if llm is not None:
        worker.on_close(llm.close)
    return worker


@dataclass
class Services:
    settings: Settings
    db: Database
    embedder: Embedder
    registry: IndexRegistry
    worker: Worker
    keys: KeyService
    namespaces: NamespaceService
    trajectories: TrajectoryService
    retrieval: RetrievalService
    check: CheckService
    reflections: ReflectionService
    jobs: JobService
    snapshots: SnapshotService
    distill: DistillService
    prefixes: PrefixService
    exports: ExportService
    tasks: TaskService
    rubrics: RubricService
    advantages: AdvantageService
    teacher: TeacherService
    overview: OverviewService
    review: ReviewService
    bulk: BulkService
    inspect: InspectService
    preview: PreviewService
    learning: LearningService
    ui_sessions: UiSessionService

    @classmethod
    def build(cls, settings: Settings, db: Database, embedder: Embedder | None = None) -> Services:
        if embedder is None:  # (an embedder with an empty cache has len 0: no truthiness test)
            embedder = make_embedder(settings)
        checker = LimitChecker(settings.limits)
        namespaces = NamespaceService(db)
        registry = IndexRegistry(
            db,
            model=embedder.name,
            dim=embedder.dim,
            snapshot_dir=settings.data_dir / "indexes" if settings.index.snapshots else None,
            sync_interval=settings.index.sync_interval_ms / 1000,
        )
        worker = make_worker(settings, db, embedder)
        judge = build_rubric_judge(settings.llm, db)  # rubric rewards' LLM judge; None without an LLM
        if judge is not None:
            worker.on_close(judge.close)
        snapshots = SnapshotService(db, namespaces, embedder.name)
        retrieval_log = RetrievalLog(db, journal_directory(settings.data_dir, db.url))
        retrieval = RetrievalService(db, namespaces, embedder, registry, checker, snapshots, retrieval_log)
        tasks = TaskService(db, namespaces, snapshots)
        distill = DistillService(db, namespaces, snapshots, retrieval, checker, tasks)
        reflections = ReflectionService(db, namespaces, checker)
        trajectories = TrajectoryService(db, namespaces, checker, retrieval_log, on_enqueue=worker.wake)
        review_rule = ReviewRuleFactory(settings.ui.review_min_uses, settings.ui.review_renew_after)
        keys = KeyService(db)
        check = CheckService(db, retrieval, checker)
        return cls(
            settings=settings,
            db=db,
            embedder=embedder,
            registry=registry,
            worker=worker,
            keys=keys,
            namespaces=namespaces,
            trajectories=trajectories,
            retrieval=retrieval,
            check=check,
            reflections=reflections,
            jobs=JobService(db, namespaces),
            snapshots=snapshots,
            distill=distill,
            prefixes=PrefixService(db, namespaces, snapshots, checker),
            exports=ExportService(db, namespaces, snapshots, settings.limits),
            tasks=tasks,
            rubrics=RubricService(db, namespaces, snapshots, checker, judge),
            advantages=AdvantageService(settings.limits),
            teacher=TeacherService(settings.teacher, db, namespaces, distill, checker),
            overview=OverviewService(db, namespaces, review_rule),
            review=ReviewService(db, namespaces, reflections, review_rule),
            bulk=BulkService(db, namespaces, settings.ui.max_bulk_items),
            inspect=InspectService(db, namespaces, reflections, trajectories, retrieval),
            preview=PreviewService(db, namespaces, retrieval, check),
            learning=LearningService(db, namespaces),
            ui_sessions=UiSessionService(db, keys, settings.ui.session_hours),
        )
