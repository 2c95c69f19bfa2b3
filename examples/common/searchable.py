"""Wait until what a client wrote is searchable, however slow the machine is.

An experiment that reads memory before its writes are indexed measures the
machine's load, not the method: on a busy machine a 5 s consistency wait ran out,
the reads saw part of the memory, and the ablation's warm-up learned from fewer
informative hints than on a quiet one. So the examples wait for real."""

from __future__ import annotations

import time

from reflexa import Client, errors

WAIT_MS = 60_000  # one retrieve's wait; repeated until LIMIT_S


def wait_searchable(client: Client, namespace: str, observation: str, *, limit_s: float = 1800.0) -> None:
    """Block until this client's own writes to `namespace` are searchable (a retrieve
    carries the client's session token and waits for them). Raises ConsistencyTimeout
    if indexing failed or is still late after `limit_s`."""
    deadline = time.monotonic() + limit_s
    while True:
        try:
            client.retrieve(namespace, observation, kinds=["exemplar"], k=1, wait_timeout_ms=WAIT_MS)
            return
        except errors.ConsistencyTimeout as exc:
            if exc.rule == "indexing_failed" or time.monotonic() > deadline:
                raise
