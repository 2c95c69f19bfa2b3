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
from typing import TYPE_CHECKING, Any, Generic, Literal, TypedDict, TypeVar, get_args
from urllib.parse import quote

import httpx
from pydantic import BaseModel, ValidationError

from reflexa import _advantage_batches as batches
from reflexa._retry import RetryMode
from reflexa.errors import InvalidInput, InvalidResponse
from reflexa.models import (
    AdvantageGroup,
    AdvantageMethod,
    AdvantagesRequest,
    AdvantagesResponse,
    BatchResult,
    CheckRequest,
    CheckResult,
    ContextsRequest,
    ContextsResult,
    ContextTrajectory,
    FreezeState,
    Key,
    KeyCreate,
    KeyCreated,
    LeakageOptions,
    Namespace,
    NamespaceCreate,
    NamespaceSettings,
    Outcome,
    Page,
    PrefixesRequest,
    PrefixesResponse,
    RenderOptions,
    RetrievalOutcome,
    RetrievalOutcomeReport,
    RetrieveBatchRequest,
    RetrieveBatchResult,
    RetrieveFilters,
    RetrieveRequest,
    RetrieveResult,
    RewardCapability,
    RewardCapabilityCreate,
    RewardCapabilityCreated,
    Rubric,
    RubricBatchScore,
    RubricCreate,
    RubricScore,
    RubricScoreBatchRequest,
    RubricScoreItem,
    RubricScoreRequest,
    Snapshot,
    SnapshotCreate,
    SortOrder,
    Step,
    StepsAppend,
    StepsAppended,
    TaskGroupBy,
    TaskSort,
    TaskStatsPage,
    TeacherContextsOptions,
    TeacherLogprobsItem,
    TeacherLogprobsRequest,
    TeacherLogprobsResult,
    TeacherSpec,
    Trajectory,
    TrajectoryBatchCreate,
    TrajectoryCreate,
    TrajectoryDeleted,
    TrajectoryStatus,
    TrajectoryWritten,
    coerce,
    dump,
)

if TYPE_CHECKING:
    from typing_extensions import Unpack

T = TypeVar("T")
M = TypeVar("M", bound=BaseModel)

StepInput = Step | Mapping[str, Any]
TrajectoryInput = TrajectoryCreate | Mapping[str, Any]
OutcomeInput = Outcome | Mapping[str, Any]
FiltersInput = RetrieveFilters | Mapping[str, Any]
#: A format name (``"markdown"``, ``"text"``, ``"json"``), or the full options.
RenderInput = str | RenderOptions | Mapping[str, Any]
#: A stored trajectory's id, ``{"id": …}``, or an inline trajectory (a model or its fields).
ContextTrajectoryInput = str | ContextTrajectory | TrajectoryCreate | Mapping[str, Any]
#: A teacher kind (``"memory"``, ``"hindsight"``, …), or the full spec.
TeacherInput = str | TeacherSpec | Mapping[str, Any]
#: A teacher-scoring item: the model, or its fields, where ``continuation`` may also be
#: a list of token ids or a text, and ``context`` a text, a list of token ids, a list of
#: chat messages, or a context read from :meth:`reflexa.Client.distill_contexts`.
TeacherItemInput = TeacherLogprobsItem | Mapping[str, Any]
#: A rollout group of POST /v1/distill/advantages: the model, or its fields
#: (``{"group_id": …, "trajectories": [{"id", "reward", "mask", "logprobs", …}]}``).
AdvantageGroupInput = AdvantageGroup | Mapping[str, Any]


