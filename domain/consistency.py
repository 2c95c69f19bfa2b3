"""The consistency token: what a write hands back so a later read can wait until
the write is searchable (read-your-writes).

Opaque to clients. It names the id range of the indexing jobs the write queued:
"c1.<first>.<last>", or "c1.0" when it queued none.
"""

from __future__ import annotations

from domain.errors import InvalidInput

NOTHING_QUEUED = "c1.0"


def encode_token(job_ids: list[int]) -> str:
    if not job_ids:
        return NOTHING_QUEUED
    return f"c1.{min(job_ids)}.{max(job_ids)}"


def parse_token(token: str, field: str = "consistency_token") -> tuple[int, int] | None:
    """The token's job id range; None for "c1.0" (nothing to wait for)."""
    parts = token.split(".")
    try:
        if parts[0] == "c1" and parts[1:] == ["0"]:
            return None
        if parts[0] == "c1" and len(parts) == 3:
            first, last = int(parts[1]), int(parts[2])
            if 0 < first <= last:
                return first, last
    except ValueError:
        pass
    raise InvalidInput(f"{field} is not a token this server issued", field=field, rule="opaque_token")
