"""Where the client's settings come from: arguments first, then environment
variables, then defaults. Every environment variable the package reads is here."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from reflexa._retry import RetryPolicy

ENV_URL = "REFLEXA_URL"
ENV_API_KEY = "REFLEXA_API_KEY"
ENV_NAMESPACE = "REFLEXA_NAMESPACE"
ENV_RUBRIC = "REFLEXA_RUBRIC"  # the rubric the trainer adapters score with (reflexa.adapters)
ENV_SPOOL_PATH = "REFLEXA_SPOOL_PATH"  # the episode logger's local spool (reflexa._spool); unset: none

DEFAULT_URL = "http://127.0.0.1:8080"
DEFAULT_TIMEOUT = 30.0


@dataclass(frozen=True)
class ClientConfig:
    """Resolved settings of one client.

    ``namespace`` is the default for methods called with ``namespace=None``.
    """

    base_url: str = DEFAULT_URL
    api_key: str | None = None
    namespace: str | None = None
    timeout: float = DEFAULT_TIMEOUT
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    spool_path: str | None = None

    @classmethod
    def resolve(
        cls,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        namespace: str | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        retry: RetryPolicy | None = None,
        spool_path: str | None = None,
    ) -> ClientConfig:
        """Fill what the caller left out from ``REFLEXA_URL``, ``REFLEXA_API_KEY``,
        ``REFLEXA_NAMESPACE`` and ``REFLEXA_SPOOL_PATH``."""
        return cls(
            base_url=(base_url or os.environ.get(ENV_URL) or DEFAULT_URL).rstrip("/"),
            api_key=api_key or os.environ.get(ENV_API_KEY) or None,
            namespace=namespace or os.environ.get(ENV_NAMESPACE) or None,
            timeout=timeout,
            retry=retry or RetryPolicy(),
            spool_path=spool_path or os.environ.get(ENV_SPOOL_PATH) or None,
        )

    def namespace_or_default(self, namespace: str | None) -> str:
        """``namespace``, or the client's default; a call with neither is a bug in the caller."""
        chosen = namespace or self.namespace
        if not chosen:
            raise ValueError("no namespace given and the client has no default namespace")
        return chosen
