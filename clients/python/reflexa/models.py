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

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
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
    parent_trajectory_id: ClientId | None = Field(
        None, description="the earlier attempt at this task that this one retries (attempt summaries, attempts export)"
    )
    attempt: int | None = Field(None, ge=1, le=1_000_000, description="which attempt this is (1 = the first)")
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
    parent_trajectory_id: str | None = None
    attempt: int | None = None
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


# --- retrieval: what is sent ----------------------------------------------------------------

Kind = Literal["exemplar", "heuristic", "skill", "rubric", "evidence_card"]
ItemStatus = Literal["candidate", "active", "retired"]
RenderFormat = Literal["markdown", "text", "json"]


class RetrieveFilters(RequestModel):
    """Which items may be served. Fields left out take the server's defaults
    (``status``: only ``active`` items)."""

    agent: Label | None = Field(None, description="only items with evidence from this agent")
    policy_version: Label | None = Field(None, description="only items with evidence from this policy version")
    status: list[ItemStatus] | None = Field(None, min_length=1)
    exclude_tasks: list[str] | None = Field(
        None, description="leakage guard: drop items with any evidence from these tasks"
    )
    exclude_trajectory_ids: list[ClientId] | None = Field(
        None, description="leakage guard: drop items with any evidence from these trajectories"
    )
    as_of: datetime | None = Field(None, description="only items that existed at this time")


class RenderOptions(RequestModel):
    """Ask for a ready-to-inject context block (``RetrieveResult.context``)."""

    format: RenderFormat = "markdown"
    max_chars: int = Field(4000, ge=100, le=200_000, description="the context block never exceeds this")


class RetrieveRequest(RequestModel):
    """The body of a retrieve. ``None`` fields are left out, so the server's defaults apply."""

    state: State
    internal_state: str | None = Field(None, description="the agent's current plan / subgoal, matched separately")
    task: str | None = None
    environment: Label | None = Field(None, description="only items from this environment")
    kinds: list[Kind] | None = Field(None, min_length=1, description="default: every kind")
    k: int = Field(10, ge=1, le=100)
    min_score: float | None = Field(None, description="drop items scoring below this")
    mmr_lambda: float | None = Field(
        None, ge=0.0, le=1.0, description="diversify with MMR: 1 = pure relevance, 0 = pure novelty"
    )
    filters: RetrieveFilters | None = None
    render: RenderOptions | None = None
    trajectory_id: ClientId | None = Field(
        None, description="the episode this retrieval serves; its outcome will credit the items"
    )
    snapshot: ClientId | None = Field(
        None,
        description="answer from this snapshot's memory (the same request, the same answer); "
        "not logged, so there is no retrieval_id to credit",
    )
    consistency_token: str | None = Field(None, min_length=1, description="from a write: wait until it is searchable")
    wait_timeout_ms: int | None = Field(None, ge=0, le=60_000, description="how long to wait for consistency_token")


class RetrievalOutcomeReport(RequestModel):
    """How the task a retrieval served went; credits the items it served."""

    success: bool | None = None
    reward: float | None = None
    trajectory_id: ClientId | None = None
    details: JSONObject | None = None
    item_ids: list[str] | None = Field(None, description="credit only these served items (default: all served)")


# --- retrieval: what is read ----------------------------------------------------------------


class EvidenceLink(ResponseModel):
    """Where an item comes from: a trajectory, and the steps of it when known."""

    trajectory_id: str
    step_start: int | None = None
    step_end: int | None = None


class Utility(ResponseModel):
    """How well the item did when served: a Beta posterior centred on the namespace's baseline."""

    mean: float = Field(description="posterior mean success rate when served")
    std: float = Field(description="posterior standard deviation: the uncertainty of `mean`")
    uses: int
    successes: int
    failures: int
    baseline: float = Field(description="the namespace's success rate over all reported retrievals")


