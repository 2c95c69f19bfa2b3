"""The client's own copy of the v1 schemas.

The client never imports the server, so these mirror its models by hand. Request
models forbid unknown fields: a typo in a field name fails here, before a round
trip, instead of being silently dropped. Response models ignore unknown fields,
so this client keeps working when a newer server adds some.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Annotated, Any, Generic, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic_core import PydanticSerializationError

from reflexa.errors import InvalidInput

ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}$"
NAMESPACE_PATTERN = r"^[a-z0-9][a-z0-9_-]{0,62}$"

JSONObject = dict[str, Any]
ClientId = Annotated[str, Field(pattern=ID_PATTERN)]
Label = Annotated[str, Field(min_length=1, max_length=200)]
Role = Literal["admin", "operator", "agent", "trainer"]
TrajectoryStatus = Literal["open", "closed"]


class RequestModel(BaseModel):
    """Base of what the client sends. NaN and infinity are refused because JSON
    cannot carry them."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class ResponseModel(BaseModel):
    """Base of what the client reads."""

    model_config = ConfigDict(extra="ignore")


T = TypeVar("T")


class Page(ResponseModel, Generic[T]):
    """One page of a list; pass ``next_cursor`` as ``cursor`` to get the next (null at the end)."""

    items: list[T]
    next_cursor: str | None = None


# --- trajectories: what is sent -------------------------------------------------------------


class State(RequestModel):
    """What the agent saw: text, plus optional structured data."""

    observation: str
    data: JSONObject | None = None


class Step(RequestModel):
    """One step of a trajectory.

    ``index``, when given, must be the next free index of the trajectory, or an index
    already stored with an identical step (a replay, harmless). Giving it makes a
    retried append idempotent.
    """

    index: int | None = Field(None, ge=0)
    state: State
    internal_state: str | None = None
    action: str | JSONObject
    result: str | None = None
    error: str | None = None
    reward: float | None = None
    done: bool = False
    truncated: bool = False
    caused_failure: bool = False
    metadata: JSONObject | None = None


class Outcome(RequestModel):
    """How an episode ended. Reporting it closes the trajectory."""

    success: bool | None = None
    reward: float | None = None
    failure_reason: str | None = None
    details: JSONObject | None = None


class TrajectoryCreate(RequestModel):
    """One trajectory to store. Given an ``outcome`` it is stored closed."""

    id: ClientId | None = None
    task: str = Field(min_length=1)
    environment: Label | None = None
    agent: Label | None = None
    policy_version: Label | None = None
    group_id: ClientId | None = None
    metadata: JSONObject | None = None
    steps: list[Step] = Field(default_factory=list)
    outcome: Outcome | None = None
    retrieval_ids: list[ClientId] | None = None


class TrajectoryBatchCreate(RequestModel):
    trajectories: list[TrajectoryCreate] = Field(min_length=1)


class StepsAppend(RequestModel):
    steps: list[Step] = Field(min_length=1)


# --- trajectories: what is read -------------------------------------------------------------


class StateRead(ResponseModel):
    observation: str
    data: JSONObject | None = None


class StepRead(ResponseModel):
    index: int
    state: StateRead
    internal_state: str | None = None
    action: str | JSONObject
    result: str | None = None
    error: str | None = None
    reward: float | None = None
    done: bool = False
    truncated: bool = False
    caused_failure: bool = False
    metadata: JSONObject | None = None
    created_at: datetime


class OutcomeRead(ResponseModel):
    success: bool | None = None
    reward: float | None = None
    failure_reason: str | None = None
    details: JSONObject | None = None


class Trajectory(ResponseModel):
    """A stored trajectory. ``steps`` is present when asked for (get one, ``include_steps``)."""

    id: str
    namespace: str
    task: str
    environment: str | None = None
    agent: str | None = None
    policy_version: str | None = None
    group_id: str | None = None
    metadata: JSONObject | None = None
    retrieval_ids: list[str] | None = None
    status: TrajectoryStatus
    outcome: OutcomeRead | None = None
    step_count: int
    created_at: datetime
    updated_at: datetime
    closed_at: datetime | None = None
    steps: list[StepRead] | None = None


class TrajectoryWritten(Trajectory):
    """The answer to a write; ``consistency_token`` gives read-your-writes on retrieval."""

    consistency_token: str


class BatchItemResult(ResponseModel):
    id: str
    created: bool = Field(description="false: an identical trajectory was already stored (a replay)")
    step_count: int
    status: TrajectoryStatus


class BatchResult(ResponseModel):
    items: list[BatchItemResult]
    consistency_token: str

    @property
    def created(self) -> int:
        """How many trajectories this call stored (the rest were replays)."""
        return sum(1 for item in self.items if item.created)

    @property
    def replayed(self) -> int:
        return len(self.items) - self.created


class StepsAppended(ResponseModel):
    trajectory_id: str
    step_count: int
    appended: int = Field(description="steps newly stored by this call (replayed ones excluded)")
    consistency_token: str


class TrajectoryDeleted(ResponseModel):
    id: str
    deleted_steps: int
    deleted_reflections: int


# --- namespaces and keys --------------------------------------------------------------------


class NamespaceSettings(RequestModel):
    """Per-namespace behaviour; the server fills in what is left out."""

    gamma: float = Field(0.95, ge=0.0, le=1.0, description="discount for return-to-go")


class NamespaceCreate(RequestModel):
    name: str = Field(pattern=NAMESPACE_PATTERN)
    settings: NamespaceSettings | None = None


class NamespaceSettingsRead(ResponseModel):
    gamma: float = 0.95


class Namespace(ResponseModel):
    name: str
    settings: NamespaceSettingsRead
    created_at: datetime


class KeyCreate(RequestModel):
    role: Role
    namespaces: list[str] = Field(min_length=1, description='namespace names, or ["*"] for all')
    description: str | None = Field(None, max_length=200)


class Key(ResponseModel):
    id: str
    role: Role
    namespaces: list[str]
    description: str | None = None
    created_at: datetime
    revoked_at: datetime | None = None


class KeyCreated(Key):
    """A new key; ``key`` is the secret and is shown only in this response."""

    key: str


# --- turning user input into models ---------------------------------------------------------

M = TypeVar("M", bound=BaseModel)


def field_path(loc: tuple[int | str, ...], prefix: str = "") -> str:
    """Render a pydantic error location the way the server names fields:
    ``trajectories[3].steps[2].state.observation``."""
    path = prefix
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        else:
            path += f".{part}" if path else part
    return path


def coerce(model: type[M], value: M | Mapping[str, Any], *, field: str = "") -> M:
    """``value`` as a ``model``: instances pass through, mappings are validated.

    A validation failure becomes :class:`~reflexa.errors.InvalidInput` naming the
    field, exactly as the server would have answered, but without the round trip.
    """
    if isinstance(value, model):
        return value
    try:
        return model.model_validate(value)
    except ValidationError as exc:
        errors = exc.errors(include_url=False)
        first = errors[0]
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        raise InvalidInput(
            f"{first['msg']}{more}", field=field_path(tuple(first["loc"]), field) or None
        ) from None


def dump(model: BaseModel) -> dict[str, Any]:
    """The JSON body for ``model``: unset optionals left out, NaN in free-form
    objects turned to null (JSON cannot carry it). A value JSON cannot represent
    at all (an arbitrary object in ``metadata``) is refused as invalid input."""
    try:
        return model.model_dump(mode="json", exclude_none=True)
    except PydanticSerializationError as exc:
        raise InvalidInput(f"not representable as JSON: {exc}") from None
