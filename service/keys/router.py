"""/v1/keys (admin): create, list, revoke, rotate."""

from __future__ import annotations

from fastapi import APIRouter, Path

from service.deps import PrincipalDep, ServicesDep
from service.keys.schemas import KeyCreate, KeyCreated, KeyRead, KeyRotate

router = APIRouter(prefix="/v1/keys", tags=["keys"])


@router.post("", status_code=201, response_model=KeyCreated, operation_id="create_key")
def create_key(body: KeyCreate, principal: PrincipalDep, services: ServicesDep) -> KeyCreated:
    """Create an API key with a role and namespace scope. The secret is shown only here."""
    return services.keys.create(principal, body)


@router.get("", response_model=list[KeyRead], operation_id="list_keys")
def list_keys(principal: PrincipalDep, services: ServicesDep) -> list[KeyRead]:
    """Every key, oldest first, revoked ones included (never their secrets)."""
    return services.keys.list(principal)


@router.delete("/{id}", response_model=KeyRead, operation_id="revoke_key")
def revoke_key(
    principal: PrincipalDep, services: ServicesDep, id: str = Path(max_length=64, description="the key's id")
) -> KeyRead:
    """Revoke a key (kept, with `revoked_at`): refused at once by this replica, by
    every replica within 30 s (their key caches); its UI sessions end. Idempotent."""
    return services.keys.revoke(principal, id)


@router.post("/{id}/rotate", status_code=201, response_model=KeyCreated, operation_id="rotate_key")
def rotate_key(
    body: KeyRotate,
    principal: PrincipalDep,
    services: ServicesDep,
    id: str = Path(max_length=64, description="the key to replace"),
) -> KeyCreated:
    """A new key with the same role and scope (its secret shown only here); the old
    one keeps working for `grace_seconds`, then is refused (by every replica within
    30 s of that)."""
    return services.keys.rotate(principal, id, body)