class RetrievedItem(ResponseModel):
    """One piece of past experience. ``kind`` and ``status`` are plain strings here so
    that a newer server's kinds do not break this client."""

    id: str
    kind: str
    status: str
    version: int
    content: JSONObject
    text: str
    score: float = Field(
        description="the rank: similarity, adjusted by utility and recency within the namespace's "
        "similarity band; an exact match of the query state scores above every other item"
    )
    similarity: float = Field(description="raw cosine of the state match (joint with internal state)")
    lexical_similarity: float | None = Field(None, description="word overlap of the state texts")
    exact_match: bool = Field(False, description="the item's state is the query's, exactly")
    state_similarity: float
    internal_similarity: float | None = None
    utility: Utility
    evidence: list[EvidenceLink]
    evidence_count: int
    environment: str | None = None
    created_at: datetime
    updated_at: datetime


class RetrieveResult(ResponseModel):
    """The answer to a retrieve. Report how the task went under ``retrieval_id``
    (or let the episode named by ``trajectory_id`` do it when it closes). Under a
    ``snapshot`` nothing is logged and ``retrieval_id`` is ``None``."""

    retrieval_id: str | None
    items: list[RetrievedItem]
    context: str | None = Field(None, description="the rendered context block, when `render` was asked for")
    gamma: float = Field(description="the discount used for return_to_go in exemplar items")
    waited_ms: int = Field(0, description="time the server spent waiting for the consistency token")


class RetrieveBatchRequest(RequestModel):
    """Many states in one call: each request as for a single retrieve."""

    requests: list[RetrieveRequest] = Field(min_length=1)


class RetrieveBatchResult(ResponseModel):
    results: list[RetrieveResult]


class RetrievalOutcome(ResponseModel):
    """The answer to a retrieval outcome; ``credited_items`` is 0 for an identical repeat."""

    retrieval_id: str
    success: bool | None = None
    reward: float | None = None
    credited_items: int


# --- namespaces and keys --------------------------------------------------------------------


class StateTextSettings(RequestModel):
    """What goes into the embedded state text (see the server's docs/retrieval.md)."""

    fields: list[Literal["task", "observation", "data"]] | None = Field(None, min_length=1)
    max_chars: int | None = Field(None, ge=100, le=100_000)


class RankingSettings(RequestModel):
    """Weights of the retrieval ranking (see the server's docs/retrieval.md)."""

    internal_weight: float | None = Field(None, ge=0.0, le=1.0)
    utility_weight: float | None = Field(None, ge=0.0, le=2.0)
    lexical_weight: float | None = Field(None, ge=0.0, le=1.0)
    similarity_band: float | None = Field(None, ge=0.0, le=1.0)
    recency_weight: float | None = Field(None, ge=0.0, le=1.0)
    recency_half_life_days: float | None = Field(None, gt=0.0)


class NamespaceSettings(RequestModel):
    """Per-namespace behaviour; the server fills in what is left out."""

    gamma: float = Field(0.95, ge=0.0, le=1.0, description="discount for return-to-go")
    state_text: StateTextSettings | None = None
    ranking: RankingSettings | None = None
    # Passed through as given: the server validates them and names any bad field
    # (docs/reflection.md lists the reflectors' settings, docs/trainers.md distill's).
    credit: dict[str, Any] | None = Field(None, description="outcome credit (unnamed_top_k)")
    reflection: dict[str, Any] | None = Field(None, description="reflectors switched on/off and their settings")
    distill: dict[str, Any] | None = Field(None, description="teacher contexts (tokenizer_file)")


class NamespaceCreate(RequestModel):
    name: str = Field(pattern=NAMESPACE_PATTERN)
    settings: NamespaceSettings | None = None


class NamespaceSettingsRead(ResponseModel):
    gamma: float = 0.95
    state_text: dict[str, Any] = Field(default_factory=dict)
    ranking: dict[str, Any] = Field(default_factory=dict)
    credit: dict[str, Any] = Field(default_factory=dict)
    reflection: dict[str, Any] = Field(default_factory=dict)


class Namespace(ResponseModel):
    name: str
    settings: NamespaceSettingsRead
    created_at: datetime
    frozen: bool = Field(False, description="frozen for evaluation: memory does not change until thawed")
    frozen_at: datetime | None = None


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
    expires_at: datetime | None = None  # a rotated key is refused from then on


