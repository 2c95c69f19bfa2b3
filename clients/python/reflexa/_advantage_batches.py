"""Any advantages batch under the server's per-request limits: whole rollout groups
packed into requests, the answers put back together in the original order.

POST /v1/distill/advantages refuses a body over ``limits.max_body_bytes`` (413), more
than ``limits.max_advantage_tokens`` tokens (all trajectories summed) and a group of
more than ``limits.max_advantage_group_size`` trajectories. No route publishes them,
so the defaults here are the server's defaults (service/settings.py ``Limits``); a
server configured lower needs them passed (``max_tokens=…``).

Packing: each group is checked and serialised once (its JSON measured exactly), then
consecutive groups fill a request until the next one would pass a limit, so the
requests keep the groups' order and the answer is their concatenation. A token is an
entry of the per-token arrays *sent*: a trainer's padding is trimmed before it gets
here (reflexa.integrations.verl_advantages), so padding never counts.

Every method computes per group, except two parameters, whose numbers depend on the
whole batch: ``scale: "batch"`` (the std of every reward in the batch) and
``kl.centered`` (the mean KL over every unmasked token). Splitting would silently
change them, so a batch with either that does not fit one request is refused.

The merged diagnostics: ``groups`` are per group (exact); ``batch`` is the whole
batch's, each field either combined exactly from the requests' (counts summed;
shares and means weighted by the tokens or steps they are over; the largest ratio;
order consistency from each request's pairs) or recomputed from the returned
per-token values over the unmasked tokens (the ``advantages`` and ``token_reward``
statistics, the length correlation), as the server computes them. The raw token
reward before regulation is not returned per token, so its statistics are null when
the batch was split. ``requests`` holds each request's own batch diagnostics.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import Field

from reflexa.errors import InvalidInput
from reflexa.models import (
    AdvantageGroup,
    AdvantagesResponse,
    AdvantageTrajectory,
    BatchDiagnostics,
    Diagnostics,
    Stats,
)

#: The server's default limits (service/settings.py, Limits).
DEFAULT_MAX_TOKENS = 2_000_000
DEFAULT_MAX_GROUP_SIZE = 1_024
DEFAULT_MAX_BYTES = 32 * 1024 * 1024
PERCENTILES = (1, 5, 25, 50, 75, 95, 99)  # the server's (service/distill/signals/diagnostics.py)


class BatchedAdvantagesResponse(AdvantagesResponse):
    """An advantages answer assembled from one request or several."""

    requests: list[BatchDiagnostics] = Field(
        default_factory=list, description="each request's own batch diagnostics, in the order sent"
    )


@dataclass(frozen=True)
class Limits:
    max_tokens: int = DEFAULT_MAX_TOKENS
    max_group_size: int = DEFAULT_MAX_GROUP_SIZE
    max_bytes: int = DEFAULT_MAX_BYTES


@dataclass(frozen=True)
class Request:
    """One request body (JSON bytes) and the groups it holds, [start, stop)."""

    body: bytes
    start: int
    stop: int
    tokens: int


def trajectory_tokens(traj: AdvantageTrajectory) -> int:
    """The tokens a trajectory sends: the length of its per-token arrays (the server
    refuses arrays of different lengths, naming them)."""
    lengths = [0]
    lp = traj.logprobs
    if lp is not None:
        for value in (lp.student, lp.teacher, lp.pre, lp.post, lp.rollout, lp.ref):
            if isinstance(value, list):
                lengths.append(len(value))
            elif isinstance(value, Mapping):
                lengths += [len(v) for v in value.values()]
    for value in (traj.mask, traj.token_steps, traj.teacher_entropy, traj.advantages):
        if isinstance(value, list):
            lengths.append(len(value))
    if traj.teacher_topk is not None:
        lengths.append(len(traj.teacher_topk.teacher))
    return max(lengths)


def batch_wide(params: Mapping[str, Any] | None) -> str | None:
    """Why these params make the numbers depend on the whole batch (None: they do not)."""
    if not params:
        return None
    if params.get("scale") == "batch":
        return 'params.scale "batch" divides by the std of every reward in the batch'
    kl = params.get("kl")
    if isinstance(kl, Mapping) and kl.get("centered"):
        return "params.kl.centered subtracts the mean KL over every unmasked token of the batch"
    return None


def plan(
    method: str, groups: Sequence[AdvantageGroup], params: Mapping[str, Any] | None, limits: Limits
) -> list[Request]:
    """The requests, in order, each under every limit. Refused here, before anything is
    sent: a group over a limit on its own, a group or trajectory id twice in the batch
    (the server would refuse it within one request), and a batch-wide parameter on a
    batch that does not fit one request."""
    head = (
        b'{"method":'
        + json.dumps(method).encode()
        + (b',"params":' + json.dumps(dict(params), allow_nan=False).encode() if params is not None else b"")
        + b',"groups":['
    )
    overhead = len(head) + 2  # "]}"
    seen_groups: set[str] = set()
    seen_ids: set[str] = set()
    encoded: list[bytes] = []
    tokens: list[int] = []
    for gi, group in enumerate(groups):
        where = f"groups[{gi}] (group_id {group.group_id!r})"
        if group.group_id in seen_groups:
            raise InvalidInput(
                f"{where} appears twice; send each rollout group once", field=f"groups[{gi}].group_id", rule="unique"
            )
        seen_groups.add(group.group_id)
        for ti, traj in enumerate(group.trajectories):
            if traj.id in seen_ids:
                raise InvalidInput(
                    f"groups[{gi}].trajectories[{ti}].id {traj.id!r} appears twice in the batch",
                    field=f"groups[{gi}].trajectories[{ti}].id",
                    rule="unique",
                )
            seen_ids.add(traj.id)
        n = sum(trajectory_tokens(t) for t in group.trajectories)
        raw = group.model_dump_json(exclude_none=True).encode()
        too_big = (
            (len(group.trajectories), limits.max_group_size, "trajectories", "max_group_size", "a group"),
            (n, limits.max_tokens, "tokens", "max_tokens", "one request"),
            (len(raw) + overhead, limits.max_bytes, "bytes as a request body", "max_bytes", "one request"),
        )
        for have, most, what, option, per in too_big:
            if have > most:
                raise InvalidInput(
                    f"{where} has {have:,} {what}; at most {most:,} fit {per}, and a group is never split (its "
                    f"advantages are relative to its siblings): raise the server's limit and pass {option}=",
                    field=f"groups[{gi}]",
                    rule=option,
                )
        encoded.append(raw)
        tokens.append(n)
    requests: list[Request] = []
    start = 0
    while start < len(encoded):
        stop, size, count = start, overhead, 0
        while stop < len(encoded):
            extra = len(encoded[stop]) + (1 if stop > start else 0)
            if stop > start and (size + extra > limits.max_bytes or count + tokens[stop] > limits.max_tokens):
                break
            size, count = size + extra, count + tokens[stop]
            stop += 1
        requests.append(Request(head + b",".join(encoded[start:stop]) + b"]}", start, stop, count))
        start = stop
    reason = batch_wide(params)
    if reason is not None and len(requests) > 1:
        raise InvalidInput(
            f"the batch needs {len(requests)} requests under the limits (max_tokens {limits.max_tokens:,}, "
            f"max_bytes {limits.max_bytes:,}), but {reason}: split, its numbers would change. Send a batch that "
            'fits one request (raise the server\'s limits and pass them), or use params.scale "group" / '
            "kl.centered false",
            field="params",
            rule="batch_wide",
        )
    return requests


# --- putting the answers together ---------------------------------------------------------


def _stats(values: list[float]) -> Stats | None:
    """The server's summarize (numpy's linear-interpolation percentiles, population std)."""
    if not values:
        return None
    values = sorted(values)
    n = len(values)
    mean = math.fsum(values) / n
    std = math.sqrt(math.fsum((v - mean) ** 2 for v in values) / n)

    def cut(p: float) -> float:
        x = p / 100 * (n - 1)
        lo = math.floor(x)
        hi = min(lo + 1, n - 1)
        return values[lo] + (values[hi] - values[lo]) * (x - lo)

    cuts = {f"p{p}": cut(p) for p in PERCENTILES}
    return Stats(mean=mean, std=std, min=values[0], max=values[-1], **cuts)


def _pearson(x: list[float], y: list[float]) -> float | None:
    """The server's length correlation: null under 2 points or with a constant side."""
    n = len(x)
    if n < 2:
        return None
    mx, my = math.fsum(x) / n, math.fsum(y) / n
    sxy = math.fsum((a - mx) * (b - my) for a, b in zip(x, y, strict=True))
    sxx = math.fsum((a - mx) ** 2 for a in x)
    syy = math.fsum((b - my) ** 2 for b in y)
    scale_x, scale_y = math.fsum(abs(a) for a in x), math.fsum(abs(b) for b in y)
    if sxx <= (1e-12 * scale_x) ** 2 or syy <= (1e-12 * scale_y) ** 2:
        return None
    return max(-1.0, min(1.0, sxy / math.sqrt(sxx * syy)))


