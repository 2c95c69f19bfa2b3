"""Fixtures for the client tests: a scripted fake server, and an admin client on the
session's live server."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from fake_reflexa import BASE_URL, FakeReflexa, MakeClient
from reflexa import Client, _transport


@pytest.fixture
def fake() -> FakeReflexa:
    return FakeReflexa()


@pytest.fixture
def sleeps(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The transport's retry waits, recorded instead of slept."""
    waited: list[float] = []
    monkeypatch.setattr(_transport, "_sleep", waited.append)

    async def async_sleep(seconds: float) -> None:
        waited.append(seconds)

    monkeypatch.setattr(_transport, "_async_sleep", async_sleep)
    return waited


@pytest.fixture
def make_client(fake: FakeReflexa) -> Iterator[MakeClient]:
    """Clients talking to ``fake``; keyword arguments go to :class:`reflexa.Client`."""
    made: list[httpx.Client] = []

    def make(handler: Callable[[httpx.Request], httpx.Response] | None = None, **kwargs: Any) -> Client:
        http = httpx.Client(transport=httpx.MockTransport(handler or fake))
        made.append(http)
        options = {"api_key": "rfx_test", "namespace": "ns1", "backoff": 0.001, **kwargs}
        return Client(BASE_URL, http_client=http, **options)

    yield make
    for http in made:
        http.close()


@pytest.fixture(scope="module")
def admin(live_server: Any) -> Iterator[Client]:
    """An admin client on the session's live server (conftest's `live_server`)."""
    with Client(live_server.url, live_server.admin_key) as client:
        yield client