@dataclass(frozen=True)
class Operation(Generic[T]):
    """A request ready to send, and how to turn its 2xx answer into a ``T``."""

    method: str
    path: str
    read: Callable[[Any], T]
    body: dict[str, Any] | None = None
    params: dict[str, str] | None = None
    #: A JSON body already encoded (sent as it is, instead of ``body``).
    content: bytes | None = None
    retry: RetryMode = "idempotent"
    #: A write: its answer's ``consistency_token`` joins the client's read-your-writes
    #: session of this namespace (see :mod:`reflexa._consistency`).
    session_namespace: str | None = None
    #: Seconds the server may deliberately wait before answering; added to the read timeout.
    server_wait: float = 0.0
    #: The media type of ``content`` (default JSON) and the answer's asked for (default JSON).
    content_type: str | None = None
    accept: str | None = None
    #: Reads the answer's bytes (a non-JSON ``accept``), instead of ``read`` on its JSON.
    read_bytes: Callable[[bytes], T] | None = None

    def headers(self, base: Mapping[str, str]) -> Mapping[str, str]:
        """The request's headers: ``base`` (the client's), with this body's media types."""
        if self.content is None and self.accept is None:
            return base
        out = dict(base)
        if self.content is not None:
            out["Content-Type"] = self.content_type or "application/json"
        if self.accept is not None:
            out["Accept"] = self.accept
        return out

    def parse(self, response: httpx.Response) -> T:
        """The answer as a ``T``; a 2xx we cannot read means we are not talking to Reflexa."""
        try:
            if self.read_bytes is not None:
                return self.read_bytes(response.content)
            return self.read(None if response.status_code == 204 else response.json())
        except (ValueError, KeyError, ValidationError) as exc:
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


def _require_list(name: str, value: object) -> None:
    """A lone string or mapping where a list belongs is refused, naming the argument
    (iterated, it would pass for a list of characters or keys)."""
    if isinstance(value, str | Mapping):
        raise InvalidInput(f"{name} must be a list, not one {type(value).__name__}", field=name)


def _nothing(value: Any) -> None:
    """The reader of an answer without a body (204)."""


def _segment(value: str) -> str:
    """A path segment, escaped so that an id can never change the route."""
    return quote(value, safe="")


def _trajectories(namespace: str) -> str:
    return f"/v1/namespaces/{_segment(namespace)}/trajectories"


def new_trajectory_id() -> str:
    """A fresh client-side id: it is what makes a retried create idempotent."""
    return uuid.uuid4().hex


def _every_keyword(
    operation: str, kind: type[Any], given: Mapping[str, Any], defaults: Mapping[str, Any]
) -> dict[str, Any]:
    """Each keyword of ``kind`` (a TypedDict of keyword arguments) in its declared order,
    given or defaulted (``None``); one that is none of them is refused as Python refuses
    an unknown parameter."""
    unknown = sorted(set(given) - kind.__optional_keys__)
    if unknown:
        raise TypeError(f"{operation}() got an unexpected keyword argument {unknown[0]!r}")
    chosen = {**defaults, **given}
    return {name: chosen.get(name) for name in kind.__annotations__}


class TrajectoryFields(TypedDict, total=False):
    """A trajectory's own fields besides its id, task, steps and outcome, as
    :meth:`reflexa.Client.create_trajectory` and :meth:`reflexa.Client.episode` take them."""

    environment: str | None
    agent: str | None
    policy_version: str | None
    group_id: str | None
    parent_trajectory_id: str | None
    attempt: int | None
    metadata: Mapping[str, Any] | None
    retrieval_ids: Sequence[str] | None


def trajectory_header(operation: str, id: str | None, task: str, fields: Mapping[str, Any]) -> dict[str, Any]:
    """A trajectory's body but its steps and outcome, every field named (``None`` where
    not given); a keyword that is none of them is a TypeError naming ``operation``."""
    header = {"id": id, "task": task, **_every_keyword(operation, TrajectoryFields, fields, {})}
    if header["retrieval_ids"] is not None:
        header["retrieval_ids"] = list(header["retrieval_ids"])
    return header


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


def list_keys() -> Operation[list[Key]]:
    return Operation("GET", "/v1/keys", lambda value: [Key.model_validate(k) for k in value])


def revoke_key(key_id: str) -> Operation[Key]:
    # Revoking twice answers the same: safe to retry.
    return Operation("DELETE", f"/v1/keys/{_segment(key_id)}", _reader(Key))


