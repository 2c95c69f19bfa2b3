"""The app's collector settings. `freeze_startup_objects` (on by default): while the
app runs, what it built at start is kept out of the collector's full collections; at
shutdown it is handed back, so an app that is gone can be collected (tests run many
apps in one process). `gc_young_threshold` (10,000 by default): the youngest
generation's threshold while the app runs, the interpreter's again after."""

from __future__ import annotations

import gc
from pathlib import Path

from migrations import upgrade
from service.settings import Settings
from tests.conftest import admin_api, make_settings


def test_the_objects_built_at_start_are_frozen_while_the_app_runs(sqlite_url: str, tmp_path: Path) -> None:
    assert Settings.model_fields["freeze_startup_objects"].default is True
    upgrade(sqlite_url)
    gc.unfreeze()
    with admin_api(make_settings(sqlite_url, tmp_path, freeze_startup_objects=True)) as api:
        frozen = gc.get_freeze_count()
        assert frozen > 50_000  # modules, schemas, routes and services: ~250k objects
        assert api.get("/healthz").status_code == 200
        assert api.post("/v1/namespaces", json={"name": "proj"}).status_code == 201
        assert gc.get_freeze_count() <= frozen  # requests freeze nothing (a frozen object is still freed by its count)
    assert gc.get_freeze_count() == 0


def test_the_young_generation_threshold_holds_while_the_app_runs(sqlite_url: str, tmp_path: Path) -> None:
    assert Settings.model_fields["gc_young_threshold"].default == 10_000
    upgrade(sqlite_url)
    before = gc.get_threshold()
    with admin_api(make_settings(sqlite_url, tmp_path, gc_young_threshold=12_345)) as api:
        assert gc.get_threshold() == (12_345, *before[1:])
        assert api.get("/healthz").status_code == 200
    assert gc.get_threshold() == before


def test_the_test_default_leaves_the_collector_alone(sqlite_url: str, tmp_path: Path) -> None:
    upgrade(sqlite_url)
    gc.unfreeze()
    before = gc.get_threshold()
    with admin_api(make_settings(sqlite_url, tmp_path)) as api:
        assert api.get("/healthz").status_code == 200
        assert gc.get_freeze_count() == 0
        assert gc.get_threshold() == before
