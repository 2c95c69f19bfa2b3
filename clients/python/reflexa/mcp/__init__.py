"""``reflexa mcp``: Reflexa as an MCP server (the official ``mcp`` SDK), over stdio or
streamable HTTP, configured like the client.

Tools: ``recall``, ``log_step``, ``end_episode``, ``report_outcome``,
``search_reflections``; resources: ``reflexa://reflections/{id}`` and
``reflexa://reflections/{id}/evidence``. See docs/integrations.md, "MCP".

This package is the only one importing ``mcp`` (the ``reflexa[mcp]`` extra); one file a job:

- :mod:`~reflexa.mcp.settings` — the configuration (flags, then ``REFLEXA_*``);
- :mod:`~reflexa.mcp.episodes` — the open episode of each MCP session;
- :mod:`~reflexa.mcp.tools` — the tools, their schemas and descriptions;
- :mod:`~reflexa.mcp.reflections` and :mod:`~reflexa.mcp.resources` — the reflection resources;
- :mod:`~reflexa.mcp.errors` — Reflexa's errors as text saying what to fix;
- :mod:`~reflexa.mcp.server` — the server, its client and its upkeep thread.
"""

from __future__ import annotations

from typing import Any

__all__ = ["McpSettings", "ReflexaMcp"]


def __getattr__(name: str) -> Any:
    # Lazily: ``reflexa.mcp.settings`` (read by the CLI's parser) must import without the SDK.
    if name == "ReflexaMcp":
        from reflexa.mcp.server import ReflexaMcp

        return ReflexaMcp
    if name == "McpSettings":
        from reflexa.mcp.settings import McpSettings

        return McpSettings
    raise AttributeError(name)