def rotate_key(key_id: str, grace_seconds: int, description: str | None = None) -> Operation[KeyCreated]:
    # Each call mints a new key: retried only when the first surely did not arrive.
    body: dict[str, Any] = {"grace_seconds": grace_seconds}
    if description is not None:
        body["description"] = description
    return Operation("POST", f"/v1/keys/{_segment(key_id)}/rotate", _reader(KeyCreated), body=body, retry="unsent")


def create_namespace(name: str, settings: NamespaceSettings | Mapping[str, Any] | None) -> Operation[Namespace]:
    body = coerce(NamespaceCreate, {"name": name, "settings": settings})
    return Operation("POST", "/v1/namespaces", _reader(Namespace), body=dump(body))


def list_namespaces(cursor: str | None) -> Operation[Page[Namespace]]:
    params = {"cursor": cursor} if cursor else None
    return Operation("GET", "/v1/namespaces", _reader(Page[Namespace]), params=params)


def get_namespace(namespace: str) -> Operation[Namespace]:
    return Operation("GET", f"/v1/namespaces/{_segment(namespace)}", _reader(Namespace))


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


class TrajectoryFilters(TypedDict, total=False):
    """The filters of :meth:`reflexa.Client.list_trajectories` and ``iter_trajectories``;
    one left out (or ``None``) matches every trajectory. ``include_steps`` (default
    false) returns each trajectory with its steps."""

    environment: str | None
    agent: str | None
    task: str | None
    policy_version: str | None
    group_id: str | None
    status: TrajectoryStatus | None
    success: bool | None
    include_steps: bool


def list_trajectories(
    namespace: str, *, limit: int | None = None, cursor: str | None = None, **filters: Unpack[TrajectoryFilters]
) -> Operation[Page[Trajectory]]:
    """Filters left at ``None`` are not sent; booleans go as ``true`` / ``false``."""
    chosen = _every_keyword("list_trajectories", TrajectoryFilters, filters, {"include_steps": False})
    given = {"limit": limit, "cursor": cursor, **chosen}
    params = {
        name: (str(value).lower() if isinstance(value, bool) else str(value))
        for name, value in given.items()
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
    snapshot: str | None,
    consistency_token: str | None,
    wait_timeout_ms: int,
    step: int | None = None,
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
            "step": step,
            "snapshot": snapshot,
            "consistency_token": consistency_token,
            "wait_timeout_ms": wait_timeout_ms if consistency_token is not None else None,
        },
    )


def names_snapshot(requests: Sequence[RetrieveRequest]) -> bool:
    """Whether a retrieve (or batch) reads a snapshot: it never changes, so there
    is nothing to wait for, and no session token may go with it."""
    return any(r.snapshot is not None for r in requests)


def _no_token_under_snapshot(request: RetrieveRequest, field: str = "consistency_token") -> None:
    if request.snapshot is not None and request.consistency_token is not None:
        raise InvalidInput(
            "a snapshot never changes; there is nothing to wait for", field=field, rule="not_with_snapshot"
        )


def _logged(request: RetrieveRequest) -> bool:
    """Tied to an episode and logged (a snapshot read is not): its repeat would be credited twice."""
    return request.trajectory_id is not None and request.snapshot is None


def retrieve(namespace: str, request: RetrieveRequest | Mapping[str, Any]) -> Operation[RetrieveResult]:
    body = coerce(RetrieveRequest, request)
    _no_token_under_snapshot(body)
    # Each live retrieve is logged; one tied to an episode is credited when the episode
    # closes, so a repeat of one that may have been served would be credited twice.
    retry: RetryMode = "unsent" if _logged(body) else "idempotent"
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
    for i, request in enumerate(body.requests):
        _no_token_under_snapshot(request, f"requests[{i}].consistency_token")
    # As for one retrieve: a batch tied to episodes must not be logged twice.
    tied = any(_logged(r) for r in body.requests)
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


