"""One function per route: what to send and how to read the answer.

The sync and async clients only differ in how they wait for I/O, so everything
else — paths, bodies, query parameters, validation, which requests may be retried,
response parsing — is built here once as an :class:`Operation` and executed by
either transport.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Generic, Literal, TypeVar, get_args
from urllib.parse import quote

import httpx
from pydantic import BaseModel, ValidationError

from reflexa._retry import RetryMode
from reflexa.errors import InvalidInput, InvalidResponse
from reflexa.models import (
    BatchResult,
    KeyCreate,
    KeyCreated,
    Namespace,
    NamespaceCreate,
    NamespaceSettings,
    Outcome,
    Page,
    RenderOptions,
    RetrievalOutcome,
    RetrievalOutcomeReport,
    RetrieveBatchRequest,
    RetrieveBatchResult,
    RetrieveFilters,
    RetrieveRequest,
    RetrieveResult,
    Step,
    StepsAppend,
    StepsAppended,
    Trajectory,
    TrajectoryBatchCreate,
    TrajectoryCreate,
    TrajectoryDeleted,
    TrajectoryWritten,
    coerce,
    dump,
)

T = TypeVar("T")
M = TypeVar("M", bound=BaseModel)

StepInput = Step | Mapping[str, Any]
TrajectoryInput = TrajectoryCreate | Mapping[str, Any]
OutcomeInput = Outcome | Mapping[str, Any]
FiltersInput = RetrieveFilters | Mapping[str, Any]
#: A format name (``"markdown"``, ``"text"``, ``"json"``), or the full options.
RenderInput = str | RenderOptions | Mapping[str, Any]


@dataclass(frozen=True)
class Operation(Generic[T]):
    """A request ready to send, and how to turn its 2xx answer into a ``T``."""

    method: str
    path: str
    read: Callable[[Any], T]
    body: dict[str, Any] | None = None
    params: dict[str, str] | None = None
    retry: RetryMode = "idempotent"
    #: A write: its answer's ``consistency_token`` joins the client's read-your-writes
    #: session of this namespace (see :mod:`reflexa._consistency`).
    session_namespace: str | None = None
    #: Seconds the server may deliberately wait before answering; added to the read timeout.
    server_wait: float = 0.0

    def parse(self, response: httpx.Response) -> T:
        """The answer as a ``T``; a 2xx we cannot read means we are not talking to Reflexa."""
        try:
            return self.read(response.json())
        except (ValueError, ValidationError) as exc:
            raise InvalidResponse(
                f"{self.method} {self.path}: unreadable {response.status_code} answer ({exc})",
                status=response.status_code,
            ) from None


def _reader(model: type[M]) -> Callable[[Any], M]:
    return model.model_validate


def _json_object(value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ValueError("expected a JSON object")
    return value


def _segment(value: str) -> str:
    """A path segment, escaped so that an id can never change the route."""
    return quote(value, safe="")


def _trajectories(namespace: str) -> str:
    return f"/v1/namespaces/{_segment(namespace)}/trajectories"


def new_trajectory_id() -> str:
    """A fresh client-side id: it is what makes a retried create idempotent."""
    return uuid.uuid4().hex


def with_id(trajectory: TrajectoryInput, *, field: str = "") -> TrajectoryCreate:
    """``trajectory`` validated, with a new id if it had none."""
    model = coerce(TrajectoryCreate, trajectory, field=field)
    if model.id is None:
        model = model.model_copy(update={"id": new_trajectory_id()})
    return model


# --- health ---------------------------------------------------------------------------------


def healthz() -> Operation[dict[str, Any]]:
    return Operation("GET", "/healthz", _json_object, retry="never")


def readyz() -> Operation[dict[str, Any]]:
    return Operation("GET", "/readyz", _json_object, retry="never")


# --- keys and namespaces --------------------------------------------------------------------


def create_key(role: str, namespaces: Sequence[str], description: str | None) -> Operation[KeyCreated]:
    body = coerce(KeyCreate, {"role": role, "namespaces": list(namespaces), "description": description})
    # A repeat would mint a second key, so only retry when the first surely did not arrive.
    return Operation("POST", "/v1/keys", _reader(KeyCreated), body=dump(body), retry="unsent")


def create_namespace(name: str, settings: NamespaceSettings | Mapping[str, Any] | None) -> Operation[Namespace]:
    body = coerce(NamespaceCreate, {"name": name, "settings": settings})
    return Operation("POST", "/v1/namespaces", _reader(Namespace), body=dump(body))


def list_namespaces(cursor: str | None) -> Operation[Page[Namespace]]:
    params = {"cursor": cursor} if cursor else None
    return Operation("GET", "/v1/namespaces", _reader(Page[Namespace]), params=params)


# --- trajectories ---------------------------------------------------------------------------


def create_trajectory(namespace: str, trajectory: TrajectoryInput) -> Operation[TrajectoryWritten]:
    body = with_id(trajectory)
    return Operation(
        "POST", _trajectories(namespace), _reader(TrajectoryWritten), body=dump(body), session_namespace=namespace
    )


def create_trajectories(namespace: str, trajectories: Sequence[TrajectoryInput]) -> Operation[BatchResult]:
    items = [with_id(item, field=f"trajectories[{i}]") for i, item in enumerate(trajectories)]
    body = coerce(TrajectoryBatchCreate, {"trajectories": items})
    path = f"{_trajectories(namespace)}/batch"
    return Operation("POST", path, _reader(BatchResult), body=dump(body), session_namespace=namespace)


def get_trajectory(namespace: str, trajectory_id: str) -> Operation[Trajectory]:
    path = f"{_trajectories(namespace)}/{_segment(trajectory_id)}"
    return Operation("GET", path, _reader(Trajectory))


def list_trajectories(namespace: str, filters: Mapping[str, str | int | bool | None]) -> Operation[Page[Trajectory]]:
    """Filters left at ``None`` are not sent; booleans go as ``true`` / ``false``."""
    params = {
        name: (str(value).lower() if isinstance(value, bool) else str(value))
        for name, value in filters.items()
        if value is not None
    }
    return Operation("GET", _trajectories(namespace), _reader(Page[Trajectory]), params=params)


def append_steps(namespace: str, trajectory_id: str, steps: Sequence[StepInput]) -> Operation[StepsAppended]:
    models = [coerce(Step, step, field=f"steps[{i}]") for i, step in enumerate(steps)]
    body = coerce(StepsAppend, {"steps": models})
    # Indexed steps replay harmlessly; unindexed ones would be stored twice.
    retry: RetryMode = "idempotent" if all(step.index is not None for step in models) else "unsent"
    path = f"{_trajectories(namespace)}/{_segment(trajectory_id)}/steps"
    return Operation("POST", path, _reader(StepsAppended), body=dump(body), retry=retry, session_namespace=namespace)


def report_outcome(
    namespace: str, trajectory_id: str, outcome: OutcomeInput, wait_ms: int = 0
) -> Operation[TrajectoryWritten]:
    """With ``wait_ms``, the server answers only once the episode is searchable
    (:class:`~reflexa.errors.ConsistencyTimeout` after ``wait_ms``; the outcome is stored either way)."""
    body = coerce(Outcome, outcome)
    if isinstance(wait_ms, bool) or not isinstance(wait_ms, int) or wait_ms < 0:
        raise InvalidInput(f"wait_ms must be an integer >= 0, not {wait_ms!r}", field="wait_ms")
    path = f"{_trajectories(namespace)}/{_segment(trajectory_id)}/outcome"
    return Operation(
        "POST",
        path,
        _reader(TrajectoryWritten),
        body=dump(body),
        params={"wait_ms": str(wait_ms)} if wait_ms else None,
        session_namespace=namespace,
        server_wait=wait_ms / 1000,
    )


def delete_trajectory(namespace: str, trajectory_id: str) -> Operation[TrajectoryDeleted]:
    path = f"{_trajectories(namespace)}/{_segment(trajectory_id)}"
    # A repeated delete answers 404, which would hide that the first one worked.
    return Operation("DELETE", path, _reader(TrajectoryDeleted), retry="unsent")


# --- retrieval ------------------------------------------------------------------------------


def retrieve_request(
    observation: str,
    *,
    data: Mapping[str, Any] | None,
    internal_state: str | None,
    task: str | None,
    environment: str | None,
    kinds: Sequence[str] | None,
    k: int,
    min_score: float | None,
    mmr_lambda: float | None,
    filters: FiltersInput | None,
    render: RenderInput | None,
    trajectory_id: str | None,
    consistency_token: str | None,
    wait_timeout_ms: int,
) -> RetrieveRequest:
    """The retrieve body from the client's arguments, validated; a format name is
    accepted for ``render``. ``wait_timeout_ms`` is only sent along with a token."""
    if isinstance(render, str):
        render = {"format": render}
    return coerce(
        RetrieveRequest,
        {
            "state": {"observation": observation, "data": data},
            "internal_state": internal_state,
            "task": task,
            "environment": environment,
            "kinds": list(kinds) if kinds is not None else None,
            "k": k,
            "min_score": min_score,
            "mmr_lambda": mmr_lambda,
            "filters": filters,
            "render": render,
            "trajectory_id": trajectory_id,
            "consistency_token": consistency_token,
            "wait_timeout_ms": wait_timeout_ms if consistency_token is not None else None,
        },
    )


def retrieve(namespace: str, request: RetrieveRequest | Mapping[str, Any]) -> Operation[RetrieveResult]:
    body = coerce(RetrieveRequest, request)
    # Each retrieve is logged; one tied to an episode is credited when the episode
    # closes, so a repeat of one that may have been served would be credited twice.
    retry: RetryMode = "unsent" if body.trajectory_id is not None else "idempotent"
    wait = (body.wait_timeout_ms if body.wait_timeout_ms is not None else 5000) if body.consistency_token else 0
    return Operation(
        "POST",
        f"/v1/namespaces/{_segment(namespace)}/retrieve",
        _reader(RetrieveResult),
        body=dump(body),
        retry=retry,
        server_wait=wait / 1000,
    )


def retrieve_batch(
    namespace: str, requests: Sequence[RetrieveRequest | Mapping[str, Any]]
) -> Operation[RetrieveBatchResult]:
    body = coerce(RetrieveBatchRequest, {"requests": [coerce(RetrieveRequest, r) for r in requests]})
    # As for one retrieve: a batch tied to episodes must not be logged twice.
    tied = any(r.trajectory_id is not None for r in body.requests)
    waits = [
        (r.wait_timeout_ms if r.wait_timeout_ms is not None else 5000) for r in body.requests if r.consistency_token
    ]
    return Operation(
        "POST",
        f"/v1/namespaces/{_segment(namespace)}/retrieve/batch",
        _reader(RetrieveBatchResult),
        body=dump(body),
        retry="unsent" if tied else "idempotent",
        server_wait=sum(waits) / 1000,
    )


def report_retrieval_outcome(
    namespace: str, retrieval_id: str, outcome: RetrievalOutcomeReport | Mapping[str, Any]
) -> Operation[RetrievalOutcome]:
    body = coerce(RetrievalOutcomeReport, outcome)
    path = f"/v1/namespaces/{_segment(namespace)}/retrievals/{_segment(retrieval_id)}/outcome"
    # An identical repeat is a replay (credited_items 0), so retries are safe.
    return Operation("POST", path, _reader(RetrievalOutcome), body=dump(body))


# --- export ---------------------------------------------------------------------------------

ExportDataset = Literal["trajectories", "sft", "preferences", "attempts"]
ExportFormat = Literal["jsonl", "parquet"]
EXPORT_DATASETS: tuple[str, ...] = get_args(ExportDataset)
EXPORT_FORMATS: tuple[str, ...] = get_args(ExportFormat)
#: The query parameters GET …/export reads besides ``dataset`` and ``format``.
EXPORT_FILTERS = frozenset(
    {
        "environment",
        "agent",
        "policy_version",
        "group_id",
        "task",
        "success",
        "created_after",
        "created_before",
        "limit",
        "snapshot",
        "context",
        "history",
        "max_pairs_per_state",
        "hints",
    }
)


@dataclass(frozen=True)
class Download:
    """A request whose 2xx answer is a stream of bytes to write somewhere, not JSON
    (the transports' ``stream``); retried like an :class:`Operation`."""

    method: str
    path: str
    params: dict[str, str]
    retry: RetryMode = "idempotent"
    server_wait: float = 0.0


def _query_value(name: str, value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise InvalidInput(f"{name} needs a timezone", field=name)
        return value.isoformat()
    return str(value)


def export_dataset(namespace: str, dataset: str, format: str, filters: Mapping[str, Any]) -> Download:
    """GET …/export; filters left at ``None`` are not sent, unknown ones are refused here."""
    if dataset not in EXPORT_DATASETS:
        raise InvalidInput(f"dataset must be one of {', '.join(EXPORT_DATASETS)}, not {dataset!r}", field="dataset")
    if format not in EXPORT_FORMATS:
        raise InvalidInput(f"format must be one of {', '.join(EXPORT_FORMATS)}, not {format!r}", field="format")
    unknown = sorted(set(filters) - EXPORT_FILTERS)
    if unknown:
        raise InvalidInput(f"unknown export filter {unknown[0]!r}", field=unknown[0])
    params = {"dataset": dataset, "format": format}
    params.update((name, _query_value(name, value)) for name, value in filters.items() if value is not None)
    # Reads only, and under a snapshot the same bytes every time: a retry starts over.
    return Download("GET", f"/v1/namespaces/{_segment(namespace)}/export", params)
