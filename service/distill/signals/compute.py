"""One entry point: a method, its parameters and a batch in; advantages and
diagnostics out. Also which log-probs a method reads, resolved from the names the
trajectories sent (the service checks every trajectory sent them)."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from domain.errors import InvalidInput
from service.distill.signals import step_shaping as steps_module
from service.distill.signals import token_signal as tokens_module
from service.distill.signals.batch import TokenBatch, TrajectoryTokens, concat
from service.distill.signals.diagnostics import diagnose
from service.distill.signals.off_policy import is_weights, kl_penalty
from service.distill.signals.outcome import outcome_advantages, require_siblings
from service.distill.signals.params import (
    DirectOpdParams,
    GrpoParams,
    HorizonAgreementParams,
    Params,
    RegulatedSignalParams,
    StepShapingParams,
    TokenSignalParams,
)
from service.distill.signals.token_signal import Shaped


@dataclass(frozen=True)
class Needs:
    """The per-token inputs a method reads."""

    student: bool = False
    teachers: tuple[str, ...] = ()
    post: tuple[str, ...] = ()
    pre: tuple[str, ...] = ()
    shifts: tuple[tuple[str, str, float], ...] = ()
    rollout: bool = False  # params.is: logprobs.rollout
    ref: bool = False  # params.kl: logprobs.ref


def _one_teacher(name: str | None, sent: Collection[str]) -> str:
    if name is not None:
        if name not in sent:
            raise InvalidInput(
                f"params.teacher is {name!r}; the trajectories sent {sorted(sent) or 'no teacher'}",
                field="params.teacher",
                rule="known_teacher",
            )
        return name
    if len(sent) != 1:
        raise InvalidInput(
            f"params.teacher: name one of the teachers sent ({sorted(sent)})"
            if sent
            else "this method needs logprobs.teacher on every trajectory",
            field="params.teacher" if sent else "groups[0].trajectories[0].logprobs.teacher",
            rule="required",
        )
    return next(iter(sent))


def needs(method: str, params: Params, teachers: Collection[str], post: Collection[str], pre: Collection[str]) -> Needs:
    """What `method` reads, given the names sent anywhere in the batch (a teacher sent
    as a plain list is named "default"); with params.is / params.kl, the student's
    log-probs and the rollout's / the reference's too."""
    need = _method_needs(method, params, teachers, post, pre)
    if isinstance(params, GrpoParams) and (params.is_ is not None or params.kl is not None):
        need = replace(need, student=True, rollout=params.is_ is not None, ref=params.kl is not None)
    return need


def _method_needs(
    method: str, params: Params, teachers: Collection[str], post: Collection[str], pre: Collection[str]
) -> Needs:
    if method in ("grpo", "rloo"):
        return Needs()
    if isinstance(params, TokenSignalParams | StepShapingParams):
        return Needs(student=True, teachers=(_one_teacher(params.teacher, teachers),))
    if isinstance(params, HorizonAgreementParams):
        horizons = tuple(params.horizons) if params.horizons is not None else tuple(sorted(teachers))
        if not horizons:
            raise InvalidInput(
                "horizon_agreement needs logprobs.teacher {NAME: [float]} with one entry per horizon",
                field="groups[0].trajectories[0].logprobs.teacher",
                rule="required",
            )
        return Needs(student=True, teachers=horizons)
    assert isinstance(params, DirectOpdParams)
    if params.shifts is not None:
        shifts = tuple((s.post, s.pre, s.weight) for s in params.shifts)
    else:
        if not post or not pre:
            missing = "post" if not post else "pre"
            raise InvalidInput(
                f"direct_opd needs logprobs.post and logprobs.pre on every trajectory (no {missing} was sent)",
                field=f"groups[0].trajectories[0].logprobs.{missing}",
                rule="required",
            )
        if set(post) != set(pre):
            raise InvalidInput(
                f"params.shifts: logprobs.post {sorted(post)} and logprobs.pre {sorted(pre)} do not pair by name; "
                "name the (post, pre) pairs",
                field="params.shifts",
                rule="required",
            )
        shifts = tuple((name, name, 1.0) for name in sorted(post))
    return Needs(
        post=tuple(dict.fromkeys(s[0] for s in shifts)), pre=tuple(dict.fromkeys(s[1] for s in shifts)), shifts=shifts
    )


def resolved(params: Params, need: Needs) -> dict[str, Any]:
    """The parameters with their values used, names resolved (for the response)."""
    out = params.model_dump(mode="json", by_alias=True)
    if "teacher" in out:
        out["teacher"] = need.teachers[0]
    if "horizons" in out:
        out["horizons"] = list(need.teachers)
    if "shifts" in out:
        out["shifts"] = [{"post": post, "pre": pre, "weight": w} for post, pre, w in need.shifts]
    return out


@dataclass(frozen=True)
class Result:
    shaped: Shaped
    scalar_advantage: np.ndarray  # (T,) A as one number, NaN where the trainer sent a per-token A
    diagnostics: dict[str, Any]
    groups: list[dict[str, Any]]
    is_weights: np.ndarray | None = None  # (N,) params.is: w_t (0 on masked tokens)
    kl: np.ndarray | None = None  # (N,) params.kl: kl_t as subtracted (centred when asked; 0 on masked tokens)


def compute(batch: TokenBatch, method: str, params: Params, need: Needs) -> Result:
    if not isinstance(params, GrpoParams):  # pragma: no cover - the service validates params
        raise TypeError(params)
    use_outcome = params.outcome if isinstance(params, RegulatedSignalParams) else True
    assert params.scale is not None
    outcome, scalar = outcome_advantages(
        batch,
        scale=params.scale,
        eps=params.eps,
        method=method,
        use=use_outcome,
        singletons=params.singleton_groups,
    )
    if isinstance(params, HorizonAgreementParams):
        require_siblings(batch, np.ones(batch.trajectory_count, dtype=bool), method)
        shaped = steps_module.horizon_agreement(batch, outcome, params, need.teachers)
    elif isinstance(params, StepShapingParams):
        shaped = steps_module.step_shaping(batch, outcome, params, need.teachers[0])
    elif isinstance(params, TokenSignalParams):
        shaped = tokens_module.token_signal(batch, outcome, params, need.teachers[0])
    elif isinstance(params, DirectOpdParams):
        shaped = tokens_module.direct_opd(batch, outcome, params, need.shifts)
    else:
        shaped = Shaped(advantages=np.where(batch.mask, outcome, 0.0), outcome=outcome)
    extra: dict[str, Any] = {}
    kl = None
    if params.kl is not None:
        kl, extra_kl = kl_penalty(batch, params.kl)
        extra |= extra_kl
        shaped = replace(shaped, advantages=np.where(batch.mask, shaped.advantages - params.kl.coef * kl, 0.0))
    weights = None
    if params.is_ is not None:
        corrected = is_weights(batch, params.is_)
        weights = corrected.weights
        extra |= corrected.diagnostics
    diagnostics, groups = diagnose(batch, method, shaped)
    diagnostics |= extra
    return Result(
        shaped=shaped, scalar_advantage=scalar, diagnostics=diagnostics, groups=groups, is_weights=weights, kl=kl
    )


def compute_groups(
    method: str, params: Params, groups: Sequence[Sequence[TrajectoryTokens]]
) -> tuple[TokenBatch, Result]:
    """In process, without the service's checks: the batch of these groups and its result."""
    batch = concat(groups)
    need = needs(method, params, set(batch.teacher), set(batch.post), set(batch.pre))
    return batch, compute(batch, method, params, need)