class KeyCreated(Key):
    """A new key; ``key`` is the secret and is shown only in this response."""

    key: str


# --- snapshots and freezes ------------------------------------------------------------------


class SnapshotCreate(RequestModel):
    """A snapshot to take; the client gives it an id when none is given, so a retry replays."""

    id: ClientId | None = Field(None, description="client-supplied id; makes retries idempotent")
    note: str | None = Field(None, max_length=2000)


class Snapshot(ResponseModel):
    """Memory pinned at one moment: every read naming it answers the same for as long as it exists."""

    id: str
    namespace: str
    watermark: int = Field(description="the namespace's change-feed position when it was taken")
    note: str | None = None
    reflection_count: int
    trajectory_count: int
    step_count: int
    created_by: str | None = None
    created_at: datetime


class FreezeState(ResponseModel):
    """Whether a namespace is frozen for evaluation (no reflection, no utility change)."""

    namespace: str
    frozen: bool
    frozen_at: datetime | None = None


# --- curriculum statistics ------------------------------------------------------------------

TaskGroupBy = Literal["task", "task,policy_version"]
TaskSort = Literal["learning_signal", "attempts", "success_rate", "reward_var", "last_seen", "task"]
SortOrder = Literal["desc", "asc"]


class TaskStats(ResponseModel):
    """One task (or task and policy version): its attempts and the learning signal its groups give."""

    task_hash: str
    task: str
    policy_version: str | None = Field(None, description="with group_by='task,policy_version'; else null")
    attempts: int = Field(description="closed trajectories")
    open: int = Field(description="trajectories not closed yet")
    successes: int
    failures: int
    rewarded: int = Field(description="attempts with a reward: `reward`, else 1.0/0.0 from `success`")
    success_rate: float | None = None
    reward_mean: float | None = None
    reward_var: float | None = Field(None, description="population variance over rewarded attempts")
    groups: int = Field(description="distinct non-null group_id")
    mixed_groups: int = Field(description="groups with both a success and a failure")
    signal_groups: int = Field(description="groups with at least two rewarded members")
    learning_signal: float | None = Field(
        None, description="mean within-group reward variance over signal groups; 0: every group was unanimous"
    )
    last_seen: datetime


class TaskStatsPage(Page[TaskStats]):
    """A page of task statistics; ``snapshot`` is the snapshot they are as of (null: live)."""

    snapshot: str | None = None


# --- teacher contexts: what is sent ---------------------------------------------------------

TeacherKind = Literal["memory", "hindsight", "evidence_card", "reflection", "attempt_summary"]
TEACHER_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:@-]{0,63}$"
TEMPLATE_NAME_PATTERN = r"^[a-z0-9][a-z0-9_-]{0,62}$"
#: The renderings of a context: ``text`` (one string) and ``messages`` (chat turns).
ContextRendering = Literal["text", "messages"]


class ContextTrajectory(TrajectoryCreate):
    """A stored trajectory named by ``{"id"}`` alone, or an inline one (a rollout group
    not yet stored): the body of a trajectory create, ``id`` optional."""

    task: str | None = Field(None, min_length=1, description="inline: required; a stored trajectory gives only id")

    @model_validator(mode="after")
    def _stored_or_inline(self) -> ContextTrajectory:
        if self.task is None:
            if self.id is None:
                raise ValueError("give the id of a stored trajectory, or an inline trajectory with its task")
            extra = sorted(self.model_fields_set - {"id", "task"})
            if extra:
                raise ValueError(f"a stored trajectory is named by id alone; an inline one needs a task (got {extra})")
        return self

    @property
    def stored(self) -> bool:
        return self.task is None


