"""A seeded namespace behind a real app, and browser-like clients for it."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from service.app import create_app
from store.database import Database
from tests.conftest import ADMIN_KEY, make_settings
from tests.fixtures import drain
from tests.ui.seed import Seeded, add_failed_job, add_retrievals, make_review_cases, seed
from tests.ui.ui_client import sign_in

OTHER_MARKER = "zebra-secret "  # in every task and state of the other namespace


@dataclass
class UiWorld:
    app: Any
    api: TestClient  # JSON API as admin
    db: Database
    main: Seeded  # namespace "mem": episodes, exemplars, retrievals, a failed job, review cases
    other: Seeded  # namespace "other": a second namespace an operator of "mem" must not see
    review_ids: list[str]
    failed_job_id: int

    def web(self, key: str | None = None, **kwargs: Any) -> TestClient:
        """A browser-like client (cookies, no API key); signed in with `key` if given."""
        client = TestClient(self.app, **kwargs)
        if key is not None:
            r = sign_in(client, key)
            assert r.status_code == 303, r.text
        return client

    def key(self, role: str, namespaces: list[str]) -> str:
        r = self.api.post("/v1/keys", json={"role": role, "namespaces": namespaces})
        assert r.status_code == 201, r.text
        return r.json()["key"]


def build_world(database_url: str, tmp_path: Path, **ui: Any) -> Iterator[UiWorld]:
    settings = make_settings(database_url, tmp_path, ui={"page_size": 50, **ui})
    app = create_app(settings)
    with TestClient(app, headers={"Authorization": f"Bearer {ADMIN_KEY}"}) as api:
        main = seed(api, "mem")
        other = seed(api, "other", episodes=3, marker=OTHER_MARKER)
        drain(api)
        add_retrievals(api, main)
        db = Database(database_url)
        try:
            job_id = add_failed_job(db, "mem")
            review_ids = make_review_cases(db, "mem")
            yield UiWorld(app, api, db, main, other, review_ids, job_id)
        finally:
            db.dispose()


@pytest.fixture
def world(database_url: str, tmp_path: Path) -> Iterator[UiWorld]:
    yield from build_world(database_url, tmp_path)
