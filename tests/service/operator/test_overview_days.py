"""The overview's per-day counts (service/operator/overview.py): the days before
today come from a per-namespace copy for PAST_DAYS_TTL_S, today's are read on every
view, and a copy serves only the window it was read for."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from service.app import create_app
from service.auth import Principal
from service.operator import overview as overview_module
from service.operator.overview import Overview
from store.models import utcnow
from tests.conftest import ADMIN_KEY, make_settings
from tests.factories import add_trajectory
from tests.fixtures import create_namespace

ADMIN = Principal(key_id="k", role="admin", namespaces=frozenset({"*"}))


@pytest.fixture
def services(database_url: str, tmp_path: Path) -> Iterator[Any]:
    app = create_app(make_settings(database_url, tmp_path))
    with TestClient(app, headers={"Authorization": f"Bearer {ADMIN_KEY}"}) as api:
        create_namespace(api, "mem")
        yield app.state.services


def day(o: Overview, name: str) -> tuple[int, int]:
    [row] = [d for d in o.trajectories if d.day == name]
    return row.total, row.successes


def test_past_days_are_kept_for_the_ttl_and_today_is_read_live(services: Any, monkeypatch: Any) -> None:
    now = utcnow()
    yesterday, today = (now - timedelta(days=1)).strftime("%Y-%m-%d"), now.strftime("%Y-%m-%d")
    with services.db.write() as s:
        add_trajectory(s, "mem", "old-1", success=True, created_at=now - timedelta(days=1))
    first = services.overview.overview(ADMIN, "mem", now=now)
    assert (day(first, yesterday), day(first, today)) == ((1, 1), (0, 0))

    with services.db.write() as s:
        add_trajectory(s, "mem", "old-2", success=False, created_at=now - timedelta(days=1))
        add_trajectory(s, "mem", "new-1", created_at=now)
    cached = services.overview.overview(ADMIN, "mem", now=now)
    assert day(cached, today) == (1, 0)  # today: live
    assert day(cached, yesterday) == (1, 1)  # a past day: the copy, until it is PAST_DAYS_TTL_S old

    monkeypatch.setattr(overview_module, "PAST_DAYS_TTL_S", 0.0)  # the copy has expired
    fresh = services.overview.overview(ADMIN, "mem", now=now)
    assert (day(fresh, yesterday), day(fresh, today)) == ((2, 1), (1, 0))
    assert fresh.trajectories == services.overview.overview(ADMIN, "mem", now=now).trajectories


def test_a_copy_serves_only_its_own_window(services: Any) -> None:
    now = utcnow()
    two_days_ago = (now - timedelta(days=2)).strftime("%Y-%m-%d")
    services.overview.overview(ADMIN, "mem", now=now)  # the 30-day window, read while empty
    with services.db.write() as s:
        add_trajectory(s, "mem", "old-1", success=True, created_at=now - timedelta(days=2))
    assert day(services.overview.overview(ADMIN, "mem", now=now), two_days_ago) == (0, 0)  # cached
    assert day(services.overview.overview(ADMIN, "mem", days=7, now=now), two_days_ago) == (1, 1)
    # the next day is another window: the day that was today is read again
    tomorrow = services.overview.overview(ADMIN, "mem", now=now + timedelta(days=1))
    assert day(tomorrow, two_days_ago) == (1, 1)