class TeacherSpec(RequestModel):
    """One teacher context wanted, answered under ``name`` (default: the kind; hindsight: ``hindsight@h``)."""

    kind: TeacherKind
    name: str | None = Field(None, pattern=TEACHER_NAME_PATTERN, description="the response key")
    horizon: int | None = Field(None, ge=1, le=10_000, description="hindsight: steps ahead shown (default 1)")
    kinds: list[Kind] | None = Field(
        None, min_length=1, description="memory: reflection kinds retrieved (default skill, heuristic, exemplar)"
    )
    k: int | None = Field(
        None, ge=1, le=100, description="memory: items retrieved per step (default 5); attempt_summary: attempts (3)"
    )
    max_chars: int | None = Field(None, ge=1, le=200_000, description="the privileged block never exceeds this")
    max_tokens: int | None = Field(
        None, ge=1, le=100_000, description="the block never exceeds this many tokens (needs distill.tokenizer_file)"
    )

    @property
    def key(self) -> str:
        """The name this teacher's context is answered under."""
        if self.name is not None:
            return self.name
        return f"hindsight@{self.horizon or 1}" if self.kind == "hindsight" else self.kind


class LeakageOptions(RequestModel):
    """Leakage guards, all on by default: memory never shows evidence from the
    trajectory itself, its rollout group, or (``allow_same_task`` false) its task."""

    allow_same_trajectory: bool = False
    allow_same_group: bool = False
    allow_same_task: bool = False


class ContextsRequest(RequestModel):
    """The body of a teacher-contexts request. ``None`` fields are left out, so the server's defaults apply."""

    snapshot: ClientId | None = Field(None, description="read memory and trajectories as pinned by this snapshot")
    template: str | None = Field(None, pattern=TEMPLATE_NAME_PATTERN, description="default: the server's 'default'")
    trajectories: list[ContextTrajectory] = Field(min_length=1)
    teachers: list[TeacherSpec] = Field(default_factory=list)
    leakage: LeakageOptions | None = None
    history_max_chars: int | None = Field(None, ge=0, le=1_000_000, description="default 16,000")
    include: list[ContextRendering] | None = Field(
        None, min_length=1, description="which renderings to return (the other is null); default both"
    )
    steps: list[Annotated[int, Field(ge=0)]] | None = Field(
        None, min_length=1, max_length=100_000, description="only these step indices; default: every step"
    )


# --- teacher contexts: what is read ---------------------------------------------------------


class ChatMessage(ResponseModel):
    role: str = Field(description="system, user or assistant")
    content: str


class PlainContext(ResponseModel):
    """What the agent saw at the step: the task and the history, as text and as chat
    messages (either is ``None`` when ``include`` left it out)."""

    text: str | None = None
    messages: list[ChatMessage] | None = None
    omitted_steps: int = Field(0, description="earlier steps dropped by history_max_chars")
    tokens: int | None = Field(None, description="tokens of `text` (with a tokenizer configured)")


class LeakageApplied(ResponseModel):
    """The leakage guards one teacher context was built under, and what they removed."""

    allow_same_trajectory: bool
    allow_same_group: bool
    allow_same_task: bool
    task_scoped: bool = Field(description="about the task by design (evidence_card, attempt_summary)")
    trajectory_scoped: bool = Field(description="built from this trajectory itself by design (hindsight, reflection)")
    excluded_trajectories: int = 0
    excluded_tasks: int = 0
    dropped_items: int = 0
    redacted_actions: int = 0


class TeacherContext(ResponseModel):
    """The plain context plus a privileged block in the system message (``text`` and
    ``messages`` as for :class:`PlainContext`)."""

    text: str | None = None
    messages: list[ChatMessage] | None = None
    item_ids: list[str] = Field(description="what the block was built from: reflection ids, step:N, outcome, …")
    chars: int = Field(description="length of the privileged block")
    item_chars: dict[str, int] = Field(default_factory=dict)
    privileged: str = Field("", description="the privileged block alone")
    omitted_items: int = 0
    tokens: int | None = None
    leakage: LeakageApplied
    applicable: bool
    reason: str | None = Field(None, description="why not applicable (then text and messages are the plain ones)")


class StepContexts(ResponseModel):
    index: int
    plain: PlainContext
    teachers: dict[str, TeacherContext] = Field(description="by teacher name (TeacherSpec.key)")


class TrajectoryContexts(ResponseModel):
    id: str | None = Field(description="the trajectory's id (null: an inline trajectory sent without one)")
    steps: list[StepContexts]