def check_request(
    observation: str,
    action: str | Mapping[str, Any],
    *,
    data: Mapping[str, Any] | None,
    internal_state: str | None,
    task: str | None,
    k: int | None,
    filters: FiltersInput | None,
    environment: str | None = None,
    consistency_token: str | None = None,
) -> CheckRequest:
    """The check body from the client's arguments, validated (``k`` left out: the server's default)."""
    return coerce(
        CheckRequest,
        {
            "state": {"observation": observation, "data": data},
            "internal_state": internal_state,
            "task": task,
            "action": action if isinstance(action, str) else dict(action),
            "environment": environment,
            "k": k,
            "filters": filters,
            "consistency_token": consistency_token,
        },
    )


def check_action(namespace: str, request: CheckRequest | Mapping[str, Any]) -> Operation[CheckResult]:
    body = coerce(CheckRequest, request)
    # Logged as a retrieval, but tied to no episode: nothing is credited twice on a repeat.
    wait = (body.wait_timeout_ms if body.wait_timeout_ms is not None else 5000) if body.consistency_token else 0
    path = f"/v1/namespaces/{_segment(namespace)}/check"
    return Operation("POST", path, _reader(CheckResult), body=dump(body), server_wait=wait / 1000)


def report_retrieval_outcome(
    namespace: str, retrieval_id: str, outcome: RetrievalOutcomeReport | Mapping[str, Any]
) -> Operation[RetrievalOutcome]:
    body = coerce(RetrievalOutcomeReport, outcome)
    path = f"/v1/namespaces/{_segment(namespace)}/retrievals/{_segment(retrieval_id)}/outcome"
    # An identical repeat is a replay (credited_items 0), so retries are safe.
    return Operation("POST", path, _reader(RetrievalOutcome), body=dump(body))


# --- snapshots and freezes ------------------------------------------------------------------


def _namespace(namespace: str) -> str:
    return f"/v1/namespaces/{_segment(namespace)}"


def new_snapshot_id() -> str:
    """A fresh client-side snapshot id (the server's own form): a retried create replays."""
    return "snap_" + uuid.uuid4().hex


def create_snapshot(namespace: str, id: str | None, note: str | None) -> Operation[Snapshot]:
    body = coerce(SnapshotCreate, {"id": id or new_snapshot_id(), "note": note})
    # With its id fixed before the first attempt, a repeat is a replay (200), not a second snapshot.
    return Operation("POST", f"{_namespace(namespace)}/snapshots", _reader(Snapshot), body=dump(body))


def list_snapshots(namespace: str, limit: int | None, cursor: str | None) -> Operation[Page[Snapshot]]:
    params = {name: str(value) for name, value in (("limit", limit), ("cursor", cursor)) if value is not None}
    return Operation("GET", f"{_namespace(namespace)}/snapshots", _reader(Page[Snapshot]), params=params or None)


def get_snapshot(namespace: str, snapshot_id: str) -> Operation[Snapshot]:
    return Operation("GET", f"{_namespace(namespace)}/snapshots/{_segment(snapshot_id)}", _reader(Snapshot))


def delete_snapshot(namespace: str, snapshot_id: str) -> Operation[None]:
    path = f"{_namespace(namespace)}/snapshots/{_segment(snapshot_id)}"
    # A repeated delete answers 404, which would hide that the first one worked.
    return Operation("DELETE", path, _nothing, retry="unsent")


def get_freeze(namespace: str) -> Operation[FreezeState]:
    return Operation("GET", f"{_namespace(namespace)}/freeze", _reader(FreezeState))


def freeze(namespace: str) -> Operation[FreezeState]:
    # Idempotent on the server: freezing a frozen namespace keeps its first frozen_at.
    return Operation("PUT", f"{_namespace(namespace)}/freeze", _reader(FreezeState))


def thaw(namespace: str) -> Operation[FreezeState]:
    return Operation("DELETE", f"{_namespace(namespace)}/freeze", _reader(FreezeState))


