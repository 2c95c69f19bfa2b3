"""FastAPI dependencies: the services container and the calling principal."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Header, Query, Request

from service.auth import Principal
from service.container import Services
from service.errors import InvalidInput


def get_services(request: Request) -> Services:
    return request.app.state.services


def get_principal(
    services: Annotated[Services, Depends(get_services)],
    authorization: Annotated[str | None, Header(include_in_schema=False)] = None,
) -> Principal:
    return services.keys.authenticate(authorization)


ServicesDep = Annotated[Services, Depends(get_services)]
PrincipalDep = Annotated[Principal, Depends(get_principal)]


def get_page_limit(services: ServicesDep, limit: int = Query(50, ge=1, description="page size")) -> int:
    cap = services.settings.limits.max_page_size
    if limit > cap:
        raise InvalidInput(f"limit is {limit}; at most {cap}", field="limit", rule="max_page_size")
    return limit


PageLimit = Annotated[int, Depends(get_page_limit)]