class ContextsResult(ResponseModel):
    """Per trajectory, in the order sent, per step: the plain context and each teacher's."""

    snapshot: str | None = None
    template_version: str = Field(description="name@version of the template the texts were built with")
    trajectories: list[TrajectoryContexts]


# --- teacher scoring: what is sent ----------------------------------------------------------

TokenId = Annotated[int, Field(ge=0)]


def _exactly_one(model: BaseModel, names: tuple[str, ...], what: str) -> None:
    given = [name for name in names if getattr(model, name) is not None]
    if len(given) != 1:
        options = " or ".join(f"`{n}`" for n in names)
        got = f" (got {' and '.join(given)})" if given else ""
        raise ValueError(f"give exactly one of {options} for the {what}{got}")


class ChatTurn(RequestModel):
    """One chat message sent (a context's ``messages``)."""

    role: Literal["system", "user", "assistant"]
    content: str


class TeacherContinuation(RequestModel):
    """The student's sampled continuation: its token ids (scored as they are), or a
    text the server tokenizes without special tokens."""

    token_ids: list[TokenId] | None = Field(None, min_length=1)
    text: str | None = Field(None, min_length=1)

    @model_validator(mode="after")
    def _one(self) -> TeacherContinuation:
        _exactly_one(self, ("token_ids", "text"), "continuation")
        return self


class TeacherPrompt(RequestModel):
    """A context given inline: ``text`` or ``messages`` (as :meth:`Client.distill_contexts`
    returns them), or token ids. Messages need a teacher with a chat template
    (openai_completions)."""

    text: str | None = Field(None, min_length=1)
    messages: list[ChatTurn] | None = Field(None, min_length=1)
    token_ids: list[TokenId] | None = Field(None, min_length=1)

    @model_validator(mode="after")
    def _one(self) -> TeacherPrompt:
        _exactly_one(self, ("text", "messages", "token_ids"), "context")
        return self


class TeacherContextRef(RequestModel):
    """A context the server builds: a step of a stored trajectory under a teacher of
    the request's ``contexts.teachers`` (``teacher`` ``None``: the plain context)."""

    trajectory_id: ClientId
    step: int = Field(ge=0)
    teacher: str | None = Field(None, pattern=TEACHER_NAME_PATTERN)
    rendering: Literal["text", "messages"] | None = Field(None, description="default text")


class TeacherContextsOptions(RequestModel):
    """How referenced contexts are built (as for a teacher-contexts request)."""

    teachers: list[TeacherSpec] = Field(default_factory=list)
    snapshot: ClientId | None = None
    template: str | None = Field(None, pattern=TEMPLATE_NAME_PATTERN)
    leakage: LeakageOptions | None = None
    history_max_chars: int | None = Field(None, ge=0, le=1_000_000)


class TeacherLogprobsItem(RequestModel):
    """One continuation and the context to score it after: ``context`` or ``ref``."""

    id: str | None = Field(None, max_length=200, description="echoed in the answer")
    continuation: TeacherContinuation
    context: TeacherPrompt | None = None
    ref: TeacherContextRef | None = None

    @model_validator(mode="after")
    def _one(self) -> TeacherLogprobsItem:
        _exactly_one(self, ("context", "ref"), "context of the continuation")
        return self


class TeacherLogprobsRequest(RequestModel):
    """The body of a teacher-scoring request. ``None`` fields are left out."""

    items: list[TeacherLogprobsItem] = Field(min_length=1)
    contexts: TeacherContextsOptions | None = None
    top_k: int | None = Field(None, ge=0, le=100)
    entropy: bool | None = None


# --- teacher scoring: what is read ----------------------------------------------------------


class TopLogprob(ResponseModel):
    token_id: int | None = Field(None, description="None: the endpoint named the token by its text only")
    token: str | None = None
    logprob: float


class ContextUsed(ResponseModel):
    """What a referenced context resolved to."""

    trajectory_id: str
    step: int
    teacher: str | None = None
    rendering: str
    applicable: bool = Field(description="False: the teacher had nothing to add; the plain context was scored")
    template_version: str