# --- curriculum statistics ------------------------------------------------------------------

TASK_GROUP_BYS: tuple[str, ...] = get_args(TaskGroupBy)
TASK_SORTS: tuple[str, ...] = get_args(TaskSort)
SORT_ORDERS: tuple[str, ...] = get_args(SortOrder)


def _one_of(name: str, value: str, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise InvalidInput(f"{name} must be one of {', '.join(allowed)}, not {value!r}", field=name)


def _count(name: str, value: int | None, minimum: int) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < minimum):
        raise InvalidInput(f"{name} must be an integer >= {minimum}, not {value!r}", field=name)


class TaskFilters(TypedDict, total=False):
    """How :meth:`reflexa.Client.list_tasks` and ``iter_tasks`` group, sort and narrow
    the rows: ``group_by`` (default ``"task"``), ``sort`` (default ``"learning_signal"``),
    ``order`` (default ``"desc"``); ``environment``, ``agent``, ``policy_version``,
    ``min_attempts`` and ``snapshot`` left out (or ``None``) narrow nothing."""

    group_by: TaskGroupBy
    sort: TaskSort
    order: SortOrder
    environment: str | None
    agent: str | None
    policy_version: str | None
    min_attempts: int | None
    snapshot: str | None


def list_tasks(
    namespace: str, *, limit: int | None = None, cursor: str | None = None, **filters: Unpack[TaskFilters]
) -> Operation[TaskStatsPage]:
    """GET …/tasks; parameters left at ``None`` are not sent (the server's defaults apply)."""
    defaults = {"group_by": "task", "sort": "learning_signal", "order": "desc"}
    given = _every_keyword("list_tasks", TaskFilters, filters, defaults)
    _one_of("group_by", given["group_by"], TASK_GROUP_BYS)
    _one_of("sort", given["sort"], TASK_SORTS)
    _one_of("order", given["order"], SORT_ORDERS)
    _count("min_attempts", given.get("min_attempts"), 0)
    _count("limit", limit, 1)
    given |= {"limit": limit, "cursor": cursor}
    params = {name: str(value) for name, value in given.items() if value is not None}
    return Operation("GET", f"{_namespace(namespace)}/tasks", _reader(TaskStatsPage), params=params)


# --- teacher contexts -----------------------------------------------------------------------


def _context_trajectory(value: ContextTrajectoryInput, field: str) -> ContextTrajectory:
    if isinstance(value, str):
        value = {"id": value}
    elif isinstance(value, TrajectoryCreate) and not isinstance(value, ContextTrajectory):
        value = value.model_dump(exclude_unset=True)
    return coerce(ContextTrajectory, value, field=field)


def _teacher(value: TeacherInput, field: str) -> TeacherSpec:
    return coerce(TeacherSpec, {"kind": value} if isinstance(value, str) else value, field=field)


def distill_contexts(
    namespace: str,
    trajectories: Sequence[ContextTrajectoryInput],
    teachers: Sequence[TeacherInput],
    *,
    snapshot: str | None,
    leakage: LeakageOptions | Mapping[str, Any] | None,
    template: str | None,
    history_max_chars: int | None,
    include: Sequence[str] | None,
    steps: Sequence[int] | None,
    fade: Mapping[str, Any] | None = None,
) -> Operation[ContextsResult]:
    """POST …/distill/contexts. Stored trajectories may be given by id alone (a string);
    inline ones keep the id they have (none: answered with ``id`` null)."""
    _require_list("trajectories", trajectories)
    _require_list("teachers", teachers)
    request = coerce(
        ContextsRequest,
        {
            "snapshot": snapshot,
            "template": template,
            "trajectories": [_context_trajectory(t, f"trajectories[{i}]") for i, t in enumerate(trajectories)],
            "teachers": [_teacher(t, f"teachers[{i}]") for i, t in enumerate(teachers)],
            "leakage": leakage,
            "history_max_chars": history_max_chars,
            "include": [include] if isinstance(include, str) else (list(include) if include is not None else None),
            "steps": list(steps) if steps is not None else None,
            "fade": dict(fade) if fade is not None else None,
        },
    )
    body = dump(request)
    # A stored trajectory is named by its id alone (dump would add the defaults, steps=[]).
    body["trajectories"] = [
        {"id": t.id} if t.stored else sent for t, sent in zip(request.trajectories, body["trajectories"], strict=True)
    ]
    # A read: nothing is logged or credited, so a repeat is harmless (and under a snapshot, identical).
    return Operation("POST", f"{_namespace(namespace)}/distill/contexts", _reader(ContextsResult), body=body)