def _weighted(parts: list[tuple[float | None, int]]) -> float | None:
    """The mean of per-request values, each weighted by what it is over (None: over nothing)."""
    pairs = [(v, w) for v, w in parts if v is not None and w > 0]
    total = sum(w for _, w in pairs)
    return math.fsum(v * w for v, w in pairs) / total if total else None


def _sum(values: list[int | None]) -> int | None:
    present = [v for v in values if v is not None]
    return sum(present) if present else None


def merge(groups: Sequence[AdvantageGroup], answers: list[AdvantagesResponse]) -> BatchedAdvantagesResponse:
    """One answer for the whole batch (the requests' groups in order)."""
    first = answers[0]
    per = [a.diagnostics.batch for a in answers]
    if len(answers) == 1:
        return BatchedAdvantagesResponse.model_construct(
            method=first.method,
            params=first.params,
            trajectories=first.trajectories,
            diagnostics=first.diagnostics,
            requests=per,
        )
    trajectories = [t for a in answers for t in a.trajectories]
    tokens = [b.tokens for b in per]
    steps = [b.steps for b in per]
    pairs = [b.order_pairs or 0 for b in per]
    merged: dict[str, Any] = {
        "method": first.diagnostics.batch.method,
        "trajectories": sum(b.trajectories for b in per),
        "groups": sum(b.groups for b in per),
        "tokens": sum(tokens),
        "steps": sum(steps),
        "trainer_advantages": sum(b.trainer_advantages for b in per),
        "sign_flips": sum(b.sign_flips for b in per),
    }
    for name in ("order_pairs", "sign_flips_prevented", "budget_scaled", "null_rewards"):
        merged[name] = _sum([getattr(b, name) for b in per])
    if any(b.order_consistency is not None for b in per):
        merged["order_consistency"] = _weighted([(b.order_consistency, p) for b, p in zip(per, pairs, strict=True)])
    by_tokens = ("clipped_tokens_share", "entropy_tokens_share", "kl_mean", "mismatch_kl")
    by_tokens += ("is_truncated_share", "is_masked_share")
    for name in by_tokens:
        merged[name] = _weighted([(getattr(b, name), n) for b, n in zip(per, tokens, strict=True)])
    for name in ("clipped_steps_share", "agreement_share"):
        merged[name] = _weighted([(getattr(b, name), n) for b, n in zip(per, steps, strict=True)])
    ratios = [b.is_max_ratio for b in per if b.is_max_ratio is not None]
    merged["is_max_ratio"] = max(ratios) if ratios else None

    # recomputed from the per-token answer, over the unmasked tokens
    advantages: list[float] = []
    rewards: list[float] = []
    summed: list[float] = []
    lengths: list[float] = []
    sent = [t for g in groups for t in g.trajectories]
    has_signal = any(t.token_rewards is not None for t in trajectories)
    for traj, out in zip(sent, trajectories, strict=True):
        mask = traj.mask
        kept = range(len(out.advantages)) if mask is None else [i for i, m in enumerate(mask) if m]
        advantages += [out.advantages[i] for i in kept]
        if has_signal and out.token_rewards is not None:
            values = [out.token_rewards[i] for i in kept]
            rewards += values
            summed.append(math.fsum(out.token_rewards))
            lengths.append(float(len(values)))
    merged["advantages"] = _stats(advantages)
    if has_signal:
        merged["token_reward"] = _stats(rewards)
        merged["length_correlation"] = _pearson(summed, lengths)
    batch = BatchDiagnostics.model_construct(**merged)
    return BatchedAdvantagesResponse.model_construct(
        method=first.method,
        params=first.params,
        trajectories=trajectories,
        diagnostics=Diagnostics.model_construct(batch=batch, groups=[g for a in answers for g in a.diagnostics.groups]),
        requests=per,
    )