class ScoredItem(ResponseModel):
    """One item's scores: ``logprobs[t]`` is the teacher's log-prob of ``token_ids[t]``."""

    index: int
    id: str | None = None
    token_ids: list[int]
    logprobs: list[float]
    prompt_tokens: int
    entropies: list[float] | None = None
    top_k: list[list[TopLogprob]] | None = None
    context: ContextUsed | None = None
    endpoint_ms: float


class TeacherEndpoint(ResponseModel):
    url: str
    protocol: str
    model: str | None = None


class TeacherTiming(ResponseModel):
    total_ms: float
    endpoint_ms: float
    tokenize_ms: float
    contexts_ms: float
    requests: int
    retries: int


class TeacherLogprobsResult(ResponseModel):
    """Per item, in the order sent, the teacher's log-probs of its continuation."""

    endpoint: TeacherEndpoint
    items: list[ScoredItem]
    timing: TeacherTiming


# --- rubric rewards -------------------------------------------------------------------------

#: The rule types of a criterion's ``check`` (a criterion without one is judged by an LLM).
CheckType = Literal["regex", "contains", "not_contains", "json_path", "numeric", "tool_called", "max_steps"]
#: What a check reads: the final answer (explicit, else the last action), the last action or
#: result, or any step's action / result / observation (``any_step``: all three).
CheckScope = Literal[
    "final_answer", "final_action", "final_result", "any_step", "any_action", "any_result", "any_observation"
]
CriterionMethod = Literal["rule", "llm", "skipped"]


class RubricCriterion(RequestModel):
    """One weighted criterion. ``check`` (``{"type": …, …}``, see docs/trainers.md)
    decides it by rule; without one an LLM judges it. Strings of a check may hold
    ``{{label}}``, the scored item's ground truth."""

    id: ClientId
    text: str = Field(min_length=1, max_length=2_000)
    weight: float = Field(ge=0)
    check: JSONObject | None = None
    stage: Label | None = Field(None, description="score it on the steps whose metadata.stage is this only")
    rationale: str | None = Field(None, max_length=2_000)


class RubricCreate(RequestModel):
    id: ClientId
    name: str = Field(min_length=1, max_length=200)
    criteria: list[RubricCriterion] = Field(min_length=1, max_length=100)
    task: str | None = Field(None, min_length=1)
    environment: Label | None = None
    status: Literal["candidate", "active"] = "active"


class RubricCriterionRead(ResponseModel):
    id: str
    text: str
    weight: float
    check: JSONObject | None = None
    stage: str | None = None
    method: Literal["rule", "llm"]


class Rubric(ResponseModel):
    """A rubric (a reflection of kind ``rubric``), its criteria as the scorer reads them."""

    id: str
    namespace: str
    name: str
    status: str
    version: int
    criteria: list[RubricCriterionRead]
    text: str
    task: str | None = None
    environment: str | None = None
    reflector: str
    created_at: datetime
    updated_at: datetime


class RubricScoreItem(RequestModel):
    """One trajectory to score: ``trajectory_id`` (stored) or ``trajectory`` (inline, not stored)."""

    trajectory_id: ClientId | None = None
    trajectory: TrajectoryCreate | None = None
    final_answer: str | JSONObject | None = Field(None, description="default: the last step's action")
    label: Any = Field(None, description="the ground truth for {{label}}; default: metadata.label")

    @model_validator(mode="after")
    def _one_trajectory(self) -> RubricScoreItem:
        if (self.trajectory_id is None) == (self.trajectory is None):
            raise ValueError("give trajectory_id (a stored trajectory) or trajectory (an inline one), not both")
        return self


class RubricScoreRequest(RubricScoreItem):
    snapshot: ClientId | None = None
    skip_judged: bool = False


class RubricScoreBatchRequest(RequestModel):
    items: list[RubricScoreItem] = Field(min_length=1)
    snapshot: ClientId | None = None
    skip_judged: bool = False


class CriterionScore(ResponseModel):
    id: str
    score: float | None = Field(description="in [0, 1] (rules: 0 or 1); None when skipped")
    weight: float
    method: CriterionMethod
    rationale: str | None = None
    stage: str | None = None


class StageScore(ResponseModel):
    stage: str
    steps: list[int]
    reward: float | None = None
    criteria: list[CriterionScore]


