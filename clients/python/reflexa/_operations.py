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
from typing import Any, Generic, TypeVar
from urllib.parse import quote

import httpx
from pydantic import BaseModel, ValidationError

from reflexa._retry import RetryMode
from reflexa.errors import InvalidResponse
from reflexa.models import (
    BatchResult,
    KeyCreate,
    KeyCreated,
    Namespace,
    NamespaceCreate,
    NamespaceSettings,
    Outcome,
    Page,
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


@dataclass(frozen=True)
class Operation(Generic[T]):
    """A request ready to send, and how to turn its 2xx answer into a ``T``."""

    method: str
    path: str
    read: Callable[[Any], T]
    body: dict[str, Any] | None = None
    params: dict[str, str] | None = None
    retry: RetryMode = "idempotent"

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


def create_namespace(
    name: str, settings: NamespaceSettings | Mapping[str, Any] | None
) -> Operation[Namespace]:
    body = coerce(NamespaceCreate, {"name": name, "settings": settings})
    return Operation("POST", "/v1/namespaces", _reader(Namespace), body=dump(body))


def list_namespaces(cursor: str | None) -> Operation[Page[Namespace]]:
    params = {"cursor": cursor} if cursor else None
    return Operation("GET", "/v1/namespaces", _reader(Page[Namespace]), params=params)


# --- trajectories ---------------------------------------------------------------------------


def create_trajectory(namespace: str, trajectory: TrajectoryInput) -> Operation[TrajectoryWritten]:
    body = with_id(trajectory)
    return Operation("POST", _trajectories(namespace), _reader(TrajectoryWritten), body=dump(body))


def create_trajectories(namespace: str, trajectories: Sequence[TrajectoryInput]) -> Operation[BatchResult]:
    items = [with_id(item, field=f"trajectories[{i}]") for i, item in enumerate(trajectories)]
    body = coerce(TrajectoryBatchCreate, {"trajectories": items})
    return Operation("POST", f"{_trajectories(namespace)}/batch", _reader(BatchResult), body=dump(body))


def get_trajectory(namespace: str, trajectory_id: str) -> Operation[Trajectory]:
    path = f"{_trajectories(namespace)}/{_segment(trajectory_id)}"
    return Operation("GET", path, _reader(Trajectory))


def list_trajectories(
    namespace: str, filters: Mapping[str, str | int | bool | None]
) -> Operation[Page[Trajectory]]:
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
    return Operation("POST", path, _reader(StepsAppended), body=dump(body), retry=retry)


def report_outcome(namespace: str, trajectory_id: str, outcome: OutcomeInput) -> Operation[TrajectoryWritten]:
    body = coerce(Outcome, outcome)
    path = f"{_trajectories(namespace)}/{_segment(trajectory_id)}/outcome"
    return Operation("POST", path, _reader(TrajectoryWritten), body=dump(body))


def delete_trajectory(namespace: str, trajectory_id: str) -> Operation[TrajectoryDeleted]:
    path = f"{_trajectories(namespace)}/{_segment(trajectory_id)}"
    # A repeated delete answers 404, which would hide that the first one worked.
    return Operation("DELETE", path, _reader(TrajectoryDeleted), retry="unsent")