def distill_prefixes(
    namespace: str,
    *,
    step: int,
    schedule: Mapping[str, Any],
    tasks: Sequence[str] | None,
    trajectories: Sequence[str | Mapping[str, Any]] | None,
    k: int | None,
    snapshot: str | None,
    leakage: Mapping[str, Any] | None,
) -> Operation[PrefixesResponse]:
    """POST …/distill/prefixes. Stored trajectories may be given by id alone (a string)."""
    _require_list("tasks", tasks)
    _require_list("trajectories", trajectories)
    request = coerce(
        PrefixesRequest,
        {
            "snapshot": snapshot,
            "tasks": list(tasks) if tasks is not None else None,
            "trajectories": None
            if trajectories is None
            else [{"id": t} if isinstance(t, str) else dict(t) for t in trajectories],
            "step": step,
            "schedule": dict(schedule),
            "k": k,
            "leakage": leakage,
        },
    )
    # A read: nothing is logged, so a repeat is harmless (and under a snapshot, identical).
    return Operation("POST", f"{_namespace(namespace)}/distill/prefixes", _reader(PrefixesResponse), body=dump(request))


# --- teacher scoring ------------------------------------------------------------------------


def _as_continuation(value: Any) -> Any:
    if isinstance(value, str):
        return {"text": value}
    if isinstance(value, Sequence) and all(isinstance(t, int) and not isinstance(t, bool) for t in value):
        return {"token_ids": list(value)}
    return value


def _as_context(value: Any) -> Any:
    """A context read from distill_contexts (its text, else its messages), a text, token
    ids, chat messages, or the fields themselves."""
    if isinstance(value, BaseModel) and hasattr(value, "messages") and hasattr(value, "text"):
        if value.text is not None:
            return {"text": value.text}
        messages = value.messages or []
        return {"messages": [{"role": m.role, "content": m.content} for m in messages]}
    if isinstance(value, str):
        return {"text": value}
    if isinstance(value, Sequence) and value and all(isinstance(t, int) and not isinstance(t, bool) for t in value):
        return {"token_ids": list(value)}
    if isinstance(value, Sequence) and value and all(isinstance(m, Mapping | BaseModel) for m in value):
        return {"messages": [m.model_dump() if isinstance(m, BaseModel) else dict(m) for m in value]}
    return value


def _teacher_item(value: TeacherItemInput, field: str) -> TeacherLogprobsItem:
    if isinstance(value, Mapping):
        value = dict(value)
        if "continuation" in value:
            value["continuation"] = _as_continuation(value["continuation"])
        if value.get("context") is not None:
            value["context"] = _as_context(value["context"])
    return coerce(TeacherLogprobsItem, value, field=field)


