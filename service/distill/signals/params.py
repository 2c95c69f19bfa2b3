"""The parameters of each advantage method, with their defaults (docs/distillation.md
writes each one out). The names are fixed by DESIGN.md's trainer surface; every
method also takes grpo's `std` and `eps`, which shape the outcome advantage A
whenever a trajectory brings no `advantages` of its own.

A request's `params` object is validated against its method's model: a parameter
the method does not read is refused (a typo never silently falls back to a
default). The rules across fields raise InvalidInput naming the field
(`params.lambda`); pydantic lets that through as it is.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from domain.errors import InvalidInput
from domain.schemas import RequestModel

Method = Literal["grpo", "rloo", "token_signal", "direct_opd", "step_shaping", "horizon_agreement"]
METHODS: tuple[Method, ...] = ("grpo", "rloo", "token_signal", "direct_opd", "step_shaping", "horizon_agreement")
Scale = Literal["group", "batch", "none"]
SAFETY_BOUND = 20.0  # |log ratio| bound before exp (verl's rollout_corr_helper SAFETY_BOUND and its k3 clamp)
SignalName = Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._:@-]{0,63}$")]
DEFAULT_NAME = "default"  # the name of a log-prob list sent without a name ([float] instead of {NAME: [float]})


class KlParams(RequestModel):
    """A reference-KL penalty on the returned advantages: per unmasked token d = log π_S − log π_ref,
    kl_t = k1: d | k2: d²/2 | k3: exp(−d) − 1 + d (Schulman, "Approximating KL divergence");
    centered: kl_t minus its mean over the batch's unmasked tokens (tinker-cookbook's
    incorporate_kl_penalty); advantages_t −= coef · kl_t."""

    coef: float = Field(ge=0, le=1e6, description="the penalty coefficient (required)")
    estimator: Literal["k1", "k2", "k3"] = Field("k1", description="k1: d; k2: d²/2; k3: exp(-d) - 1 + d")
    centered: bool = Field(False, description="subtract the mean kl over the batch's unmasked tokens first")


class IsParams(RequestModel):
    """Off-policy correction weights from `logprobs.rollout`: r_t = exp(student − rollout);
    tis: min(r, cap); mis: r inside [low, high], else 0; level sequence: r is the geometric
    mean of the trajectory's unmasked token ratios, broadcast. Defaults follow verl's
    rollout correction (rollout_is_threshold 2.0; rollout_rs lower bound 1/upper)."""

    mode: Literal["tis", "mis"] = Field(description="tis: truncated importance sampling; mis: masked")
    level: Literal["token", "sequence"] = Field("token", description="token ratios, or their geometric mean")
    cap: float | None = Field(None, gt=0, le=1e9, description="tis: the truncation bound (default 2.0)")
    low: float | None = Field(None, ge=0, le=1e9, description="mis: the lower bound (default 1/high)")
    high: float | None = Field(None, gt=0, le=1e9, description="mis: the upper bound (default 2.0)")

    @model_validator(mode="after")
    def _bounds(self) -> IsParams:
        if self.mode == "tis":
            for name in ("low", "high"):
                if getattr(self, name) is not None:
                    raise InvalidInput(
                        f"params.is.{name} is a bound of mode mis; tis takes cap",
                        field=f"params.is.{name}",
                        rule="mode_param",
                    )
            if self.cap is None:
                self.cap = 2.0
        else:
            if self.cap is not None:
                raise InvalidInput(
                    "params.is.cap is the bound of mode tis; mis takes low and high",
                    field="params.is.cap",
                    rule="mode_param",
                )
            if self.high is None:
                self.high = 2.0
            if self.low is None:
                self.low = 1.0 / self.high
            if self.low > self.high:
                raise InvalidInput(
                    f"params.is.low is {self.low:g} > params.is.high {self.high:g}; the kept range is [low, high]",
                    field="params.is.low",
                    rule="low_le_high",
                )
        return self


class GrpoParams(RequestModel):
    """Group-relative outcome advantages (GRPO, Shao et al. 2024; Dr. GRPO without the std),
    and what every method shares: how A is scaled, the conventions for groups of one and
    null rewards, and the off-policy weights and reference-KL penalty."""

    std: bool = Field(True, description="divide by the group's reward std (sample std, ddof 1); false: only centre")
    eps: float = Field(1e-6, gt=0, le=1, description="added to the std (and to the z-score denominator of TurnSight)")
    scale: Scale | None = Field(
        None,
        description="what A is divided by: group: the group's reward std (std: true); batch: the whole batch's "
        "reward std (TRL scale_rewards='batch'); none: nothing (std: false); default: from std",
    )
    singleton_groups: Literal["refuse", "verl"] = Field(
        "refuse",
        description="a group of one: refuse: 422; verl: mean 0 and std 1 (verl's compute_grpo_outcome_advantage), "
        "so A = R/(1 + eps), or R without a std",
    )
    null_rewards: Literal["refuse", "trl"] = Field(
        "refuse",
        description="reward null: refuse: 422; trl: left out of the group's mean and std, its A is 0 (TRL GRPOTrainer)",
    )
    kl: KlParams | None = Field(None, description="a reference-KL penalty; needs logprobs.student and logprobs.ref")
    is_: IsParams | None = Field(
        None, alias="is", description="off-policy weights; needs logprobs.student and logprobs.rollout"
    )

    @model_validator(mode="after")
    def _scale(self) -> GrpoParams:
        if self.scale is None:
            self.scale = "group" if self.std else "none"
        elif "std" in self.model_fields_set and self.std != (self.scale != "none"):
            raise InvalidInput(
                f"params.scale is {self.scale!r} but params.std is {str(self.std).lower()}; std true means "
                "scale group or batch, std false means scale none (send one of them)",
                field="params.scale",
                rule="consistent",
            )
        else:
            self.std = self.scale != "none"
        return self


class RlooParams(GrpoParams):
    """REINFORCE leave-one-out (Kool et al. 2019; Ahmadian et al. 2024): A_i = R_i − mean_{j≠i} R_j.
    Not divided by a std unless asked (scale group / batch)."""

    std: bool = Field(False, description="divide by the group's reward std (scale group); default false (RLOO)")


class RegulatedSignalParams(GrpoParams):
    """What token_signal and direct_opd share: the coefficient, the discount and the
    regulators applied to r_t (entropy rule, then compression, then clipping)."""

    beta: float = Field(1.0, ge=0, le=1e6, description="coefficient of the token signal added to A")
    discount: float = Field(
        0.0, ge=0, le=1, description="γ of the discounted future sum over the trajectory's unmasked tokens; 0: none"
    )
    clip: float | tuple[float, float] | None = Field(
        None,
        description="REOPOLD clipping of r_t: c clips to [-c, c]; [low, high] clips to that range "
        "(low <= 0 <= high); null: none",
    )
    compress: bool = Field(False, description="log-scale compression r -> sign(r)·log(1 + |r|) (before clipping)")
    entropy_threshold: float | None = Field(
        None,
        ge=0,
        description="where the teacher's entropy exceeds this (nats): r_t minus the forward KL from `teacher_topk` "
        "(token_signal), else r_t scaled by threshold/entropy; null: off",
    )
    outcome: bool = Field(True, description="add the outcome advantage A; false: A = 0 (pure on-policy distillation)")
    discount_masked: bool = Field(
        False,
        description="masked tokens advance the discount clock (contributing 0), as tinker-cookbook's discounted "
        "sums over the whole sequence; false: only unmasked tokens count",
    )

    @model_validator(mode="after")
    def _clip_range(self) -> RegulatedSignalParams:
        if isinstance(self.clip, tuple):
            low, high = self.clip
            if not low <= 0 <= high or low == high:
                raise InvalidInput(
                    f"params.clip is [{low:g}, {high:g}]; a range [low, high] needs low <= 0 <= high and low < high",
                    field="params.clip",
                    rule="clip_range",
                )
        elif self.clip is not None and self.clip <= 0:
            raise InvalidInput(
                f"params.clip is {self.clip:g}; a bound c clips to [-c, c] and must be > 0",
                field="params.clip",
                rule="clip_range",
            )
        return self

    @property
    def clip_range(self) -> tuple[float, float] | None:
        if self.clip is None:
            return None
        if isinstance(self.clip, tuple):
            return self.clip
        return (-self.clip, self.clip)


class TokenSignalParams(RegulatedSignalParams):
    """r_t = log π_T(y_t | teacher ctx) − log π_S(y_t | plain ctx) (SEED; on-policy distillation)."""

    teacher: SignalName | None = Field(
        None, description="which of `logprobs.teacher` to use; default: the only one sent"
    )


class Shift(RequestModel):
    post: SignalName = Field(description="a key of `logprobs.post`")
    pre: SignalName = Field(description="a key of `logprobs.pre`")
    weight: float = Field(1.0, ge=-1e6, le=1e6)


class DirectOpdParams(RegulatedSignalParams):
    """r_t = Σ_j w_j·(log π_post_j(y_t) − log π_pre_j(y_t)) (Direct-OPD)."""

    shifts: list[Shift] | None = Field(
        None,
        min_length=1,
        max_length=64,
        description="the (post, pre) pairs summed, each weighted; default: every post paired with the pre of the "
        "same name, weight 1",
    )


class StepShapingParams(GrpoParams):
    """A'_s = A·(1 + λ·clip(g_s, −α, α)) with a per-trajectory credit budget (StepOPSD)."""

    lambda_: float = Field(0.5, alias="lambda", ge=0, le=1e6, description="mixing strength λ")
    alpha: float = Field(1.0, gt=0, le=1e6, description="the step gap is clipped to [-α, α]; λ·α < 1")
    budget: float | None = Field(
        1.0, ge=0, le=1e6, description="Σ_s |λ·clip(g_s)| over a trajectory is at most this (scaled down); null: none"
    )
    teacher: SignalName | None = Field(
        None, description="which of `logprobs.teacher` is the hindsight teacher; default: the only one sent"
    )
    sign_aware: bool = Field(
        False,
        description="multiply by 1 + sign(A)·λ·clip(g_s) instead: for teacher contexts that endorse (what would "
        "have worked) rather than explain the outcome (see docs/distillation.md)",
    )

    @model_validator(mode="after")
    def _sign_preserving(self) -> StepShapingParams:
        if self.lambda_ * self.alpha >= 1:
            raise InvalidInput(
                f"params.lambda × params.alpha is {self.lambda_ * self.alpha:g}; it must be < 1 so that "
                "1 + λ·clip(g, −α, α) > 0 and the sign of A is never flipped",
                field="params.lambda",
                rule="sign_preserving",
            )
        return self


