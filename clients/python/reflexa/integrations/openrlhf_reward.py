"""OpenRLHF's custom reward function on a Reflexa rubric: pass this file's path as
``--remote_rm_url`` (OpenRLHF loads a ``.py`` path and calls its ``reward_func``).

    export REFLEXA_URL=http://reflexa:8080
    export REFLEXA_REWARD_CAPABILITY=rfxrw_…      # POST …/rubrics/{id}/capabilities
    --remote_rm_url $(python -c "import reflexa.integrations.openrlhf_reward as m; print(m.__file__)")

OpenRLHF (OpenRLHF/OpenRLHF@3c3be6234e0c, openrlhf/utils/agent.py,
SingleTurnAgentExecutor) imports the file with ``importlib.util.spec_from_file_location``
and calls ``reward_func(queries, prompts, labels)`` in a thread
(``asyncio.to_thread``) with one sample per call, reading ``rewards``, ``scores``
(else ``rewards``) and ``extra_logs`` of the dict it returns. Each call is one
``POST /v1/reward/{capability}`` (the server locates each response in its query and
scores it with the capability's rubric; docs/trainers.md), retried by the client
on 429, 503 and connection failures, with a 300 s timeout (judged criteria wait on
an LLM).

A refusal raises the client's exception (its text: the server's message, field and
rule, e.g. ``… | field=query[0] | rule=prompt_not_found | status=422``), logged first
at WARNING on the ``reflexa.openrlhf`` logger: OpenRLHF catches any exception from
the reward function and logs it at *info* level only, leaving the sample without a
reward, and the run later fails with an unrelated ``reward_model_group is required
when rewards are not precomputed``; the WARNING is the line that says why.

``REFLEXA_REWARD_CAPABILITY`` is the capability's secret, its path
(``/v1/reward/rfxrw_…``) or its whole URL (then ``REFLEXA_URL`` is not needed). The
secret is replaced by ``<redacted>`` in the messages raised and logged here.
Only absolute imports: OpenRLHF executes this file as a module named ``reward_func``.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Sequence
from typing import Any

from reflexa._operations import Operation
from reflexa._transport import SyncTransport
from reflexa.config import DEFAULT_URL, ENV_URL, ClientConfig
from reflexa.errors import ReflexaError

ENV_CAPABILITY = "REFLEXA_REWARD_CAPABILITY"
TIMEOUT = 300.0
_PREFIX = "/v1/reward/"

log = logging.getLogger("reflexa.openrlhf")
_transports: dict[str, SyncTransport] = {}
_lock = threading.Lock()


def _target() -> tuple[str, str]:
    """(base URL, capability secret) from the environment."""
    value = (os.environ.get(ENV_CAPABILITY) or "").strip()
    if not value:
        raise ValueError(f"no reward capability: set {ENV_CAPABILITY} (POST …/rubrics/{{id}}/capabilities gives one)")
    base = (os.environ.get(ENV_URL) or DEFAULT_URL).rstrip("/")
    if _PREFIX in value:
        head, _, value = value.partition(_PREFIX)
        if head.startswith(("http://", "https://")):
            base = head.rstrip("/")
    if not value or "/" in value:
        raise ValueError(f"{ENV_CAPABILITY} must be a capability secret, its path /v1/reward/<secret> or its URL")
    return base, value


def _transport(base: str) -> SyncTransport:
    with _lock:
        if base not in _transports:  # no API key: the capability is the credential
            _transports[base] = SyncTransport(ClientConfig(base_url=base, api_key=None, timeout=TIMEOUT))
        return _transports[base]


def _plain(value: Any) -> Any:
    """A label as JSON (numpy scalars and arrays, tensors of one value, without importing them)."""
    if hasattr(value, "tolist"):
        return value.tolist()
    return value


def _answer(value: Any) -> dict[str, Any]:
    if not isinstance(value, dict) or not isinstance(value.get("rewards"), list):
        raise ValueError("expected OpenRLHF's {rewards, scores, extra_logs}")
    return value


def reward_func(queries: Sequence[str], prompts: Sequence[str], labels: Sequence[Any], **kwargs: Any) -> dict[str, Any]:
    """``{"rewards": [...], "scores": [...], "extra_logs": {"rubric/<id>": [...]}}``, one
    value per query, from the rubric of ``REFLEXA_REWARD_CAPABILITY``."""
    base, secret = _target()
    body = {"query": list(queries), "prompts": list(prompts), "labels": [_plain(label) for label in labels]}
    op = Operation("POST", _PREFIX + secret, _answer, body=body, retry="idempotent")
    try:
        return _transport(base).send(op)
    except ReflexaError as exc:
        exc.message = exc.message.replace(secret, "<redacted>")
        exc.args = (exc.message,)
        log.warning("reflexa: the rubric reward was refused or failed: %s", exc)
        raise
