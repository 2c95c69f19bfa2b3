"""The shared key limit under concurrent requests in one process: when the lease runs
out, one request takes the next lease and the others wait for it, so the shared bucket
pays for what is admitted (plus at most one unspent lease), not a lease per waiting
request. (Taking one each and keeping the last, this test's clients drew ~4x what was
admitted, and bench.ingest's 16 clients on PostgreSQL were refused with 429 at a sixth of
the configured rate, 2026-12-06.)"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from migrations import upgrade
from service.limits import per_key
from service.limits.per_key import KeyLimitMiddleware
from store import key_buckets
from store.database import Database

CLIENTS, REQUESTS_EACH = 16, 40


async def _answer(request: Request) -> PlainTextResponse:
    await asyncio.sleep(0.001)  # requests overlap, as a server's do
    return PlainTextResponse("ok")


def _drive(app: Any) -> dict[int, int]:
    async def client(http: httpx.AsyncClient, counts: dict[int, int]) -> None:
        for _ in range(REQUESTS_EACH):
            status = (await http.get("/")).status_code
            counts[status] = counts.get(status, 0) + 1

    async def main() -> dict[int, int]:
        counts: dict[int, int] = {}
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(
            transport=transport, base_url="http://t", headers={"Authorization": "Bearer k"}
        ) as http:
            await asyncio.gather(*(client(http, counts) for _ in range(CLIENTS)))
        return counts

    return asyncio.run(main())


@pytest.mark.parametrize("rate", [1000.0, 2.0])
def test_concurrent_requests_share_one_lease_claim(
    rate: float, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = f"sqlite:///{tmp_path / 'limits.db'}"
    upgrade(url)
    db = Database(url)
    taken: list[int] = []
    claim = key_buckets.claim

    def counted(*args: Any, **kwargs: Any) -> tuple[int, float]:
        got, left = claim(*args, **kwargs)
        taken.append(got)
        return got, left

    monkeypatch.setattr(per_key.key_buckets, "claim", counted)
    burst = 2000 if rate > 100 else 20
    app = KeyLimitMiddleware(
        Starlette(routes=[Route("/", _answer)]), rate=rate, burst=burst, max_concurrent=0, shared=lambda: db
    )
    try:
        counts = _drive(app)
    finally:
        db.dispose()
    admitted = counts.get(200, 0)
    assert set(counts) <= {200, 429}
    # what the bucket gave is what was admitted, plus at most the one lease left unspent
    assert admitted <= sum(taken) <= admitted + app.lease, (sum(taken), admitted, app.lease, len(taken))
    if rate > 100:  # 640 requests against a burst of 2,000: none refused
        assert counts == {200: CLIENTS * REQUESTS_EACH}
    else:  # the burst and ~2/s after it: the rest refused, without a claim each
        assert admitted < 40 and counts[429] > 560
        assert len(taken) <= admitted + 5, (len(taken), admitted)
