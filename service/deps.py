"""FastAPI dependencies: the services container and the calling principal."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Header, Query, Request
from starlette.concurrency import run_in_threadpool

from domain.errors import InvalidInput
from service.auth import Principal
from service.container import Services

# Dependencies are `async def` when they never block: a sync dependency costs a
# hop through the thread pool on every request.


async def get_services(request: Request) -> Services:
    return request.app.state.services


async def get_principal(
    services: Annotated[Services, Depends(get_services)],
    authorization: Annotated[str | None, Header(include_in_schema=False)] = None,
) -> Principal:
    principal = services.keys.cached(authorization)
    if principal is not None:
        return principal
    return await run_in_threadpool(services.keys.authenticate, authorization)


ServicesDep = Annotated[Services, Depends(get_services)]
PrincipalDep = Annotated[Principal, Depends(get_principal)]


async def get_page_limit(services: ServicesDep, limit: int = Query(50, ge=1, description="page size")) -> int:
    cap = services.settings.limits.max_page_size
    if limit > cap:
        raise InvalidInput(f"limit is {limit}; at most {cap}", field="limit", rule="max_page_size")
    return limit


PageLimit = Annotated[int, Depends(get_page_limit)]
