"""What ``reflexa mcp`` is configured with: the client's settings (``REFLEXA_URL``,
``REFLEXA_API_KEY``, ``REFLEXA_NAMESPACE``, ``REFLEXA_SPOOL_PATH``, or flags) plus the
MCP server's own. The API key is kept out of every ``repr`` and never logged."""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path

from reflexa.config import ENV_NAMESPACE, ClientConfig

DEFAULT_FLUSH_TIMEOUT = 5.0  # seconds end_episode waits for delivery before spooling
DEFAULT_RETRY_INTERVAL = 15.0  # seconds between attempts to send what the spool holds
DEFAULT_IDLE_TIMEOUT = 3600.0  # an episode untouched this long is closed without an outcome


@dataclass(frozen=True)
class McpSettings:
    url: str
    namespace: str
    api_key: str | None = field(default=None, repr=False)
    spool_path: str | None = None
    flush_timeout: float = DEFAULT_FLUSH_TIMEOUT
    retry_interval: float = DEFAULT_RETRY_INTERVAL
    idle_timeout: float = DEFAULT_IDLE_TIMEOUT

    @classmethod
    def resolve(
        cls,
        *,
        url: str | None = None,
        api_key: str | None = None,
        namespace: str | None = None,
        spool_path: str | None = None,
        spool: bool = True,
        flush_timeout: float = DEFAULT_FLUSH_TIMEOUT,
        retry_interval: float = DEFAULT_RETRY_INTERVAL,
        idle_timeout: float = DEFAULT_IDLE_TIMEOUT,
    ) -> McpSettings:
        """Arguments first, then the client's environment variables. Without a spool
        path the spool is a file of its own under ``~/.cache/reflexa`` (one per server
        URL and namespace); ``spool=False`` turns it off."""
        config = ClientConfig.resolve(base_url=url, api_key=api_key, namespace=namespace, spool_path=spool_path)
        if not config.namespace:
            raise ValueError(f"no namespace: give --namespace or set {ENV_NAMESPACE}")
        path = (config.spool_path or default_spool_path(config.base_url, config.namespace)) if spool else None
        return cls(
            url=config.base_url,
            namespace=config.namespace,
            api_key=config.api_key,
            spool_path=path,
            flush_timeout=flush_timeout,
            retry_interval=retry_interval,
            idle_timeout=idle_timeout,
        )


def default_spool_path(url: str, namespace: str) -> str:
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    digest = hashlib.sha256(f"{url}\n{namespace}".encode()).hexdigest()[:12]
    return str(cache / "reflexa" / f"mcp-{digest}.spool")
