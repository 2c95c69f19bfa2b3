"""The MCP server: the SDK's :class:`MCPServer` with Reflexa's tools and resources, the
client they call, the open episodes, and a background thread that delivers what the
spool holds and closes episodes left idle."""

from __future__ import annotations

import logging
import threading
from typing import Literal

from mcp.server.mcpserver import MCPServer

from reflexa._version import __version__
from reflexa.client import Client
from reflexa.mcp.episodes import EpisodeBook
from reflexa.mcp.resources import register_resources
from reflexa.mcp.settings import McpSettings
from reflexa.mcp.tools import register_tools

log = logging.getLogger("reflexa.mcp")

Transport = Literal["stdio", "http"]
LogLevel = Literal["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"]

INSTRUCTIONS = """Reflexa is the agent's memory of past episodes.
Before acting in a state, call recall with the current observation: it shows what was done before
in similar states and how it turned out. Record each step with log_step (the first one with the
task) and finish with end_episode (success, reward, failure_reason): Reflexa learns from it.
Credit recalls made outside an episode with report_outcome. search_reflections finds lessons by
situation; reflexa://reflections/{id} and …/evidence show one and the episodes behind it."""


class ReflexaMcp:
    """One MCP server over one client; :meth:`run` serves until the transport ends."""

    def __init__(self, settings: McpSettings, *, log_level: LogLevel = "WARNING") -> None:
        self.settings = settings
        self.namespace = settings.namespace
        self.spool_path = settings.spool_path
        self.retry_interval = settings.retry_interval
        self.client = Client(
            settings.url, settings.api_key, namespace=settings.namespace, spool_path=settings.spool_path
        )
        self.episodes = EpisodeBook(
            self.client,
            settings.namespace,
            flush_timeout=settings.flush_timeout,
            idle_timeout=settings.idle_timeout,
        )
        self.server: MCPServer = MCPServer(
            "reflexa", instructions=INSTRUCTIONS, version=__version__, log_level=log_level
        )
        register_tools(self.server, self)
        register_resources(self.server, self)
        self._stop = threading.Event()
        self._upkeep = threading.Thread(target=self._upkeep_loop, name="reflexa-mcp-upkeep", daemon=True)

    def run(self, transport: Transport = "stdio", *, host: str = "127.0.0.1", port: int = 8765) -> None:
        self._upkeep.start()
        try:
            if transport == "stdio":
                self.server.run("stdio")
            else:
                self.server.run("streamable-http", host=host, port=port)
        finally:
            self.close()

    def close(self) -> None:
        """Stop the upkeep, deliver (or spool) every open episode, close the client."""
        self._stop.set()
        self.episodes.close_all()
        self.client.close()

    def _upkeep_loop(self) -> None:
        while not self._stop.wait(self.retry_interval):
            try:
                self.episodes.reap()
                if self.client._spool is not None and self.client._spool.pending():
                    report = self.client.flush_spool()
                    if report.sent:
                        log.info("spool: %d requests (%d steps) delivered", report.sent, report.sent_steps)
            except Exception as exc:  # the next round tries again
                log.warning("upkeep: %s", exc)
