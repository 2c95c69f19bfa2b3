"""The MCP resources: a reflection, ``reflexa://reflections/{id}``, and its evidence,
``reflexa://reflections/{id}/evidence`` (the episodes it was learned from, with the
steps it cites), as JSON read through the client."""

# No ``from __future__ import annotations``: the SDK reads these signatures at registration.

import json
from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ResourceNotFoundError

from reflexa.errors import NotFound, ReflexaError
from reflexa.mcp.errors import explain
from reflexa.mcp.reflections import evidence_document, get_reflection, reflection_document
from reflexa.mcp.tools import Backend
from reflexa.models import ReflectionRead

REFLECTION_URI = "reflexa://reflections/{reflection_id}"
EVIDENCE_URI = "reflexa://reflections/{reflection_id}/evidence"


def _dumps(data: Any) -> str:
    return json.dumps(data, ensure_ascii=False, indent=2)


def register_resources(server: MCPServer, backend: Backend) -> None:
    def read(reflection_id: str) -> ReflectionRead:
        try:
            return get_reflection(backend.client, backend.namespace, reflection_id)
        except NotFound:
            raise ResourceNotFoundError(
                f"No reflection {reflection_id!r} in namespace {backend.namespace!r}: take ids from "
                "search_reflections or recall."
            ) from None
        except ReflexaError as exc:
            raise ResourceError(explain(exc)) from exc

    def reflection(reflection_id: str) -> str:
        return _dumps(reflection_document(read(reflection_id)))

    def evidence(reflection_id: str) -> str:
        found = read(reflection_id)
        try:
            return _dumps(evidence_document(backend.client, backend.namespace, found))
        except ReflexaError as exc:
            raise ResourceError(explain(exc)) from exc

    server.resource(
        REFLECTION_URI,
        name="reflection",
        title="A Reflexa reflection",
        description="A reflection (a past step, heuristic, skill, rubric or evidence card) learned from past "
        "episodes: its text, content, status, utility and evidence counts, as JSON.",
        mime_type="application/json",
    )(reflection)
    server.resource(
        EVIDENCE_URI,
        name="reflection-evidence",
        title="A reflection's evidence",
        description="The episodes a reflection was learned from: each evidence link with its trajectory's task, "
        "outcome and the steps it cites, as JSON.",
        mime_type="application/json",
    )(evidence)