class HorizonAgreementParams(GrpoParams):
    """A'_s = A·max(0, 1 + β·z_s), z over the steps where every horizon agrees in sign (TurnSight)."""

    beta: float = Field(0.5, ge=0, le=1e6, description="modulation strength β")
    horizons: list[SignalName] | None = Field(
        None,
        min_length=1,
        max_length=64,
        description="the `logprobs.teacher` names that are the hindsight horizons; default: every teacher sent",
    )
    sign_aware: bool = Field(False, description="use 1 + β·sign(A)·z_s (as step_shaping's sign_aware)")

    @model_validator(mode="after")
    def _distinct(self) -> HorizonAgreementParams:
        if self.horizons is not None and len(set(self.horizons)) != len(self.horizons):
            raise InvalidInput("params.horizons names a horizon twice", field="params.horizons", rule="unique")
        return self


Params = GrpoParams | RlooParams | TokenSignalParams | DirectOpdParams | StepShapingParams | HorizonAgreementParams
PARAMS: dict[str, type[GrpoParams]] = {
    "grpo": GrpoParams,
    "rloo": RlooParams,
    "token_signal": TokenSignalParams,
    "direct_opd": DirectOpdParams,
    "step_shaping": StepShapingParams,
    "horizon_agreement": HorizonAgreementParams,
}
