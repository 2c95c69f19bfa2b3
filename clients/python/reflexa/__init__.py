"""Python client for Reflexa, the agent memory and reflection service.

``Client`` / ``AsyncClient`` speak the v1 HTTP API; ``Client.episode(...)`` logs an
agent's episode in the background without blocking it; ``reflexa.errors`` holds
the exceptions (named like the server's) and ``reflexa.models`` the schemas.
Only httpx and pydantic are needed.
"""

from __future__ import annotations

from reflexa import errors, models
from reflexa._consistency import merge_tokens
from reflexa._version import __version__
from reflexa.async_client import AsyncClient
from reflexa.client import Client
from reflexa.episode import Episode, EpisodeStats
from reflexa.errors import (
    Conflict,
    ConnectionFailed,
    ConsistencyTimeout,
    EpisodeDeliveryError,
    Forbidden,
    InvalidInput,
    InvalidResponse,
    NotFound,
    PayloadTooLarge,
    RateLimited,
    ReflexaError,
    Unauthorized,
    Unavailable,
)

__all__ = [
    "AsyncClient",
    "Client",
    "Conflict",
    "ConnectionFailed",
    "ConsistencyTimeout",
    "Episode",
    "EpisodeDeliveryError",
    "EpisodeStats",
    "Forbidden",
    "InvalidInput",
    "InvalidResponse",
    "NotFound",
    "PayloadTooLarge",
    "RateLimited",
    "ReflexaError",
    "Unauthorized",
    "Unavailable",
    "__version__",
    "errors",
    "merge_tokens",
    "models",
]