def teacher_logprobs(
    namespace: str,
    items: Sequence[TeacherItemInput],
    *,
    contexts: TeacherContextsOptions | Mapping[str, Any] | None,
    top_k: int | None,
    entropy: bool | None,
    wait: float | None,
) -> Operation[TeacherLogprobsResult]:
    """POST …/distill/teacher_logprobs."""
    _require_list("items", items)
    if isinstance(contexts, Mapping):
        contexts = dict(contexts)
        if contexts.get("teachers") is not None:
            contexts["teachers"] = [_teacher(t, f"contexts.teachers[{i}]") for i, t in enumerate(contexts["teachers"])]
    request = coerce(
        TeacherLogprobsRequest,
        {
            "items": [_teacher_item(item, f"items[{i}]") for i, item in enumerate(items)],
            "contexts": contexts,
            "top_k": top_k,
            "entropy": entropy,
        },
    )
    path = f"{_namespace(namespace)}/distill/teacher_logprobs"
    # A read, but one that costs the teacher's GPU: the server has retried the endpoint
    # already, so a 502/504 is not sent again; only what surely did not arrive is.
    return Operation(
        "POST",
        path,
        _reader(TeacherLogprobsResult),
        body=dump(request),
        retry="unsent",
        server_wait=wait or 0.0,
    )


# --- shaped advantages ---------------------------------------------------------------------


def distill_advantages(
    method: str, groups: Sequence[AdvantageGroupInput], *, params: Mapping[str, Any] | None
) -> Operation[AdvantagesResponse]:
    """POST /v1/distill/advantages (not namespaced: nothing is read or stored). The
    groups are checked here (a field's error names ``groups[i].trajectories[j]…``);
    ``params`` goes as given, its nulls included, and the server checks it."""
    _require_list("groups", groups)
    if params is not None and not isinstance(params, Mapping):
        raise InvalidInput(f"params must be a mapping, not {type(params).__name__}", field="params")
    request = coerce(
        AdvantagesRequest,
        {
            "method": method,
            "params": dict(params) if params is not None else None,
            "groups": [coerce(AdvantageGroup, group, field=f"groups[{i}]") for i, group in enumerate(groups)],
        },
    )
    body = dump(request)
    # A null reward is meaningful (unscored: params.null_rewards "trl"); dump leaves nulls out.
    for group, sent in zip(request.groups, body["groups"], strict=True):
        for trajectory, out in zip(group.trajectories, sent["trajectories"], strict=True):
            if trajectory.reward is None:
                out["reward"] = None
    # Pure arithmetic on what is sent: the same body gives the same answer, so a repeat is harmless.
    return Operation("POST", "/v1/distill/advantages", _reader(AdvantagesResponse), body=body)


def distill_advantages_arrays(
    method: str, groups: Sequence[Mapping[str, Any]], *, params: Mapping[str, Any] | None
) -> Operation[Any]:
    """POST /v1/distill/advantages with the binary body and answer (reflexa.binary_advantages;
    needs numpy). The server checks the groups: its errors name the field as for JSON."""
    from reflexa import binary_advantages as binary

    _require_list("groups", groups)
    return Operation(
        "POST",
        "/v1/distill/advantages",
        _reader(AdvantagesResponse),
        content=binary.encode_request(method, groups, params),
        content_type=binary.MEDIA_TYPE,
        accept=binary.MEDIA_TYPE,
        read_bytes=binary.decode_response,
    )


def distill_advantages_batched(
    method: str,
    groups: Sequence[AdvantageGroupInput],
    *,
    params: Mapping[str, Any] | None,
    limits: batches.Limits,
) -> tuple[list[Operation[AdvantagesResponse]], list[AdvantageGroup]]:
    """The POSTs of /v1/distill/advantages that carry these groups under ``limits``
    (see :mod:`reflexa._advantage_batches`), and the groups as checked models."""
    _require_list("groups", groups)
    if params is not None and not isinstance(params, Mapping):
        raise InvalidInput(f"params must be a mapping, not {type(params).__name__}", field="params")
    if not groups:
        raise InvalidInput("groups is empty; send at least one rollout group", field="groups")
    if method not in get_args(AdvantageMethod):
        raise InvalidInput(
            f"method is {method!r}; one of {', '.join(get_args(AdvantageMethod))}", field="method", rule="literal"
        )
    models = [coerce(AdvantageGroup, group, field=f"groups[{i}]") for i, group in enumerate(groups)]
    read = _reader(AdvantagesResponse)
    ops = [
        Operation("POST", "/v1/distill/advantages", read, content=r.body)
        for r in batches.plan(method, models, params, limits)
    ]
    return ops, models


