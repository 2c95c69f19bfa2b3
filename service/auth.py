"""Bearer API keys: roles, permissions and namespace scopes.

A key names a role and the namespaces it may touch. A request for a namespace
outside the key's scope gets 404 (its existence would leak); a namespace the key
may see but an action its role lacks gets 403.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from enum import StrEnum

from domain.errors import Forbidden, NotFound

KEY_PREFIX = "rfx_"


class Permission(StrEnum):
    KEYS_MANAGE = "keys:manage"
    NAMESPACES_CREATE = "namespaces:create"
    NAMESPACES_CONFIGURE = "namespaces:configure"  # change a namespace's settings (admin)
    TRAJECTORIES_READ = "trajectories:read"
    TRAJECTORIES_WRITE = "trajectories:write"
    TRAJECTORIES_DELETE = "trajectories:delete"
    RETRIEVE = "retrieve"
    REFLECTIONS_READ = "reflections:read"
    REFLECTIONS_CURATE = "reflections:curate"
    JOBS_READ = "jobs:read"
    JOBS_MANAGE = "jobs:manage"
    DISTILL = "distill"
    EXPORT = "export"
    SNAPSHOTS = "snapshots"  # take, list, delete snapshots
    FREEZE = "namespaces:freeze"  # freeze a namespace for evaluation, thaw it
    REWARDS = "rewards"  # create rubrics, score with them, mint and revoke reward capability URLs


P = Permission
ROLE_PERMISSIONS: dict[str, frozenset[Permission]] = {
    "admin": frozenset(Permission),
    # Operators browse and curate what was learned; they do not write experience.
    "operator": frozenset(
        {
            P.TRAJECTORIES_READ,
            P.TRAJECTORIES_DELETE,
            P.RETRIEVE,
            P.REFLECTIONS_READ,
            P.REFLECTIONS_CURATE,
            P.JOBS_READ,
            P.JOBS_MANAGE,
            P.EXPORT,
            P.SNAPSHOTS,
            P.FREEZE,
            P.REWARDS,
        }
    ),
    # Agents log their own experience and ask for memory at run time.
    "agent": frozenset({P.TRAJECTORIES_READ, P.TRAJECTORIES_WRITE, P.RETRIEVE, P.REFLECTIONS_READ}),
    # Trainers bulk-ingest rollout groups, read, distil and export.
    "trainer": frozenset(
        {
            P.TRAJECTORIES_READ,
            P.TRAJECTORIES_WRITE,
            P.RETRIEVE,
            P.REFLECTIONS_READ,
            P.DISTILL,
            P.EXPORT,
            P.SNAPSHOTS,
            P.FREEZE,
            P.REWARDS,
        }
    ),
}


def new_key_secret() -> str:
    return KEY_PREFIX + secrets.token_urlsafe(32)


def hash_key(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class Principal:
    """Who is calling: the key's id, role and namespace scope."""

    key_id: str
    role: str
    namespaces: frozenset[str]

    @property
    def all_namespaces(self) -> bool:
        return "*" in self.namespaces

    def can_see(self, namespace: str) -> bool:
        return self.all_namespaces or namespace in self.namespaces

    def has(self, permission: Permission) -> bool:
        return permission in ROLE_PERMISSIONS[self.role]

    def require(self, permission: Permission, namespace: str | None = None) -> None:
        if namespace is not None and not self.can_see(namespace):
            raise NotFound(f"namespace {namespace!r} not found", field="namespace")
        if not self.has(permission):
            raise Forbidden(f"role {self.role!r} may not {permission.value}", rule="role")
