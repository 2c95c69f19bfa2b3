"""Path parameters every router shares: one namespace path type, and the id type
of each resource's path segment."""

from __future__ import annotations

from typing import Annotated

from fastapi import Path

from domain.schemas import ID_PATTERN, NAMESPACE_PATTERN

Ns = Annotated[str, Path(pattern=NAMESPACE_PATTERN, description="namespace name")]
TrajectoryId = Annotated[str, Path(pattern=ID_PATTERN, description="trajectory id")]
ReflectionId = Annotated[str, Path(pattern=ID_PATTERN, description="reflection id")]
RetrievalId = Annotated[str, Path(pattern=ID_PATTERN, description="retrieval id")]
