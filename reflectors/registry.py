"""The reflector registry: every reflector is declared once, next to its code, with
`register(Reflector(...))`: its name and version, its job kind (lane, priority,
dedup rule: domain.jobs), the namespace settings section that switches it on, how
to build its handler, and optionally the trigger that queues its work once a
closed trajectory's exemplars are written.

`build_handlers` imports every module of the `reflectors` package, so a new
reflector module is found without a list to edit.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.orm import Session

from domain.jobs import JobKind, Lane
from domain.settings import NamespaceSettings
from reflectors.worker import Handler
from store.database import Database
from store.embedding.base import Embedder
from store.models import Trajectory

# queue this reflector's work for a closed, indexed trajectory (in the caller's transaction)
Trigger = Callable[[Session, Trajectory, NamespaceSettings], None]


@dataclass
class Deps:
    """What a handler may be built from: the process's shared objects."""

    db: Database
    embedder: Embedder
    llm: Any | None = None  # reflectors.llm_client.LLMClient, when the process has an LLM
    # the triggers of the reflectors this worker runs (the exemplar job calls them)
    triggers: list[Trigger] = field(default_factory=list)


@dataclass(frozen=True)
class Reflector:
    name: str  # recorded on the reflections it writes
    version: str
    job: JobKind
    build: Callable[[Deps], Handler]
    # ReflectionSettings field whose `enabled` switches it per namespace (None: always on)
    settings_section: str | None = None
    needs_llm: bool = False
    trigger: Trigger | None = None
    # jobs a worker slot claims together and hands to `handler.run_batch` (1: one at a time)
    batch_size: int = 1

    def enabled(self, settings: NamespaceSettings) -> bool:
        if self.settings_section is None:
            return True
        return bool(getattr(settings.reflection, self.settings_section).enabled)


_REGISTRY: dict[str, Reflector] = {}


def register(reflector: Reflector) -> Reflector:
    known = _REGISTRY.setdefault(reflector.job.kind, reflector)
    if known.name != reflector.name:
        raise ValueError(f"job kind {reflector.job.kind!r} is handled by {known.name!r} and {reflector.name!r}")
    return reflector


def _import_all() -> None:
    import reflectors

    for module in pkgutil.walk_packages(reflectors.__path__, "reflectors."):
        importlib.import_module(module.name)


def reflectors_available(*, llm: bool) -> list[Reflector]:
    """Every declared reflector this process can run (those needing an LLM only with one)."""
    _import_all()
    return sorted((r for r in _REGISTRY.values() if llm or not r.needs_llm), key=lambda r: r.job.kind)


@dataclass
class Handlers:
    """What a worker runs: job kind -> handler, the kinds of the slow lane, and the
    kinds whose jobs are claimed in batches (kind -> jobs per batch)."""

    by_kind: dict[str, Handler]
    slow_kinds: set[str]
    batch_sizes: dict[str, int]


def build_handlers(db: Database, embedder: Embedder, llm: Any | None) -> Handlers:
    """The handlers of every reflector this process runs. With no LLM configured,
    the LLM reflectors' jobs are neither queued (their triggers are not called) nor
    claimed."""
    chosen = reflectors_available(llm=llm is not None)

    def trigger_for(r: Reflector) -> Trigger:
        trigger = r.trigger
        assert trigger is not None

        def run(session: Session, traj: Trajectory, settings: NamespaceSettings) -> None:
            if r.enabled(settings):
                trigger(session, traj, settings)

        return run

    deps = Deps(db, embedder, llm, [trigger_for(r) for r in chosen if r.trigger is not None])
    return Handlers(
        by_kind={r.job.kind: r.build(deps) for r in chosen},
        slow_kinds={r.job.kind for r in chosen if r.job.lane is Lane.SLOW},
        batch_sizes={r.job.kind: r.batch_size for r in chosen if r.batch_size > 1},
    )
