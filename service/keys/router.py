"""POST /v1/keys (admin)."""

from __future__ import annotations

from fastapi import APIRouter

from service.deps import PrincipalDep, ServicesDep
from service.keys.schemas import KeyCreate, KeyCreated

router = APIRouter(prefix="/v1/keys", tags=["keys"])


@router.post("", status_code=201, response_model=KeyCreated, operation_id="create_key")
def create_key(body: KeyCreate, principal: PrincipalDep, services: ServicesDep) -> KeyCreated:
    """Create an API key with a role and namespace scope. The secret is shown only here."""
    return services.keys.create(principal, body)
