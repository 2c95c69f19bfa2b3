"""Teacher-context schemas: POST /v1/namespaces/{ns}/distill/contexts.

The core names (snapshot, trajectories, teachers, leakage; template_version,
plain, teachers{NAME: text, messages, item_ids, chars}) are fixed by the trainer
surface in DESIGN.md; the rest are additions.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from domain.contexts.plain import DEFAULT_HISTORY_MAX_CHARS
from domain.reflections import Kind
from domain.schemas import ClientId, Label, RequestModel, ResponseModel
from service.trajectories.schemas import TrajectoryCreate

TeacherKind = Literal["memory", "hindsight", "evidence_card", "reflection", "attempt_summary"]
TEACHER_NAME = r"^[A-Za-z0-9][A-Za-z0-9._:@-]{0,63}$"
TEMPLATE_NAME = r"^[a-z0-9][a-z0-9_-]{0,62}$"
DEFAULT_MAX_CHARS = 4000
DEFAULT_MEMORY_KINDS: tuple[Kind, ...] = ("skill", "heuristic", "exemplar")
DEFAULT_MEMORY_K = 5
DEFAULT_ATTEMPTS = 3


class ContextTrajectory(TrajectoryCreate):
    """A stored trajectory named by `{"id"}` alone, or an inline one (a rollout group
    not yet stored): the body of POST …/trajectories, `id` optional."""

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
    kind: TeacherKind
    name: str | None = Field(
        None, pattern=TEACHER_NAME, description="the response key; default: the kind (hindsight: 'hindsight@h')"
    )
    horizon: int | None = Field(None, ge=1, le=10_000, description="hindsight: steps ahead shown (default 1)")
    kinds: list[Kind] | None = Field(
        None, min_length=1, description="memory: reflection kinds retrieved (default skill, heuristic, exemplar)"
    )
    k: int | None = Field(
        None, ge=1, le=100, description="memory: items retrieved per step (default 5); attempt_summary: attempts (3)"
    )
    max_chars: int | None = Field(
        None,
        ge=1,
        le=200_000,
        description=f"the privileged block never exceeds this (default {DEFAULT_MAX_CHARS}; with max_tokens only, "
        "200,000)",
    )
    max_tokens: int | None = Field(
        None, ge=1, le=100_000, description="the block never exceeds this many tokens (needs distill.tokenizer_file)"
    )

    @property
    def key(self) -> str:
        if self.name is not None:
            return self.name
        return f"hindsight@{self.horizon or 1}" if self.kind == "hindsight" else self.kind


class LeakageOptions(RequestModel):
    """Leakage guards, all on by default: memory never shows evidence from the
    trajectory itself, its rollout group, or (allow_same_task false) its task."""

    allow_same_trajectory: bool = False
    allow_same_group: bool = False
    allow_same_task: bool = Field(False, description="not applied to evidence_card and attempt_summary (task-scoped)")


class Fade(RequestModel):
    """Scaffold fading (Pats): each teacher context's budget (characters, tokens and
    items) times share = max(floor, 1 − the task's success rate for policy_version),
    the rate as GET …/tasks?group_by=task,policy_version gives it; the full budget
    while the task has fewer than min_attempts closed attempts by that version."""

    by: Literal["task_success"]
    policy_version: Label = Field(description="the policy version whose success on each task fades its scaffold")
    floor: float = Field(0.0, ge=0, le=1, description="the smallest share of the budget kept")
    min_attempts: int = Field(4, ge=1, le=1_000_000, description="closed attempts before a success rate counts")
    teachers: list[str] | None = Field(
        None, min_length=1, description="the teacher names faded (default: every teacher)"
    )


class ContextsRequest(RequestModel):
    snapshot: ClientId | None = Field(None, description="read memory and trajectories as pinned by this snapshot")
    template: str = Field("default", pattern=TEMPLATE_NAME, description="the context template (its version echoed)")
    trajectories: list[ContextTrajectory] = Field(min_length=1)
    teachers: list[TeacherSpec] = Field(default_factory=list, description="teacher contexts wanted, each under NAME")
    leakage: LeakageOptions = Field(default_factory=LeakageOptions)
    history_max_chars: int = Field(
        DEFAULT_HISTORY_MAX_CHARS,
        ge=0,
        le=1_000_000,
        description="the history shown (earlier steps' turns) never exceeds this; the oldest steps go first",
    )
    history_steps: int | None = Field(
        None,
        ge=0,
        le=1_000_000,
        description="at most this many earlier steps shown (default: any number), the oldest dropped first; "
        "the sft export's `history`",
    )
    include: list[Literal["text", "messages", "parts"]] = Field(
        default_factory=lambda: ["text", "messages"],
        min_length=1,
        description="which renderings to return (the others null): text and messages repeat each step's history; "
        "parts states a trajectory's turns once (`history`) and, per step, only where its window starts "
        "(`omitted_steps`, `marker`) and each teacher's system message (docs/trainers.md)",
    )
    steps: list[Annotated[int, Field(ge=0)]] | None = Field(
        None,
        min_length=1,
        max_length=100_000,
        description="only these step indices (of every trajectory that has them); default: every step",
    )
    fade: Fade | None = Field(None, description="shrink teacher budgets as each task's success rises (Pats)")


class ChatMessage(ResponseModel):
    role: Literal["system", "user", "assistant"]
    content: str


class PlainContext(ResponseModel):
    text: str | None = Field(description="null when `include` leaves it out")
    messages: list[ChatMessage] | None = Field(description="null when `include` leaves it out")
    omitted_steps: int = Field(0, description="earlier steps dropped by history_steps and history_max_chars")
    marker: str | None = Field(
        None,
        description="parts, with omitted_steps > 0: the line the first user message shown starts with "
        "(then a blank line, then that step's turn)",
    )
    tokens: int | None = Field(None, description="tokens of `text` (with a tokenizer configured)")


class LeakageRead(ResponseModel):
    allow_same_trajectory: bool
    allow_same_group: bool
    allow_same_task: bool
    task_scoped: bool = Field(description="about the task by design (evidence_card, attempt_summary): no task guard")
    trajectory_scoped: bool = Field(
        description="built from this trajectory itself by design (hindsight, reflection): no evidence guards"
    )
    excluded_trajectories: int = Field(0, description="trajectories whose evidence was excluded")
    excluded_tasks: int = Field(0, description="tasks whose evidence was excluded")
    dropped_items: int = Field(
        0,
        description="items left out because their evidence is this trajectory's, its group's or its task's "
        "(an exemplar or a card only when nothing is left once that evidence is subtracted)",
    )
    redacted_actions: int = Field(0, description="occurrences of the step's own action replaced by [action withheld]")
    subtracted_evidence: int = Field(
        0,
        description="guarded evidence subtracted rather than the item hidden: evidence rows of merged exemplars "
        "(their counts recomputed without them), rollouts of an evidence card (the card rebuilt without them)",
    )


class AppliedBudget(ResponseModel):
    """The budget a faded teacher context was built with."""

    share: float = Field(description="max(floor, 1 − success_rate), or 1 below min_attempts")
    success_rate: float | None = Field(description="the task's for fade.policy_version (null: no judged attempt)")
    attempts: int = Field(description="closed attempts at the task by fade.policy_version")
    max_chars: int
    max_tokens: int | None = None
    max_items: int | None = Field(None, description="⌊share · the pieces the block had⌋ (null: not applicable)")


class TeacherContext(ResponseModel):
    text: str | None = Field(description="null when `include` leaves it out")
    messages: list[ChatMessage] | None = Field(description="null when `include` leaves it out")
    item_ids: list[str] = Field(description="what the block was built from: reflection ids, step:N, outcome, …")
    chars: int = Field(description="length of the privileged block")
    item_chars: dict[str, int] = Field(default_factory=dict, description="characters of the block per item used")
    privileged: str = Field("", description="the privileged block alone")
    omitted_items: int = Field(0, description="items or lines left out by the budgets")
    tokens: int | None = Field(None, description="tokens of the privileged block (with a tokenizer configured)")
    leakage: LeakageRead
    applicable: bool
    reason: str | None = Field(None, description="why not applicable (then text and messages are the plain ones)")
    budget: AppliedBudget | None = Field(None, description="with fade, for the teachers it names: the budget applied")
    system: str | None = Field(
        None, description="parts: the system message, in place of the plain one (the rest of the messages are plain's)"
    )


class StepContexts(ResponseModel):
    index: int
    plain: PlainContext
    teachers: dict[str, TeacherContext]


class HistoryParts(ResponseModel):
    """A trajectory's turns, once: step i's plain messages are the system message, then
    for each earlier step j shown (from omitted_steps to i − 1) users[j − start] and
    assistants[j − start], then users[i − start]; with a marker, the first user
    message is the marker, a blank line and its turn."""

    system: str = Field(description="the plain system message (the task)")
    start: int = Field(description="the step index users[0] and assistants[0] belong to")
    users: list[str] = Field(description="each step's user turn: the previous result and its observation")
    assistants: list[str] = Field(description="each step's assistant turn: its action")


class TrajectoryContexts(ResponseModel):
    id: str | None = Field(description="the trajectory's id (null: an inline trajectory sent without one)")
    steps: list[StepContexts]
    history: HistoryParts | None = Field(None, description="with include parts: the turns the steps' messages use")


class ContextsResponse(ResponseModel):
    snapshot: str | None
    template_version: str = Field(description="name@version of the template the texts were built with")
    trajectories: list[TrajectoryContexts]
