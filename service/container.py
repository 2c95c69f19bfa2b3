"""The process's long-lived objects, built once in the lifespan and reached through
dependencies (tests build their own)."""

from __future__ import annotations

from dataclasses import dataclass

from service.keys.service import KeyService
from service.limits import LimitChecker
from service.namespaces.service import NamespaceService
from service.settings import Settings
from service.trajectories.service import TrajectoryService
from store.database import Database


@dataclass
class Services:
    settings: Settings
    db: Database
    keys: KeyService
    namespaces: NamespaceService
    trajectories: TrajectoryService

    @classmethod
    def build(cls, settings: Settings, db: Database) -> Services:
        namespaces = NamespaceService(db)
        return cls(
            settings=settings,
            db=db,
            keys=KeyService(db),
            namespaces=namespaces,
            trajectories=TrajectoryService(db, namespaces, LimitChecker(settings.limits)),
        )