class RubricScore(ResponseModel):
    """``reward`` = sum(weight * score) / sum(weight) over the scored criteria (None: none scored)."""

    rubric_id: str
    rubric_version: int
    trajectory_id: str | None = None
    reward: float | None = None
    criteria: list[CriterionScore]
    stages: list[StageScore] = Field(default_factory=list)


class RubricBatchScore(ResponseModel):
    rubric_id: str
    rubric_version: int
    items: list[RubricScore]
    reward_mean: float | None = None


class RewardCapabilityCreate(RequestModel):
    note: str | None = Field(None, max_length=500)


class RewardCapability(ResponseModel):
    """A capability URL's record (never its secret)."""

    id: str
    namespace: str
    rubric_id: str
    note: str | None = None
    created_by: str | None = None
    created_at: datetime
    revoked_at: datetime | None = None


class RewardCapabilityCreated(RewardCapability):
    """The new capability with its secret, shown once: POST OpenRLHF's queries to
    ``base_url + path`` (no Authorization header)."""

    secret: str
    path: str


# --- shaped advantages (POST /v1/distill/advantages) ----------------------------------------

#: The methods of POST /v1/distill/advantages (docs/distillation.md).
AdvantageMethod = Literal["grpo", "token_signal", "direct_opd", "step_shaping", "horizon_agreement"]
SIGNAL_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:@-]{0,63}$"
SignalName = Annotated[str, Field(pattern=SIGNAL_NAME_PATTERN)]
TokenFloats = list[float]
#: One list of log-probs, or several by name (``{"hindsight@1": [...], "hindsight@4": [...]}``).
NamedFloats = TokenFloats | dict[SignalName, TokenFloats]


class Logprobs(RequestModel):
    """The sampled tokens' log-probs (natural log, <= 0) under each model or context, one
    entry per token of the trajectory; a plain list is named ``default`` where a name is needed."""

    student: TokenFloats | None = Field(None, description="log π_S(y_t | plain context): the student, as sampled")
    teacher: NamedFloats | None = Field(
        None, description="log π_T(y_t | teacher context); several teachers (hindsight horizons) as {NAME: [float]}"
    )
    pre: NamedFloats | None = Field(None, description="direct_opd: log π_pre(y_t) under the pre-RL checkpoint(s)")
    post: NamedFloats | None = Field(None, description="direct_opd: log π_post(y_t) under the post-RL checkpoint(s)")


class TeacherTopK(RequestModel):
    """Per token, the teacher's k likeliest next tokens: their teacher log-probs and the
    student's log-probs of the same tokens (token_signal's entropy rule)."""

    teacher: list[list[float]] = Field(description="(tokens × k) the teacher's top-k log-probs")
    student: list[list[float]] = Field(description="(tokens × k) the student's log-probs of those tokens")


class AdvantageTrajectory(RequestModel):
    """One rollout's tokens: every per-token list has one entry per token (a padded
    response tensor may be sent as is, with mask 0 on the padding)."""

    id: ClientId
    reward: float = Field(description="the outcome reward R (what GRPO and the order diagnostics compare)")
    token_steps: list[int] | None = Field(
        None, description="the step (turn) each token belongs to: integers >= 0, non-decreasing; default: all step 0"
    )
    mask: list[int] | None = Field(
        None, description="1: the student's own sampled token; 0: not (prompt, tool output): advantage 0, no statistic"
    )
    logprobs: Logprobs | None = None
    teacher_entropy: TokenFloats | None = Field(None, description="the teacher's entropy at each token (nats)")
    teacher_topk: TeacherTopK | None = None
    advantages: TokenFloats | float | None = Field(
        None, description="the trainer's own outcome advantage A, per token or one number; default: GRPO's"
    )


class AdvantageGroup(RequestModel):
    group_id: ClientId = Field(description="the rollout group: siblings sampled for the same prompt")
    trajectories: list[AdvantageTrajectory] = Field(min_length=1)


