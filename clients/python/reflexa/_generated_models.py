# Generated from clients/python/openapi.json by `python clients/python/tools/generate.py`: do not edit.
"""The v1 schemas as the client sends and reads them, generated from the server's
OpenAPI document (see ``clients/python/tools/models_from_openapi.py`` for the rules).
Import them from :mod:`reflexa.models`, which adds what is not a schema."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import Field

from reflexa._model_rules import (
    BatchCounts,
    OneContext,
    OneContinuation,
    OnePrompt,
    OneTrajectory,
    Page,
    RequestModel,
    ResponseModel,
    RolloutTokens,
    StoredOrInline,
    TeacherKey,
)

ClientId = Annotated[
    str,
    Field(
        pattern="^[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}$",
        description="1-128 characters of letters, digits and . _ : @ -, starting with a letter or digit",
    ),
]
SignalName = Annotated[str, Field(pattern="^[A-Za-z0-9][A-Za-z0-9._:@-]{0,63}$")]
AdvantageMethod = Literal["grpo", "rloo", "token_signal", "direct_opd", "step_shaping", "horizon_agreement"]
ContextInclude = Literal["text", "messages", "parts"]
ContextRendering = Literal["text", "messages"]
CriterionMethod = Literal["rule", "llm", "skipped"]
ItemStatus = Literal["candidate", "active", "retired"]
Kind = Literal["exemplar", "heuristic", "skill", "rubric", "evidence_card"]
RenderFormat = Literal["text", "markdown", "json"]
Role = Literal["admin", "operator", "agent", "trainer"]
SortOrder = Literal["desc", "asc"]
TaskGroupBy = Literal["task", "task,policy_version"]
TaskSort = Literal["learning_signal", "attempts", "success_rate", "reward_var", "last_seen", "task"]
TeacherKind = Literal["memory", "hindsight", "evidence_card", "reflection", "attempt_summary"]
TrajectoryStatus = Literal["open", "closed"]


class AdvantageGroup(RequestModel):
    group_id: ClientId = Field(description="the rollout group: siblings sampled for the same prompt")
    trajectories: list[AdvantageTrajectory] = Field(min_length=1)


class AdvantageTrajectory(RequestModel):
    id: ClientId
    reward: float | None = Field(
        description="the outcome reward R (what GRPO and the order diagnostics compare); null: unscored (refused "
        "unless params.null_rewards is trl)",
    )
    token_steps: list[int] | None = Field(
        None, description="the step (turn) each token belongs to: integers >= 0, non-decreasing; default: all step 0"
    )
    mask: list[int] | None = Field(
        None, description="1: the student's own sampled token; 0: not (prompt, tool output): advantage 0, no statistic"
    )
    logprobs: Logprobs | None = None
    teacher_entropy: list[float] | None = Field(None, description="the teacher's entropy at each token (nats)")
    teacher_topk: TeacherTopK | None = None
    advantages: list[float] | float | None = Field(
        None, description="the trainer's own outcome advantage A, per token or one number; default: GRPO's"
    )


class AdvantagesRequest(RequestModel):
    method: AdvantageMethod
    params: dict[str, Any] | None = Field(
        None,
        description="the method's parameters (docs/distillation.md), all optional: every method: std (true; rloo: "
        "false), eps (1e-6), scale (group | batch | none; default from std), singleton_groups (refuse | "
        "verl), null_rewards (refuse | trl), kl ({coef, estimator: k1 | k2 | k3, centered}; needs "
        "logprobs.ref), is ({mode: tis | mis, level: token | sequence, cap, low, high}; needs "
        "logprobs.rollout); token_signal: beta (1), discount (0), clip (null; c or [low, high]), "
        "compress (false), entropy_threshold (null), teacher (the only one sent), outcome (true), "
        "discount_masked (false); direct_opd: as token_signal without teacher, plus shifts [{post, pre, "
        "weight}]; step_shaping: lambda (0.5), alpha (1), budget (1), teacher, sign_aware (false); "
        "horizon_agreement: beta (0.5), horizons (every teacher sent), sign_aware (false)",
    )
    groups: list[AdvantageGroup] = Field(min_length=1)


class AdvantagesResponse(ResponseModel):
    method: str
    params: dict[str, Any] = Field(description="every parameter with the value used (defaults filled in)")
    trajectories: list[TrajectoryAdvantages] = Field(description="in request order (groups, then trajectories)")
    diagnostics: Diagnostics


class AppliedBudget(ResponseModel):
    """The budget a faded teacher context was built with."""

    share: float = Field(description="max(floor, 1 − success_rate), or 1 below min_attempts")
    success_rate: float | None = Field(None, description="the task's for fade.policy_version (null: no judged attempt)")
    attempts: int = Field(description="closed attempts at the task by fade.policy_version")
    max_chars: int
    max_tokens: int | None = None
    max_items: int | None = Field(None, description="⌊share · the pieces the block had⌋ (null: not applicable)")


class BatchDiagnostics(ResponseModel):
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
    null_rewards: int | None = Field(None, description="trajectories sent with reward null (params.null_rewards trl)")
    kl_mean: float | None = Field(None, description="params.kl: mean kl_t over unmasked tokens (before centring)")
    mismatch_kl: float | None = Field(
        None, description="params.is: k3 estimate of KL(rollout ‖ student) over unmasked tokens"
    )
    is_max_ratio: float | None = Field(None, description="params.is: the largest ratio ρ (at the level used)")
    is_truncated_share: float | None = Field(None, description="params.is tis: share of tokens with ρ > cap")
    is_masked_share: float | None = Field(None, description="params.is mis: share of tokens with ρ outside [low, high]")


class BatchItemResult(ResponseModel):
    id: str
    created: bool = Field(description="false: an identical trajectory was already stored (a replay)")
    step_count: int
    status: TrajectoryStatus


class BatchResult(ResponseModel, BatchCounts):
    items: list[BatchItemResult]
    consistency_token: str


class RewardCapabilityCreate(RequestModel):
    note: str | None = Field(None, max_length=500, description="what it is for (a training run)")


class RewardCapability(ResponseModel):
    id: str
    namespace: str
    rubric_id: str
    note: str | None = None
    created_by: str | None = None
    created_at: datetime
    revoked_at: datetime | None = None


class RewardCapabilityCreated(RewardCapability):
    secret: str = Field(description="shown once: only its SHA-256 is stored")
    path: str = Field(description="POST here (no Authorization header): /v1/reward/<secret>")


class ChatMessage(ResponseModel):
    role: str
    content: str


class ChatTurn(RequestModel):
    """One chat message of a context sent inline (distill/contexts' `messages`)."""

    role: Literal["system", "user", "assistant"]
    content: str


class CheckAlternative(ResponseModel):
    action: str | dict[str, Any]
    success_rate: float | None = Field(None, description="successes / attempts; null with no credited attempt")
    low: float | None = Field(None, description="95% Wilson lower bound of success_rate (the sort key)")
    high: float | None = None
    successes: int
    failures: int
    attempts: int
    support: int = Field(description="stored steps that took this action in states like this")


class CheckEvidence(ResponseModel):
    exemplar_id: str = Field(description="the merged exemplar this step is evidence of (retrieval item_ids)")
    trajectory_id: str
    step_index: int | None = None
    similarity: float = Field(description="the cosine of the exemplar's environment state with the query's")
    exact_match: bool
    success: bool | None = Field(None, description="the step's credit: true credited, false debited, null neither")
    result: str | None = Field(None, description="the step's result (the observation after the action)")
    error: str | None = None


class CheckHeuristic(ResponseModel):
    id: str
    text: str


class CheckRequest(RequestModel):
    state: CheckState
    internal_state: str | None = Field(None, description="the agent's current plan / subgoal, matched separately")
    task: str | None = None
    action: str | dict[str, Any] = Field(
        description="the action about to be taken: text, or a tool call object (as a step's action)"
    )
    environment: str | None = Field(
        None, min_length=1, max_length=200, description="only history from this environment"
    )
    k: int | None = Field(
        50, ge=1, le=100, description="how many exemplars (state, action pairs) nearest the state are considered"
    )
    min_similarity: float | None = Field(
        0.8,
        ge=-1.0,
        le=1.0,
        description="states like this: an exemplar counts when the cosine of its environment state with this one is "
        "at least this (an exact match always counts; the internal state only ranks)",
    )
    filters: RetrieveFilters | None = None
    consistency_token: str | None = Field(None, description="from a write: wait until it is searchable")
    wait_timeout_ms: int | None = Field(5000, ge=0, le=60_000, description="how long to wait for consistency_token")


class CheckResult(ResponseModel):
    risk: CheckRisk
    support: int = Field(description="stored steps that took this action in states like this, credited or not")
    exact_match: bool = Field(description="this action was taken before in exactly this state")
    states: int = Field(description="exemplars (state, action pairs) of states like this that were considered")
    evidence: list[CheckEvidence] = Field(
        description="the steps behind `risk`: exact state first, then by similarity; within an exemplar failures "
        "first; at most 20",
    )
    alternatives: list[CheckAlternative] = Field(
        description="other actions taken in states like this, best first by the Wilson lower bound of success"
    )
    heuristics: list[CheckHeuristic] = Field(
        description="active heuristics whose trigger or guideline names this action (at most 20)"
    )
    retrieval_id: str | None = Field(
        None, description="the logged retrieval of the exemplars (report an outcome for it naming item_ids)"
    )
    waited_ms: int = Field(0, description="time spent waiting for consistency_token")


class CheckRisk(ResponseModel):
    rate: float | None = Field(
        None, description="failures / attempts; null when no attempt of this action was credited"
    )
    low: float | None = Field(None, description="the 95% Wilson score interval of `rate`, lower bound")
    high: float | None = Field(None, description="the 95% Wilson score interval of `rate`, upper bound")
    failures: int = Field(description="debited steps: the step that caused a failed episode")
    attempts: int = Field(
        description="credited steps: successes + failures (a failed episode's other steps are neither)"
    )


class CheckState(RequestModel):
    observation: str = Field(description="what the agent observes now, as text (not empty)")
    data: dict[str, Any] | None = Field(None, description="optional structured state")


class TrajectoryCreate(RequestModel):
    id: ClientId | None = Field(None, description="client-supplied id; makes retries idempotent")
    task: str = Field(min_length=1)
    environment: str | None = Field(None, min_length=1, max_length=200)
    agent: str | None = Field(None, min_length=1, max_length=200)
    policy_version: str | None = Field(None, min_length=1, max_length=200)
    group_id: ClientId | None = Field(None, description="sibling rollouts share a group id")
    parent_trajectory_id: ClientId | None = Field(
        None, description="the earlier attempt at this task that this one retries (attempt summaries, attempts export)"
    )
    attempt: int | None = Field(None, ge=1, le=1_000_000, description="which attempt this is (1 = the first)")
    metadata: dict[str, Any] | None = None
    steps: list[Step] = Field(default_factory=list)
    outcome: Outcome | None = Field(None, description="given: the trajectory is stored closed")
    retrieval_ids: list[ClientId] | None = Field(None, description="retrievals whose items this episode used")


class ContextTrajectory(TrajectoryCreate, StoredOrInline):
    """A stored trajectory named by `{"id"}` alone, or an inline one (a rollout group
    not yet stored): the body of POST …/trajectories, `id` optional.
    """

    task: str | None = Field(None, min_length=1, description="inline: required; a stored trajectory gives only id")


class ContextUsed(ResponseModel):
    """What a referenced context resolved to."""

    trajectory_id: str
    step: int
    teacher: str | None = None
    rendering: str
    applicable: bool = Field(description="false: the teacher had nothing to add; the plain context was scored")
    template_version: str


class ContextsRequest(RequestModel):
    snapshot: ClientId | None = Field(None, description="read memory and trajectories as pinned by this snapshot")
    template: str | None = Field(
        "default", pattern="^[a-z0-9][a-z0-9_-]{0,62}$", description="the context template (its version echoed)"
    )
    trajectories: list[ContextTrajectory] = Field(min_length=1)
    teachers: list[TeacherSpec] = Field(default_factory=list, description="teacher contexts wanted, each under NAME")
    leakage: LeakageOptions | None = None
    history_max_chars: int | None = Field(
        16_000,
        ge=0,
        le=1_000_000,
        description="the history shown (earlier steps' turns) never exceeds this; the oldest steps go first",
    )
    history_steps: int | None = Field(
        None,
        ge=0,
        le=1_000_000,
        description="at most this many earlier steps shown (default: any number), the oldest dropped first; the sft "
        "export's `history`",
    )
    include: list[ContextInclude] | None = Field(
        None,
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


class ContextsResult(ResponseModel):
    snapshot: str | None = None
    template_version: str = Field(description="name@version of the template the texts were built with")
    trajectories: list[TrajectoryContexts]


class ContrastiveSettings(RequestModel):
    """The offline contrastive-heuristics reflector (docs/reflection.md)."""

    enabled: bool | None = True
    similarity: float | None = Field(
        0.85, ge=0.5, le=1.0, description="cosine that puts two states in one neighbourhood"
    )
    min_support: int | None = Field(5, ge=1, description="attempts an action needs before it becomes a heuristic")
    min_confidence: float | None = Field(0.5, ge=0.0, le=1.0, description="Wilson lower bound the rate must reach")
    min_lift: float | None = Field(0.2, ge=0.0, le=1.0, description="how much better a 'prefer' action must do")


class CreditSettings(RequestModel):
    """How a reported outcome is shared among what a retrieval served (docs/retrieval.md)."""

    unnamed_top_k: int | None = Field(
        3,
        ge=0,
        le=100,
        description="an outcome that names no item_ids (and an episode closing over its retrievals) credits only the "
        "served items ranked in the top this-many: an agent acts on what ranks first, not on all 100 "
        "look-alikes of a context; 0 credits every served item",
    )
    holdout_rate: float | None = Field(
        0.0,
        ge=0.0,
        le=0.5,
        description="share of the episodes from which each item that would be served is withheld at random, to "
        "estimate its causal effect on success (never an exact match, never under a snapshot); 0 = off",
    )


class RubricCriterion(RequestModel):
    id: ClientId = Field(description="unique within the rubric; names the criterion in scores")
    text: str = Field(min_length=1, max_length=2000, description="the criterion, judgeable from the trajectory")
    weight: float = Field(ge=0.0, description="its share of the reward (weights need not sum to 1; not all 0)")
    check: dict[str, Any] | None = Field(
        None,
        description="a rule that decides the criterion; null: an LLM judges it. {type: "
        "regex|contains|not_contains|json_path|numeric|tool_called|max_steps, …}; see docs/trainers.md "
        "for each type's fields and the scopes",
    )
    stage: str | None = Field(
        None, min_length=1, max_length=200, description="score it on the steps whose metadata.stage is this only"
    )
    rationale: str | None = Field(None, max_length=2000, description="why it matters (kept, not scored)")


class RubricCriterionRead(ResponseModel):
    id: str
    text: str
    weight: float
    check: dict[str, Any] | None = Field(None, description="as stored; null: judged by an LLM")
    stage: str | None = None
    method: Literal["rule", "llm"]


class CriterionScore(ResponseModel):
    id: str
    score: float | None = Field(None, description="in [0, 1] (rules: 0 or 1); null when skipped")
    weight: float
    method: CriterionMethod
    rationale: str | None = None
    stage: str | None = None


class Diagnostics(ResponseModel):
    batch: BatchDiagnostics
    groups: list[GroupDiagnostics]


class DistillSettings(RequestModel):
    """Teacher contexts for on-policy distillation (docs/trainers.md)."""

    tokenizer_file: str | None = Field(
        None,
        min_length=1,
        max_length=4096,
        description="a Hugging Face `tokenizers` tokenizer.json on the server (the student's tokenizer): when set, "
        "teachers may ask for max_tokens and every context reports its tokens",
    )


class EntryPrefixes(ResponseModel):
    task: str
    trajectory_id: str | None = Field(None, description="the rollout asked for (trajectories); null for tasks")
    prefixes: list[Prefix]
    candidates: int = Field(description="successful trajectories of the task read (the newest, at most 256)")
    excluded: int = Field(description="of them, withheld by the leakage guards")


class ErrorDetail(ResponseModel):
    type: str = Field(description="what kind of error: invalid_input, unauthorized, not_found, conflict, …")
    message: str
    field: str | None = Field(None, description="the field at fault, as a path (`steps[3].state.observation`)")
    rule: str | None = Field(None, description="the rule it broke, machine-readable")
    errors: list[dict[str, Any]] | None = Field(None, description="every problem, for schema errors")


class ErrorResponse(ResponseModel):
    """The one shape of every error answer (docs/api.md, "Errors")."""

    error: ErrorDetail


class EvidenceCardSettings(RequestModel):
    enabled: bool | None = True
    groups: int | None = Field(3, ge=1, le=100, description="latest rollout groups a task's card draws on")


class EvidenceLink(ResponseModel):
    trajectory_id: str
    step_start: int | None = None
    step_end: int | None = None


class Fade(RequestModel):
    """Scaffold fading (Pats): each teacher context's budget (characters, tokens and
    items) times share = max(floor, 1 − the task's success rate for policy_version),
    the rate as GET …/tasks?group_by=task,policy_version gives it; the full budget
    while the task has fewer than min_attempts closed attempts by that version.
    """

    by: str
    policy_version: str = Field(
        min_length=1, max_length=200, description="the policy version whose success on each task fades its scaffold"
    )
    floor: float | None = Field(0.0, ge=0.0, le=1.0, description="the smallest share of the budget kept")
    min_attempts: int | None = Field(4, ge=1, le=1_000_000, description="closed attempts before a success rate counts")
    teachers: list[str] | None = Field(
        None, min_length=1, description="the teacher names faded (default: every teacher)"
    )


class FreezeState(ResponseModel):
    namespace: str
    frozen: bool
    frozen_at: datetime | None = None


class GroupDiagnostics(ResponseModel):
    group_id: str
    trajectories: int
    tokens: int
    reward_mean: float | None = Field(None, description="over non-null rewards (null: none was scored)")
    reward_std: float | None = Field(None, description="sample std (null under two scored rewards)")
    sign_flips: int
    order_consistency: float | None = None
    order_pairs: int | None = None
    length_correlation: float | None = None
    signal_mean: float | None = Field(None, description="mean over the group of the summed signal S_i")
    clipped_tokens_share: float | None = None
    sign_flips_prevented: int | None = None


class HistoryParts(ResponseModel):
    """A trajectory's turns, once: step i's plain messages are the system message, then
    for each earlier step j shown (from omitted_steps to i − 1) users[j − start] and
    assistants[j − start], then users[i − start]; with a marker, the first user
    message is the marker, a blank line and its turn.
    """

    system: str = Field(description="the plain system message (the task)")
    start: int = Field(description="the step index users[0] and assistants[0] belong to")
    users: list[str] = Field(description="each step's user turn: the previous result and its observation")
    assistants: list[str] = Field(description="each step's assistant turn: its action")


class HoldoutArm(ResponseModel):
    units: int = Field(description="episodes (or retrievals without one) in this arm with a success/failure outcome")
    successes: int
    rate: float = Field(description="posterior mean success rate (Beta prior of strength 2 on the baseline)")


class JobRead(ResponseModel):
    id: str
    kind: str
    status: Literal["queued", "running", "done", "failed"]
    payload: dict[str, Any]
    priority: int
    attempts: int
    max_attempts: int
    last_error: str | None = None
    locked_by: str | None = None
    run_after: datetime
    lease_expires_at: datetime | None = None
    created_at: datetime
    updated_at: datetime
    finished_at: datetime | None = None


class KeyCreate(RequestModel):
    role: Role
    namespaces: list[str] = Field(min_length=1, description='namespace names this key may touch, or ["*"] for all')
    description: str | None = Field(None, max_length=200)


class Key(ResponseModel):
    id: str
    role: Role
    namespaces: list[str]
    description: str | None = None
    created_at: datetime
    revoked_at: datetime | None = None
    expires_at: datetime | None = Field(None, description="set by a rotation: refused from then on")
    last_used_at: datetime | None = Field(None, description="when it last authenticated (to within a minute)")


class KeyCreated(Key):
    key: str = Field(description="the secret; shown only in this response")


class KeyRotate(RequestModel):
    grace_seconds: int | None = Field(
        3600, ge=0, le=2_592_000, description="how long the old key stays valid beside the new one (0: refused at once)"
    )
    description: str | None = Field(None, max_length=200, description="the new key's (default: the old key's)")


class LLMReflectionSettings(RequestModel):
    """The LLM reflectors (docs/reflection.md). They run only when the server has an
    LLM configured (`REFLEXA_LLM__BASE_URL`); these settings choose what they do per
    namespace.
    """

    enabled: bool | None = Field(
        True, description="run the LLM reflectors in this namespace (when an LLM is configured)"
    )
    reflectors: list[Literal["heuristics", "skills", "rubrics", "golden_negatives"]] | None = Field(
        None,
        description="which LLM reflectors run: heuristics (every closed attempt), skills (successes), rubrics (tasks "
        "with mixed outcomes), golden_negatives (failed attempts with metadata.expert = true)",
    )
    dedup_similarity: float | None = Field(
        0.92,
        ge=0.5,
        le=1.0,
        description="cosine at or above which a new heuristic or skill is the same as an existing one: its evidence "
        "is merged into it (an automatic UPVOTE, no LLM call)",
    )
    maintenance_similarity: float | None = Field(
        0.75,
        ge=0.0,
        le=1.0,
        description="cosine at or above which existing heuristics are shown to the pool-maintenance prompt as "
        "neighbours of a new one (ADD / EDIT / UPVOTE / DOWNVOTE); with none, the new one is added",
    )
    max_neighbours: int | None = Field(5, ge=1, le=20, description="most existing heuristics shown to pool maintenance")
    activation: Literal["evidence", "operator"] | None = Field(
        "evidence",
        description="evidence: a candidate becomes active when its importance reaches activation_importance; "
        "operator: only an operator's approval (PATCH status active) activates",
    )
    activation_importance: int | None = Field(
        3,
        ge=1,
        le=1000,
        description="importance (1 when added, +1 per UPVOTE / EDIT / merged duplicate, -1 per DOWNVOTE) at which a "
        "candidate becomes active; for a rubric, the attempts it was written from",
    )
    rubric_attempts: int | None = Field(
        8, ge=2, le=32, description="most attempts of a task shown to the rubrics prompt (successes and failures)"
    )
    rubric_min_new_attempts: int | None = Field(
        2, ge=1, le=100, description="attempts not yet behind a task's rubric needed before it is rewritten"
    )
    max_prompt_steps: int | None = Field(
        60, ge=4, le=1000, description="most steps of one trajectory shown to a prompt (first and last kept)"
    )


class LeakageOptions(RequestModel):
    """Leakage guards, all on by default: memory never shows evidence from the
    trajectory itself, its rollout group, or (allow_same_task false) its task.
    """

    allow_same_trajectory: bool | None = False
    allow_same_group: bool | None = False
    allow_same_task: bool | None = Field(
        False, description="not applied to evidence_card and attempt_summary (task-scoped)"
    )


class LeakageApplied(ResponseModel):
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
        description="items left out because their evidence is this trajectory's, its group's or its task's (an "
        "exemplar or a card only when nothing is left once that evidence is subtracted)",
    )
    redacted_actions: int = Field(0, description="occurrences of the step's own action replaced by [action withheld]")
    subtracted_evidence: int = Field(
        0,
        description="guarded evidence subtracted rather than the item hidden: evidence rows of merged exemplars "
        "(their counts recomputed without them), rollouts of an evidence card (the card rebuilt without "
        "them)",
    )


class LexicalCalibrationRead(ResponseModel):
    """The last check of a namespace's lexical weight against its own near-duplicate
    states (docs/retrieval.md, "The calibrated lexical weight").
    """

    weight: float | None = Field(
        None, description="the weight a `calibrated` namespace ranks with; null: none chosen yet (0.5 is used)"
    )
    states: int = Field(description="distinct stored state texts read (the newest exemplars', at most 5,000)")
    near_duplicates: int = Field(description="pairs of them of the same length, 1 to 3 token positions apart")
    queries: int = Field(description="labelled queries built from them (a state with one word changed)")
    ambiguous: int = Field(description="queries dropped: another stored state as near as their own")
    recall_at_1: dict[str, float] = Field(
        default_factory=dict, description="per weight tried, the share of queries whose own state ranked first"
    )
    min_queries: int = Field(description="fewer queries than this choose no weight")
    checked_at: datetime
    calibrated_at: datetime | None = Field(None, description="when the weight was chosen")
    calibrated_states: int | None = Field(None, description="distinct states when the weight was chosen")
    next_check_at: datetime


class Logprobs(RequestModel):
    """The sampled tokens' log-probs under each model or context (a plain list is
    named "default" where a name is needed).
    """

    student: list[float] | None = Field(None, description="log π_S(y_t | plain context): the student, as sampled")
    teacher: list[float] | dict[SignalName, list[float]] | None = Field(
        None, description="log π_T(y_t | teacher context); several teachers (hindsight horizons) as {NAME: [float]}"
    )
    pre: list[float] | dict[SignalName, list[float]] | None = Field(
        None, description="direct_opd: log π_pre(y_t) under the pre-RL checkpoint(s)"
    )
    post: list[float] | dict[SignalName, list[float]] | None = Field(
        None, description="direct_opd: log π_post(y_t) under the post-RL checkpoint(s)"
    )
    rollout: list[float] | None = Field(
        None, description="log π_rollout(y_t): the inference engine's log-probs of the same tokens (params.is)"
    )
    ref: list[float] | None = Field(None, description="log π_ref(y_t): a reference model's (params.kl)")


class NamespaceCreate(RequestModel):
    name: str = Field(pattern="^[a-z0-9][a-z0-9_-]{0,62}$", description="1-63 of a-z 0-9 _ -, starting a-z or 0-9")
    settings: NamespaceSettings | None = None


class Namespace(ResponseModel):
    name: str
    settings: NamespaceSettingsRead
    created_at: datetime
    frozen: bool = Field(False, description="frozen for evaluation: memory does not change until thawed")
    frozen_at: datetime | None = None
    lexical_calibration: LexicalCalibrationRead | None = Field(
        None,
        description="the last lexical calibration (null: never checked; a fixed `lexical_weight` is never checked)",
    )


class NamespaceSettings(RequestModel):
    """Per-namespace behaviour; every field has a default, unknown fields are refused."""

    gamma: float | None = Field(0.95, ge=0.0, le=1.0, description="discount for return-to-go")
    state_text: StateTextSettings | None = None
    ranking: RankingSettings | None = None
    credit: CreditSettings | None = None
    reflection: ReflectionSettings | None = None
    distill: DistillSettings | None = None


class NamespaceSettingsRead(ResponseModel):
    gamma: float = 0.95
    state_text: dict[str, Any] = Field(default_factory=dict)
    ranking: dict[str, Any] = Field(default_factory=dict)
    credit: dict[str, Any] = Field(default_factory=dict)
    reflection: dict[str, Any] = Field(default_factory=dict)


class OpenRLHFRequest(ResponseModel):
    """What OpenRLHF's remote reward model client POSTs (--remote_rm_url). Unknown
    fields are ignored: a newer OpenRLHF may send more.
    """

    query: list[str] = Field(description="prompt + response, as OpenRLHF decoded them")
    prompts: list[str] | None = Field(None, description="the prompts, one per query")
    labels: list[Any] | None = Field(None, description="the ground truths, one per query")


class OpenRLHFResponse(ResponseModel):
    rewards: list[float]
    scores: list[float] = Field(description="the same values, in [0, 1] (OpenRLHF's dynamic filtering reads them)")
    extra_logs: dict[str, list[float]] = Field(description="rubric/<criterion id>: its score per query")


class Outcome(RequestModel):
    success: bool | None = None
    reward: float | None = None
    failure_reason: str | None = None
    details: dict[str, Any] | None = None


class OutcomeRead(ResponseModel):
    success: bool | None = None
    reward: float | None = None
    failure_reason: str | None = None
    details: dict[str, Any] | None = None


class PlainContext(ResponseModel):
    text: str | None = Field(None, description="null when `include` leaves it out")
    messages: list[ChatMessage] | None = Field(None, description="null when `include` leaves it out")
    omitted_steps: int = Field(0, description="earlier steps dropped by history_steps and history_max_chars")
    marker: str | None = Field(
        None,
        description="parts, with omitted_steps > 0: the line the first user message shown starts with (then a blank "
        "line, then that step's turn)",
    )
    tokens: int | None = Field(None, description="tokens of `text` (with a tokenizer configured)")


class Prefix(ResponseModel):
    trajectory_id: str = Field(description="the stored successful trajectory replayed")
    reward: float | None = None
    total_steps: int
    prefix_steps: int = Field(description="min(total_steps − 1, ⌊fraction · total_steps⌋)")
    steps: list[PrefixStep] = Field(description="its first prefix_steps steps, to replay before the policy acts")


class PrefixLeakage(RequestModel):
    """The guards of contexts that apply to prefixes (a prefix is of the same task by
    design): never the trajectory itself or a member of its rollout group.
    """

    allow_same_trajectory: bool | None = False
    allow_same_group: bool | None = False


class PrefixStep(ResponseModel):
    index: int
    state: StateRead
    internal_state: str | None = None
    action: str | dict[str, Any]
    result: str | None = None
    error: str | None = None
    reward: float | None = None


class PrefixTrajectory(RequestModel):
    """The rollout a prefix is wanted for: a stored trajectory by `{"id"}` alone, or
    the task (with the id and rollout group the trainer will give it, for the guards).
    """

    id: ClientId | None = None
    task: str | None = Field(None, min_length=1, description="inline: the task; a stored trajectory gives only id")
    group_id: ClientId | None = Field(None, description="inline: its rollout group (stored ones of it are excluded)")


class PrefixesRequest(RequestModel):
    snapshot: ClientId | None = Field(None, description="read trajectories as pinned by this snapshot")
    tasks: list[str] | None = Field(None, min_length=1, description="prefixes per task (no guard applies)")
    trajectories: list[PrefixTrajectory] | None = Field(
        None, min_length=1, description="prefixes for each of these rollouts' tasks, with the leakage guards"
    )
    step: int = Field(ge=0, description="the trainer's step, which the schedule decays with")
    schedule: StepDecay
    k: int | None = Field(1, ge=1, le=16, description="prefixes per entry, best first")
    leakage: PrefixLeakage | None = None


class PrefixesResponse(ResponseModel):
    snapshot: str | None = None
    step: int
    fraction: float = Field(description="the schedule's share at this step")
    entries: list[EntryPrefixes] = Field(description="one per task or trajectory asked for, in request order")


class RankingSettings(RequestModel):
    """Weights of the retrieval ranking (docs/retrieval.md)."""

    internal_weight: float | None = Field(
        0.3, ge=0.0, le=1.0, description="weight of the internal-state match when query and item both have one"
    )
    utility_weight: float | None = Field(
        0.5, ge=0.0, le=2.0, description="how far utility moves an item within the similarity band"
    )
    lexical_weight: Annotated[float, Field(ge=0.0, le=1.0)] | str | None = Field(
        "calibrated",
        description="share of the lexical match (overlap of the state texts' words and near word pairs, numbers and "
        "short words included) in an item's relevance: (1 - w) * dense cosine + w * lexical; the lexical "
        "index also adds its own best matches to the candidates; 0 turns both off. `calibrated`: the "
        "weight the namespace's own near-duplicate states choose, refreshed as it grows "
        "(docs/retrieval.md), 0.5 until it has enough of them",
    )
    similarity_band: float | None = Field(
        0.05,
        ge=0.0,
        le=1.0,
        description="utility and recency reorder only items whose similarities are within this of each other; an "
        "exact match of the query state always ranks above every other item (docs/retrieval.md)",
    )
    recency_weight: float | None = Field(0.1, ge=0.0, le=1.0, description="share of the score that decays with age")
    recency_half_life_days: float | None = Field(30.0, gt=0.0, description="age at which recency counts half")


class ReflectionEffect(ResponseModel):
    """The item's causal effect on success, from the random holdout (docs/retrieval.md)."""

    reflection_id: str
    holdout_rate: float = Field(description="the namespace's credit.holdout_rate now (0: no new draws)")
    baseline: float = Field(description="the namespace's success rate over all reported retrievals")
    served: HoldoutArm
    withheld: HoldoutArm
    effect: float = Field(description="served rate minus withheld rate, shrunk toward 0 at low support")
    low: float = Field(description="95 % interval, lower end")
    high: float = Field(description="95 % interval, upper end")
    verdict: Literal["helps", "hurts", "unclear"] = Field(description="'helps' / 'hurts' when the interval excludes 0")


class ReflectionRead(ResponseModel):
    id: str
    kind: Kind
    status: ItemStatus
    version: int
    content: dict[str, Any]
    text: str
    environment: str | None = None
    task: str | None = None
    reflector: str
    reflector_version: str
    model: str | None = None
    evidence_count: int
    evidence_successes: int
    evidence_failures: int
    evidence_value: float | None = Field(None, description="mean value of the evidence (exemplars: return-to-go)")
    utility: ReflectionUtility
    evidence: list[EvidenceLink] = Field(description="newest first; all of it on GET one, the newest 5 in lists")
    created_at: datetime
    updated_at: datetime


class ReflectionSettings(RequestModel):
    contrastive: ContrastiveSettings | None = None
    evidence_cards: EvidenceCardSettings | None = None
    llm: LLMReflectionSettings | None = None


class ReflectionUpdate(RequestModel):
    """An edit (content/text: a new version, the old one kept in the history) and/or
    a status change (approve, retire, restore).
    """

    content: dict[str, Any] | None = None
    text: str | None = Field(None, min_length=1)
    status: ItemStatus | None = None
    note: str | None = Field(None, max_length=2000, description="why: kept in the history")
    expected_version: int | None = Field(None, ge=1, description="refuse (409) if someone edited it meanwhile")


class ReflectionUtility(ResponseModel):
    uses: int
    successes: int
    failures: int
    reward_sum: float


class ReflectionVersionRead(ResponseModel):
    version: int
    action: str
    status: ItemStatus
    content: dict[str, Any]
    actor: str
    note: str | None = None
    created_at: datetime


class RenderOptions(RequestModel):
    format: RenderFormat | None = "markdown"
    max_chars: int | None = Field(4000, ge=100, le=200_000, description="the context block never exceeds this")


class RetrievalOutcomeReport(RequestModel):
    success: bool | None = None
    reward: float | None = None
    trajectory_id: ClientId | None = None
    details: dict[str, Any] | None = None
    item_ids: list[str] | None = Field(
        None,
        max_length=1000,
        description="credit only these served items (the ones the agent acted on); default: every served item",
    )


class RetrievalOutcome(ResponseModel):
    retrieval_id: str
    success: bool | None = None
    reward: float | None = None
    credited_items: int


class RetrieveBatchRequest(RequestModel):
    requests: list[RetrieveRequest] = Field(
        min_length=1,
        description="one retrieve per state, each with its own filters (at most limits.max_batch_retrievals)",
    )


class RetrieveBatchResult(ResponseModel):
    results: list[RetrieveResult] = Field(description="in the order of `requests`, each with its own retrieval_id")


class RetrieveFilters(RequestModel):
    agent: str | None = Field(
        None, min_length=1, max_length=200, description="only items with evidence from this agent"
    )
    policy_version: str | None = Field(
        None, min_length=1, max_length=200, description="only items with evidence from this policy version"
    )
    status: list[ItemStatus] | None = Field(None, min_length=1)
    exclude_tasks: list[str] | None = Field(
        None, description="leakage guard: drop items with any evidence from these tasks"
    )
    exclude_trajectory_ids: list[ClientId] | None = Field(
        None, description="leakage guard: drop items with any evidence from these trajectories"
    )
    as_of: datetime | None = Field(None, description="only items that existed at this time")


class RetrieveRequest(RequestModel):
    state: State
    internal_state: str | None = Field(None, description="the agent's current plan / subgoal, matched separately")
    task: str | None = None
    environment: str | None = Field(None, min_length=1, max_length=200, description="only items from this environment")
    kinds: list[Kind] | None = Field(None, min_length=1)
    k: int | None = Field(10, ge=1, le=100)
    min_score: float | None = Field(None, description="drop items scoring below this")
    mmr_lambda: float | None = Field(
        None, ge=0.0, le=1.0, description="diversify with MMR: 1 = pure relevance, 0 = pure novelty"
    )
    filters: RetrieveFilters | None = None
    render: RenderOptions | None = Field(None, description="ask for a ready-to-inject context block")
    trajectory_id: ClientId | None = Field(
        None, description="the episode this retrieval serves; its outcome will credit the items"
    )
    step: int | None = Field(
        None,
        ge=0,
        description="the index of the episode's step this retrieval serves (the step taken with its answer); logged "
        "with the query, so the operator UI shows the retrieval beside that step",
    )
    snapshot: ClientId | None = Field(
        None,
        description="answer from this snapshot's memory (deterministic: the same request, the same bytes); not "
        "logged, so there is no retrieval_id to credit",
    )
    consistency_token: str | None = Field(None, description="from a write: wait until it is searchable")
    wait_timeout_ms: int | None = Field(5000, ge=0, le=60_000, description="how long to wait for consistency_token")


class RetrieveResult(ResponseModel):
    retrieval_id: str | None = Field(
        None, description="the logged retrieval to report an outcome for; null under a snapshot"
    )
    items: list[RetrievedItem]
    context: str | None = None
    gamma: float = Field(description="the discount used for return_to_go in exemplar items")
    waited_ms: int = Field(0, description="time spent waiting for consistency_token")


class RetrievedItem(ResponseModel):
    id: str
    kind: str
    status: str
    version: int
    content: dict[str, Any]
    text: str
    score: float = Field(
        description="the rank: similarity, adjusted by utility and recency within ranking.similarity_band; an exact "
        "match of the query state scores above every other item",
    )
    similarity: float = Field(
        description="raw cosine of the state match (joint with internal state when both have one)"
    )
    lexical_similarity: float | None = Field(
        None, description="word overlap of the state texts (cosine of their word sets); null without a lexical text"
    )
    exact_match: bool = Field(
        False, description="the item's state (and internal state, when the query gave one) is the query's, exactly"
    )
    state_similarity: float
    internal_similarity: float | None = None
    utility: Utility
    evidence: list[EvidenceLink]
    evidence_count: int
    environment: str | None = None
    created_at: datetime
    updated_at: datetime


class RubricCreate(RequestModel):
    id: ClientId = Field(description="client-supplied: a retry with the same body is a replay")
    name: str = Field(min_length=1, max_length=200)
    criteria: list[RubricCriterion] = Field(min_length=1, max_length=100)
    task: str | None = Field(None, min_length=1, description="the task it judges: retrieval matches it by this")
    environment: str | None = Field(None, min_length=1, max_length=200)
    status: Literal["candidate", "active"] | None = Field("active", description="served by retrieval when active")


class Rubric(ResponseModel):
    id: str
    namespace: str
    name: str
    status: str
    version: int
    criteria: list[RubricCriterionRead]
    text: str
    task: str | None = None
    environment: str | None = None
    reflector: str = Field(description="who wrote it: api (POST …/rubrics) or llm_rubrics (the reflector)")
    created_at: datetime
    updated_at: datetime


class RubricBatchScore(ResponseModel):
    rubric_id: str
    rubric_version: int
    items: list[RubricScore]
    reward_mean: float | None = Field(None, description="the mean reward of the items that have one")


class RubricScoreBatchRequest(RequestModel):
    """A rollout group (or any batch) scored with one rubric."""

    items: list[RubricScoreItem] = Field(min_length=1)
    snapshot: ClientId | None = None
    skip_judged: bool | None = False


class RubricScoreItem(RequestModel, OneTrajectory):
    """One trajectory to score: a stored one by id, or an inline one (the body of
    POST …/trajectories, not stored).
    """

    trajectory_id: ClientId | None = Field(None, description="a stored trajectory")
    trajectory: TrajectoryCreate | None = Field(None, description="an inline trajectory (not stored)")
    final_answer: str | dict[str, Any] | None = Field(
        None, description="what `final_answer` checks read; default: the last step's action"
    )
    label: Any = Field(
        None,
        description="the ground truth filled into `{{label}}` in checks and shown to the judge; default: a stored "
        "trajectory's metadata.label",
    )


class RubricScore(ResponseModel):
    rubric_id: str
    rubric_version: int
    trajectory_id: str | None = None
    reward: float | None = Field(None, description="sum(weight * score) / sum(weight) over the scored criteria")
    criteria: list[CriterionScore]
    stages: list[StageScore] = Field(description="per metadata.stage of the steps (RubricEM); empty without")


class RubricScoreRequest(RubricScoreItem):
    snapshot: ClientId | None = Field(None, description="read the rubric and stored trajectories as pinned")
    skip_judged: bool | None = Field(
        False, description="with no LLM configured, skip judged criteria (method 'skipped') instead of a 503"
    )


class ScoredItem(ResponseModel):
    index: int = Field(description="the item's position in the request")
    id: str | None = None
    token_ids: list[int] = Field(description="the continuation's tokens, as scored")
    logprobs: list[float] = Field(description="log π_teacher(token_ids[t] | context, token_ids[:t]), aligned")
    prompt_tokens: int = Field(description="tokens of the context the continuation was scored after")
    entropies: list[float] | None = Field(None, description="with `entropy`: the teacher's entropy at each position")
    top_k: list[list[TopLogprob]] | None = Field(None, description="with `top_k`: the k most likely, best first")
    context: ContextUsed | None = Field(None, description="for an item given by `ref`")
    endpoint_ms: float = Field(description="the duration of the endpoint call that scored this item")


class SnapshotCreate(RequestModel):
    id: ClientId | None = Field(None, description="client-supplied id; makes retries idempotent")
    note: str | None = Field(None, max_length=2000)


class Snapshot(ResponseModel):
    id: str
    namespace: str
    watermark: int = Field(description="the namespace's change-feed position when it was taken")
    note: str | None = None
    reflection_count: int
    trajectory_count: int
    step_count: int
    created_by: str | None = None
    created_at: datetime


class StageScore(ResponseModel):
    stage: str
    steps: list[int] = Field(description="the indexes of the stage's steps")
    reward: float | None = None
    criteria: list[CriterionScore]


class State(RequestModel):
    observation: str = Field(description="what the agent observed, as text")
    data: dict[str, Any] | None = Field(None, description="optional structured state")


class StateRead(ResponseModel):
    observation: str
    data: dict[str, Any] | None = None


class StateTextSettings(RequestModel):
    """How a state becomes the text that is embedded and matched (docs/retrieval.md).
    The agent's internal state is embedded separately, never folded in here.
    """

    fields: list[Literal["task", "observation", "data"]] | None = Field(
        None,
        min_length=1,
        description="what goes into the state text, in order: the task, the observation text, the structured state "
        "data (as sorted `key: value` lines)",
    )
    max_chars: int | None = Field(2000, ge=100, le=100_000, description="state text is cut to this before embedding")


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


class StepContexts(ResponseModel):
    index: int
    plain: PlainContext
    teachers: dict[str, TeacherContext]


class Step(RequestModel, RolloutTokens):
    index: int | None = Field(
        None,
        ge=0,
        description="position in the trajectory; when given it must be the next free index (or an index already "
        "stored with an identical step, which is a harmless replay)",
    )
    state: State
    internal_state: str | None = Field(None, description="the agent's plan / subgoal / thought")
    action: str | dict[str, Any] = Field(description="action text or a tool call object")
    result: str | None = Field(None, description="observation after the action")
    error: str | None = None
    reward: float | None = None
    done: bool | None = Field(False, description="terminal step")
    truncated: bool | None = Field(False, description="cut by a time limit (distinct from done)")
    caused_failure: bool | None = Field(False, description="this step caused the episode's failure")
    policy_version: str | None = Field(
        None,
        min_length=1,
        max_length=200,
        description="the policy that acted at this step, when it differs from step to step (asynchronous RL); null: "
        "the trajectory's policy_version applies (it is not copied here)",
    )
    rollout_logprobs: list[float] | None = Field(
        None,
        description="the inference engine's log-probs of the step's action tokens, one per token, each finite and <= "
        "0 (send a large negative number for a token the engine gave -inf); at most "
        "limits.max_rollout_tokens_per_step",
    )
    rollout_token_ids: list[int] | None = Field(
        None, description="the ids of those tokens (0 <= id < 2^31), as many as rollout_logprobs when both are given"
    )
    metadata: dict[str, Any] | None = None


class StepDecay(RequestModel):
    """fraction(step) = max(min_fraction, start_fraction · 2^(−step / half_life_steps))."""

    kind: str
    start_fraction: float = Field(gt=0.0, le=1.0, description="the share of steps replayed at trainer step 0")
    half_life_steps: float = Field(gt=0.0, description="trainer steps after which the share has halved")
    min_fraction: float | None = Field(0.0, ge=0.0, le=1.0, description="the share never falls below this")


class StepRead(ResponseModel):
    index: int
    state: StateRead
    internal_state: str | None = None
    action: str | dict[str, Any]
    result: str | None = None
    error: str | None = None
    reward: float | None = None
    done: bool = False
    truncated: bool = False
    caused_failure: bool = False
    policy_version: str | None = Field(None, description="null: the trajectory's policy_version applies")
    rollout_logprobs: list[float] | None = None
    rollout_token_ids: list[int] | None = None
    metadata: dict[str, Any] | None = None
    created_at: datetime


class StepsAppend(RequestModel):
    steps: list[Step] = Field(min_length=1)


class StepsAppended(ResponseModel):
    trajectory_id: str
    step_count: int
    appended: int = Field(description="steps newly stored by this call (replayed ones excluded)")
    consistency_token: str


class TaskStats(ResponseModel):
    task_hash: str
    task: str
    policy_version: str | None = Field(
        None, description="with group_by=task,policy_version; null with group_by=task (or for rollouts without one)"
    )
    attempts: int = Field(description="closed trajectories")
    open: int = Field(description="trajectories not closed yet (no attempt yet)")
    successes: int
    failures: int
    rewarded: int = Field(description="attempts with a reward: `reward`, else 1.0/0.0 from `success`")
    success_rate: float | None = Field(None, description="successes / attempts with a success value; null when none")
    reward_mean: float | None = Field(None, description="over rewarded attempts; null when none")
    reward_var: float | None = Field(None, description="population variance over rewarded attempts; null when none")
    groups: int = Field(description="distinct non-null group_id")
    mixed_groups: int = Field(description="groups with both a success and a failure")
    signal_groups: int = Field(description="groups with at least two rewarded members (what learning_signal averages)")
    learning_signal: float | None = Field(
        None,
        description="mean over groups with >= 2 rewarded members of the within-group reward variance (population); "
        "null when no such group. All-win and all-lose groups give 0: GRPO learns nothing there",
    )
    last_seen: datetime = Field(description="latest created_at or closed_at")


class TaskStatsPage(Page[TaskStats]):
    snapshot: str | None = Field(None, description="the snapshot the statistics are as of; null: live")


class TeacherContext(ResponseModel):
    text: str | None = Field(None, description="null when `include` leaves it out")
    messages: list[ChatMessage] | None = Field(None, description="null when `include` leaves it out")
    item_ids: list[str] = Field(description="what the block was built from: reflection ids, step:N, outcome, …")
    chars: int = Field(description="length of the privileged block")
    item_chars: dict[str, int] = Field(default_factory=dict, description="characters of the block per item used")
    privileged: str = Field("", description="the privileged block alone")
    omitted_items: int = Field(0, description="items or lines left out by the budgets")
    tokens: int | None = Field(None, description="tokens of the privileged block (with a tokenizer configured)")
    leakage: LeakageApplied
    applicable: bool
    reason: str | None = Field(None, description="why not applicable (then text and messages are the plain ones)")
    budget: AppliedBudget | None = Field(None, description="with fade, for the teachers it names: the budget applied")
    system: str | None = Field(
        None, description="parts: the system message, in place of the plain one (the rest of the messages are plain's)"
    )


class TeacherContextRef(RequestModel):
    """A context the service builds: step `step` of stored trajectory `trajectory_id`,
    under teacher `teacher` (a name of the request's `contexts.teachers`; null: the
    plain context), rendered as `rendering`.
    """

    trajectory_id: ClientId
    step: int = Field(ge=0, description="the step's index")
    teacher: str | None = Field(
        None,
        pattern="^[A-Za-z0-9][A-Za-z0-9._:@-]{0,63}$",
        description="a key of contexts.teachers (TeacherSpec.key); null: the plain context",
    )
    rendering: ContextRendering | None = Field(
        "text", description="which rendering of the context to score under (messages: openai_completions only)"
    )


class TeacherContextsOptions(RequestModel):
    """How referenced contexts are built: the body of …/distill/contexts, less the
    trajectories and steps (taken from the items).
    """

    teachers: list[TeacherSpec] = Field(default_factory=list)
    snapshot: ClientId | None = None
    template: str | None = Field("default", pattern="^[a-z0-9][a-z0-9_-]{0,62}$")
    leakage: LeakageOptions | None = None
    history_max_chars: int | None = Field(16_000, ge=0, le=1_000_000)


class TeacherContinuation(RequestModel, OneContinuation):
    """The student's sampled continuation: its token ids (scored as they are), or a
    text tokenized without special tokens.
    """

    token_ids: list[Annotated[int, Field(ge=0)]] | None = Field(None, min_length=1, max_length=1_000_000)
    text: str | None = Field(None, min_length=1)


class TeacherEndpoint(ResponseModel):
    url: str = Field(description="the endpoint's root, without credentials")
    protocol: str
    model: str | None = None


class TeacherLogprobsItem(RequestModel, OneContext):
    id: str | None = Field(None, max_length=200, description="echoed in the answer, for the trainer's bookkeeping")
    continuation: TeacherContinuation
    context: TeacherPrompt | None = Field(None, description="the context inline (or give `ref`)")
    ref: TeacherContextRef | None = Field(None, description="a context built by the service (or give `context`)")


class TeacherLogprobsRequest(RequestModel):
    items: list[TeacherLogprobsItem] = Field(min_length=1)
    contexts: TeacherContextsOptions | None = Field(
        None, description="how items' `ref` contexts are built (needed once any item has a ref to a teacher)"
    )
    top_k: int | None = Field(0, ge=0, le=100, description="the teacher's k most likely tokens at each position")
    entropy: bool | None = Field(
        False, description="the teacher's entropy at each position (asks the endpoint for the whole distribution)"
    )


class TeacherLogprobsResult(ResponseModel):
    endpoint: TeacherEndpoint
    items: list[ScoredItem]
    timing: TeacherTiming


class TeacherPrompt(RequestModel, OnePrompt):
    """A context given inline, as …/distill/contexts returns it (`text` or `messages`),
    or already as token ids. Text is tokenized with the tokenizer's special tokens (a
    BOS); messages are rendered by the endpoint's chat template with the generation
    prompt (openai_completions only).
    """

    text: str | None = Field(None, min_length=1)
    messages: list[ChatTurn] | None = Field(None, min_length=1)
    token_ids: list[Annotated[int, Field(ge=0)]] | None = Field(None, min_length=1, max_length=1_000_000)


class TeacherSpec(RequestModel, TeacherKey):
    kind: TeacherKind
    name: str | None = Field(
        None,
        pattern="^[A-Za-z0-9][A-Za-z0-9._:@-]{0,63}$",
        description="the response key; default: the kind (hindsight: 'hindsight@h')",
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
        description="the privileged block never exceeds this (default 4000; with max_tokens only, 200,000)",
    )
    max_tokens: int | None = Field(
        None, ge=1, le=100_000, description="the block never exceeds this many tokens (needs distill.tokenizer_file)"
    )


class TeacherTiming(ResponseModel):
    total_ms: float = Field(description="this request, end to end on our side")
    endpoint_ms: float = Field(description="wall time during which a scoring call to the endpoint was in flight")
    tokenize_ms: float = Field(description="tokenizing contexts and continuations (file or endpoint)")
    contexts_ms: float = Field(description="building referenced contexts")
    requests: int = Field(description="scoring requests sent (each up to teacher.max_batch sequences)")
    retries: int = Field(description="requests repeated after a connection error, 429 or 5xx")


class TeacherTopK(RequestModel):
    """Per token, the teacher's k most likely next tokens (k the same for every token
    of a trajectory): their teacher log-probs and the student's log-probs of the same
    tokens. Used by the entropy rule of token_signal.
    """

    teacher: list[list[float]] = Field(description="(tokens × k) the teacher's top-k log-probs")
    student: list[list[float]] = Field(description="(tokens × k) the student's log-probs of those tokens")


class TopLogprob(ResponseModel):
    token_id: int | None = Field(None, description="null: the endpoint named the token only by its text (echo mode)")
    token: str | None = Field(None, description="the token's text, where the endpoint gave only that")
    logprob: float


class TrajectoryAdvantages(ResponseModel):
    id: str
    group_id: str
    advantage: float | None = Field(
        None, description="the outcome advantage A used (null: the trainer sent a per-token list)"
    )
    advantages: list[float] = Field(description="per token, aligned with the input tokens; 0 on masked tokens")
    token_rewards: list[float] | None = Field(
        None, description="per token: r_t after regulation (step methods: the hindsight gap); 0 on masked tokens"
    )
    steps: list[int] | None = Field(None, description="step methods: the step indices, in order")
    step_signal: list[float] | None = Field(
        None, description="per step (aligned with `steps`): step_shaping g_s; horizon_agreement z_s"
    )
    step_scale: list[float] | None = Field(None, description="per step: A'_s / A")
    is_weights: list[float] | None = Field(
        None, description="params.is: per token the off-policy weight w_t (0 on masked tokens)"
    )
    kl: list[float] | None = Field(
        None, description="params.kl: per token kl_t as subtracted (coef · kl_t), centred when asked; 0 on masked"
    )


class TrajectoryBatchCreate(RequestModel):
    trajectories: list[TrajectoryCreate] = Field(min_length=1)


class TrajectoryContexts(ResponseModel):
    id: str | None = Field(None, description="the trajectory's id (null: an inline trajectory sent without one)")
    steps: list[StepContexts]
    history: HistoryParts | None = Field(None, description="with include parts: the turns the steps' messages use")


class TrajectoryDeleted(ResponseModel):
    id: str
    deleted_steps: int
    deleted_reflections: int


class Trajectory(ResponseModel):
    id: str
    namespace: str
    task: str
    environment: str | None = None
    agent: str | None = None
    policy_version: str | None = None
    group_id: str | None = None
    parent_trajectory_id: str | None = None
    attempt: int | None = None
    metadata: dict[str, Any] | None = None
    retrieval_ids: list[str] | None = None
    status: TrajectoryStatus
    outcome: OutcomeRead | None = None
    step_count: int
    created_at: datetime
    updated_at: datetime
    closed_at: datetime | None = None
    steps: list[StepRead] | None = Field(None, description="present when asked for (GET one, include_steps)")


class TrajectoryWritten(Trajectory):
    consistency_token: str = Field(description="pass to retrieve for read-your-writes")


class Utility(ResponseModel):
    mean: float = Field(description="posterior mean success rate when served (Beta, centred on the baseline)")
    std: float = Field(description="posterior standard deviation: the uncertainty of `mean`")
    uses: int
    successes: int
    failures: int
    baseline: float = Field(description="the namespace's success rate over all reported retrievals")


__all__ = [
    "AdvantageGroup",
    "AdvantageMethod",
    "AdvantagesRequest",
    "AdvantagesResponse",
    "AdvantageTrajectory",
    "AppliedBudget",
    "BatchDiagnostics",
    "BatchItemResult",
    "BatchResult",
    "ChatMessage",
    "ChatTurn",
    "CheckAlternative",
    "CheckEvidence",
    "CheckHeuristic",
    "CheckRequest",
    "CheckResult",
    "CheckRisk",
    "CheckState",
    "ClientId",
    "ContextInclude",
    "ContextRendering",
    "ContextsRequest",
    "ContextsResult",
    "ContextTrajectory",
    "ContextUsed",
    "ContrastiveSettings",
    "CreditSettings",
    "CriterionMethod",
    "CriterionScore",
    "Diagnostics",
    "DistillSettings",
    "EntryPrefixes",
    "ErrorDetail",
    "ErrorResponse",
    "EvidenceCardSettings",
    "EvidenceLink",
    "Fade",
    "FreezeState",
    "GroupDiagnostics",
    "HistoryParts",
    "HoldoutArm",
    "ItemStatus",
    "JobRead",
    "Key",
    "KeyCreate",
    "KeyCreated",
    "KeyRotate",
    "Kind",
    "LeakageApplied",
    "LeakageOptions",
    "LexicalCalibrationRead",
    "LLMReflectionSettings",
    "Logprobs",
    "Namespace",
    "NamespaceCreate",
    "NamespaceSettings",
    "NamespaceSettingsRead",
    "OpenRLHFRequest",
    "OpenRLHFResponse",
    "Outcome",
    "OutcomeRead",
    "PlainContext",
    "Prefix",
    "PrefixesRequest",
    "PrefixesResponse",
    "PrefixLeakage",
    "PrefixStep",
    "PrefixTrajectory",
    "RankingSettings",
    "ReflectionEffect",
    "ReflectionRead",
    "ReflectionSettings",
    "ReflectionUpdate",
    "ReflectionUtility",
    "ReflectionVersionRead",
    "RenderFormat",
    "RenderOptions",
    "RetrievalOutcome",
    "RetrievalOutcomeReport",
    "RetrieveBatchRequest",
    "RetrieveBatchResult",
    "RetrievedItem",
    "RetrieveFilters",
    "RetrieveRequest",
    "RetrieveResult",
    "RewardCapability",
    "RewardCapabilityCreate",
    "RewardCapabilityCreated",
    "Role",
    "Rubric",
    "RubricBatchScore",
    "RubricCreate",
    "RubricCriterion",
    "RubricCriterionRead",
    "RubricScore",
    "RubricScoreBatchRequest",
    "RubricScoreItem",
    "RubricScoreRequest",
    "ScoredItem",
    "SignalName",
    "Snapshot",
    "SnapshotCreate",
    "SortOrder",
    "StageScore",
    "State",
    "StateRead",
    "StateTextSettings",
    "Stats",
    "Step",
    "StepContexts",
    "StepDecay",
    "StepRead",
    "StepsAppend",
    "StepsAppended",
    "TaskGroupBy",
    "TaskSort",
    "TaskStats",
    "TaskStatsPage",
    "TeacherContext",
    "TeacherContextRef",
    "TeacherContextsOptions",
    "TeacherContinuation",
    "TeacherEndpoint",
    "TeacherKind",
    "TeacherLogprobsItem",
    "TeacherLogprobsRequest",
    "TeacherLogprobsResult",
    "TeacherPrompt",
    "TeacherSpec",
    "TeacherTiming",
    "TeacherTopK",
    "TopLogprob",
    "Trajectory",
    "TrajectoryAdvantages",
    "TrajectoryBatchCreate",
    "TrajectoryContexts",
    "TrajectoryCreate",
    "TrajectoryDeleted",
    "TrajectoryStatus",
    "TrajectoryWritten",
    "Utility",
]
