"""POST /v1/distill/advantages: log-probs in, shaped advantages out.

The core names (method, params, groups[{group_id, trajectories[{id, reward,
token_steps, mask, logprobs{student, teacher, pre, post}, teacher_entropy,
advantages}]}]; trajectories[{id, advantages, token_rewards, step_signal}],
diagnostics) are fixed by the trainer surface in DESIGN.md; the rest are
additions. Every per-token array of a trajectory has one entry per token of the
trajectory (the response's are aligned with them).
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from domain.schemas import ClientId, RequestModel, ResponseModel
from service.distill.signals.params import Method, SignalName

TokenFloats = list[float]
NamedFloats = TokenFloats | dict[SignalName, TokenFloats]

PARAMS_DOC = (
    "the method's parameters (docs/distillation.md), all optional: every method: std (true; rloo: false), "
    "eps (1e-6), scale (group | batch | none; default from std), singleton_groups (refuse | verl), "
    "null_rewards (refuse | trl), kl ({coef, estimator: k1 | k2 | k3, centered}; needs logprobs.ref), "
    "is ({mode: tis | mis, level: token | sequence, cap, low, high}; needs logprobs.rollout); "
    "token_signal: beta (1), discount (0), clip (null; c or [low, high]), compress (false), "
    "entropy_threshold (null), teacher (the only one sent), outcome (true), discount_masked (false); "
    "direct_opd: as token_signal without teacher, plus shifts [{post, pre, weight}]; "
    "step_shaping: lambda (0.5), alpha (1), budget (1), "
    "teacher, sign_aware (false); horizon_agreement: beta (0.5), horizons (every teacher sent), sign_aware (false)"
)


class Logprobs(RequestModel):
    """The sampled tokens' log-probs under each model or context (a plain list is
    named "default" where a name is needed)."""

    student: TokenFloats | None = Field(None, description="log π_S(y_t | plain context): the student, as sampled")
    teacher: NamedFloats | None = Field(
        None, description="log π_T(y_t | teacher context); several teachers (hindsight horizons) as {NAME: [float]}"
    )
    pre: NamedFloats | None = Field(None, description="direct_opd: log π_pre(y_t) under the pre-RL checkpoint(s)")
    post: NamedFloats | None = Field(None, description="direct_opd: log π_post(y_t) under the post-RL checkpoint(s)")
    rollout: TokenFloats | None = Field(
        None, description="log π_rollout(y_t): the inference engine's log-probs of the same tokens (params.is)"
    )
    ref: TokenFloats | None = Field(None, description="log π_ref(y_t): a reference model's (params.kl)")


class TeacherTopK(RequestModel):
    """Per token, the teacher's k most likely next tokens (k the same for every token
    of a trajectory): their teacher log-probs and the student's log-probs of the same
    tokens. Used by the entropy rule of token_signal."""

    teacher: list[list[float]] = Field(description="(tokens × k) the teacher's top-k log-probs")
    student: list[list[float]] = Field(description="(tokens × k) the student's log-probs of those tokens")


class AdvantageTrajectory(RequestModel):
    id: ClientId
    reward: float | None = Field(
        description="the outcome reward R (what GRPO and the order diagnostics compare); null: unscored "
        "(refused unless params.null_rewards is trl)"
    )
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
    method: Method
    params: dict[str, Any] | None = Field(None, description=PARAMS_DOC)
    groups: list[AdvantageGroup] = Field(min_length=1)


class TrajectoryAdvantages(ResponseModel):
    id: str
    group_id: str
    advantage: float | None = Field(
        description="the outcome advantage A used (null: the trainer sent a per-token list)"
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


class GroupDiagnostics(ResponseModel):
    group_id: str
    trajectories: int
    tokens: int
    reward_mean: float | None = Field(description="over non-null rewards (null: none was scored)")
    reward_std: float | None = Field(description="sample std (null under two scored rewards)")
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
    method: str
    params: dict[str, Any] = Field(description="every parameter with the value used (defaults filled in)")
    trajectories: list[TrajectoryAdvantages] = Field(description="in request order (groups, then trajectories)")
    diagnostics: Diagnostics