class AdvantagesRequest(RequestModel):
    """The body of POST /v1/distill/advantages. ``params`` is sent as given (a ``null``
    in it is a value: step_shaping's ``budget: null`` is no budget)."""

    method: AdvantageMethod
    params: JSONObject | None = Field(None, description="the method's parameters (docs/distillation.md)")
    groups: list[AdvantageGroup] = Field(min_length=1)


class TrajectoryAdvantages(ResponseModel):
    """One trajectory's answer, every per-token list aligned with the tokens sent."""

    id: str
    group_id: str
    advantage: float | None = Field(description="the outcome advantage A used (null: a per-token list was sent)")
    advantages: list[float] = Field(description="per token; 0 on masked tokens")
    token_rewards: list[float] | None = Field(None, description="per token: r_t after regulation; 0 on masked tokens")
    steps: list[int] | None = Field(None, description="step methods: the step indices, in order")
    step_signal: list[float] | None = Field(None, description="per step: step_shaping g_s; horizon_agreement z_s")
    step_scale: list[float] | None = Field(None, description="per step: A'_s / A")


class Stats(ResponseModel):
    mean: float
    std: float
    min: float
    p1: float
    p5: float
    p25: float
    p50: float
    p75: float
    p95: float
    p99: float
    max: float


class BatchDiagnostics(ResponseModel):
    """Over the batch's unmasked tokens (docs/distillation.md, "Diagnostics")."""

    method: str
    trajectories: int
    groups: int
    tokens: int = Field(description="unmasked tokens (every statistic is over these)")
    steps: int = Field(description="steps with at least one unmasked token")
    trainer_advantages: int = Field(description="trajectories whose A the trainer sent")
    advantages: Stats | None = None
    token_reward: Stats | None = Field(None, description="r_t after regulation")
    token_reward_raw: Stats | None = Field(None, description="r_t before regulation")
    order_consistency: float | None = Field(
        None, description="Uni-OPD: share of sibling pairs with R_i > R_j whose summed signal S_i > S_j (ties ½)"
    )
    order_pairs: int | None = None
    length_correlation: float | None = Field(None, description="Pearson r of summed signal and unmasked length")
    clipped_tokens_share: float | None = None
    clipped_steps_share: float | None = Field(None, description="step_shaping: steps with |g_s| > alpha")
    entropy_tokens_share: float | None = Field(None, description="tokens under the entropy rule")
    sign_flips: int = Field(description="tokens whose returned advantage has the opposite sign of A")
    sign_flips_prevented: int | None = Field(None, description="step methods: steps the guard kept from flipping")
    budget_scaled: int | None = Field(None, description="step_shaping: trajectories scaled down to the budget")
    agreement_share: float | None = Field(None, description="horizon_agreement: steps where every horizon agrees")


class GroupDiagnostics(ResponseModel):
    group_id: str
    trajectories: int
    tokens: int
    reward_mean: float
    reward_std: float | None = Field(description="sample std (null for a group of one)")
    sign_flips: int
    order_consistency: float | None = None
    order_pairs: int | None = None
    length_correlation: float | None = None
    signal_mean: float | None = Field(None, description="mean over the group of the summed signal S_i")
    clipped_tokens_share: float | None = None
    sign_flips_prevented: int | None = None


class Diagnostics(ResponseModel):
    batch: BatchDiagnostics
    groups: list[GroupDiagnostics]


class AdvantagesResponse(ResponseModel):
    """Per trajectory, in request order (groups, then trajectories), its advantages; and
    the diagnostics of the batch and of each group."""

    method: str
    params: JSONObject = Field(description="every parameter with the value used (defaults filled in)")
    trajectories: list[TrajectoryAdvantages]
    diagnostics: Diagnostics


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
        raise InvalidInput(f"{first['msg']}{more}", field=field_path(tuple(first["loc"]), field) or None) from None


def dump(model: BaseModel) -> dict[str, Any]:
    """The JSON body for ``model``: unset optionals left out, NaN in free-form
    objects turned to null (JSON cannot carry it). A value JSON cannot represent
    at all (an arbitrary object in ``metadata``) is refused as invalid input."""
    try:
        return model.model_dump(mode="json", exclude_none=True)
    except PydanticSerializationError as exc:
        raise InvalidInput(f"not representable as JSON: {exc}") from None