# --- rubric rewards -------------------------------------------------------------------------

#: What a score names: a stored trajectory's id, or an inline trajectory (a model or its fields).
ScoreTrajectoryInput = str | TrajectoryCreate | Mapping[str, Any]
RubricScoreItemInput = RubricScoreItem | Mapping[str, Any]


def _rubric(namespace: str, rubric_id: str) -> str:
    return f"{_namespace(namespace)}/rubrics/{_segment(rubric_id)}"


def create_rubric(namespace: str, rubric: RubricCreate | Mapping[str, Any]) -> Operation[Rubric]:
    body = coerce(RubricCreate, rubric)
    # The id is the client's: a repeat of the same body is a replay (200), not a second rubric.
    return Operation("POST", f"{_namespace(namespace)}/rubrics", _reader(Rubric), body=dump(body))


def get_rubric(namespace: str, rubric_id: str) -> Operation[Rubric]:
    return Operation("GET", _rubric(namespace, rubric_id), _reader(Rubric))


def score_item(trajectory: ScoreTrajectoryInput, *, final_answer: Any = None, label: Any = None) -> dict[str, Any]:
    """The fields of one scored item: a string names a stored trajectory, anything
    else is an inline one."""
    item: dict[str, Any] = {"final_answer": final_answer, "label": label}
    if isinstance(trajectory, str):
        item["trajectory_id"] = trajectory
    else:
        item["trajectory"] = trajectory
    return item


def score_rubric(
    namespace: str, rubric_id: str, request: RubricScoreRequest | Mapping[str, Any]
) -> Operation[RubricScore]:
    body = coerce(RubricScoreRequest, request)
    # Nothing is written: a repeat scores again (the same, for rule criteria).
    return Operation("POST", f"{_rubric(namespace, rubric_id)}/score", _reader(RubricScore), body=dump(body))


def score_rubric_batch(
    namespace: str,
    rubric_id: str,
    items: Sequence[RubricScoreItemInput],
    *,
    snapshot: str | None,
    skip_judged: bool,
) -> Operation[RubricBatchScore]:
    _require_list("items", items)
    request = coerce(
        RubricScoreBatchRequest,
        {
            "items": [coerce(RubricScoreItem, item, field=f"items[{i}]") for i, item in enumerate(items)],
            "snapshot": snapshot,
            "skip_judged": skip_judged,
        },
    )
    path = f"{_rubric(namespace, rubric_id)}/score/batch"
    return Operation("POST", path, _reader(RubricBatchScore), body=dump(request))


def create_reward_capability(namespace: str, rubric_id: str, note: str | None) -> Operation[RewardCapabilityCreated]:
    body = coerce(RewardCapabilityCreate, {"note": note})
    # A repeat would mint a second secret, so only retry when the first surely did not arrive.
    path = f"{_rubric(namespace, rubric_id)}/capabilities"
    return Operation("POST", path, _reader(RewardCapabilityCreated), body=dump(body), retry="unsent")


def list_reward_capabilities(
    namespace: str, rubric_id: str, limit: int | None, cursor: str | None
) -> Operation[Page[RewardCapability]]:
    params = {name: str(value) for name, value in (("limit", limit), ("cursor", cursor)) if value is not None}
    path = f"{_rubric(namespace, rubric_id)}/capabilities"
    return Operation("GET", path, _reader(Page[RewardCapability]), params=params or None)


def revoke_reward_capability(namespace: str, rubric_id: str, capability_id: str) -> Operation[None]:
    # Idempotent on the server (a revoked capability stays revoked, 204), so retries are safe.
    path = f"{_rubric(namespace, rubric_id)}/capabilities/{_segment(capability_id)}"
    return Operation("DELETE", path, _nothing)


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
        "task_contains",
        "success",
        "created_after",
        "created_before",
        "limit",
        "snapshot",
        "context",
        "history",
        "history_max_chars",
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
