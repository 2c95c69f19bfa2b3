"""FastAPI dependencies: the services container and the calling principal."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Header, Request

from service.auth import Principal
from service.container import Services


def get_services(request: Request) -> Services:
    return request.app.state.services


def get_principal(
    services: Annotated[Services, Depends(get_services)],
    authorization: Annotated[str | None, Header(include_in_schema=False)] = None,
) -> Principal:
    return services.keys.authenticate(authorization)


ServicesDep = Annotated[Services, Depends(get_services)]
PrincipalDep = Annotated[Principal, Depends(get_principal)]
