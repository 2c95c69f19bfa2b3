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

Method = Literal["grpo", "token_signal", "direct_opd", "step_shaping", "horizon_agreement"]
METHODS: tuple[Method, ...] = ("grpo", "token_signal", "direct_opd", "step_shaping", "horizon_agreement")
SignalName = Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._:@-]{0,63}$")]
DEFAULT_NAME = "default"  # the name of a log-prob list sent without a name ([float] instead of {NAME: [float]})


class GrpoParams(RequestModel):
    """Group-relative outcome advantages (GRPO, Shao et al. 2024; Dr. GRPO without the std)."""

    std: bool = Field(True, description="divide by the group's reward std (sample std, ddof 1); false: only centre")
    eps: float = Field(1e-6, gt=0, le=1, description="added to the std (and to the z-score denominator of TurnSight)")


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


Params = GrpoParams | TokenSignalParams | DirectOpdParams | StepShapingParams | HorizonAgreementParams
PARAMS: dict[str, type[GrpoParams]] = {
    "grpo": GrpoParams,
    "token_signal": TokenSignalParams,
    "direct_opd": DirectOpdParams,
    "step_shaping": StepShapingParams,
    "horizon_agreement": HorizonAgreementParams,
}
