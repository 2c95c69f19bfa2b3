"""A batch of rollout groups flattened onto one token axis, and the segment
arithmetic every method is written in.

Every per-token array of every trajectory is concatenated (N tokens in all);
`offsets` says where each trajectory's tokens lie and `group` which rollout group
each trajectory belongs to. A *step segment* is a maximal run of tokens of one
trajectory with the same step index (token_steps is non-decreasing, so a step is
one run). Sums over trajectories, steps and groups are `np.bincount` with weights
over segment ids (empty segments sum to 0, which `np.add.reduceat` would not give),
and the discounted future sum is a log-depth doubling scan: no Python loop runs per
token. Sums across trajectories (a group's, the batch's) are `invariant_sum`: added
in the order of their values, so no result, to the last bit, depends on where a
trajectory sits in the batch.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
from numpy.typing import ArrayLike


@dataclass(frozen=True)
class TokenBatch:
    """The inputs, concatenated. Optional per-token inputs a trajectory did not send
    are NaN for its tokens (entropy, top-k rows)."""

    offsets: np.ndarray  # (T+1,) int64: trajectory t owns tokens [offsets[t], offsets[t+1])
    group: np.ndarray  # (T,) int64: the group (0..G-1, request order) of each trajectory
    group_count: int
    reward: np.ndarray  # (T,) float64 outcome reward (NaN: null, under params.null_rewards "trl")
    mask: np.ndarray  # (N,) bool: the student's own tokens (others get 0 and count nowhere)
    step: np.ndarray  # (N,) int64 step index within its trajectory (0 when token_steps is not sent)
    student: np.ndarray | None = None  # (N,) log π_S(y_t | plain ctx)
    teacher: Mapping[str, np.ndarray] = field(default_factory=dict)  # NAME -> (N,) log π_T(y_t | NAME ctx)
    pre: Mapping[str, np.ndarray] = field(default_factory=dict)  # NAME -> (N,) log π_pre(y_t)
    post: Mapping[str, np.ndarray] = field(default_factory=dict)  # NAME -> (N,) log π_post(y_t)
    rollout: np.ndarray | None = None  # (N,) the inference engine's log-probs of the same tokens
    ref: np.ndarray | None = None  # (N,) a reference model's log-probs of the same tokens
    entropy: np.ndarray | None = None  # (N,) the teacher's entropy at t (nats), NaN where not sent
    topk_teacher: np.ndarray | None = None  # (N, K) the teacher's top-k log-probs, NaN-padded
    topk_student: np.ndarray | None = None  # (N, K) the student's log-probs of those tokens
    advantages: np.ndarray | None = None  # (N,) the trainer's own A per token (a scalar repeated)
    own_advantage: np.ndarray | None = None  # (T,) bool: the trainer sent this trajectory's A
    scalar_advantage: np.ndarray | None = None  # (T,) the A sent as one number, NaN where a list (or none) was

    @property
    def size(self) -> int:
        return int(self.offsets[-1])

    @property
    def trajectory_count(self) -> int:
        return len(self.offsets) - 1

    @cached_property
    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    @cached_property
    def traj(self) -> np.ndarray:
        """(N,) the trajectory of each token."""
        return np.repeat(np.arange(self.trajectory_count), self.lengths)

    @cached_property
    def unmasked(self) -> np.ndarray:
        """(T,) tokens of each trajectory that count."""
        return np.bincount(self.traj, weights=self.mask, minlength=self.trajectory_count)

    @cached_property
    def steps(self) -> Steps:
        return Steps.of(self)


@dataclass(frozen=True)
class Steps:
    """The step segments of a batch: `seg` (N,) the segment of each token; per
    segment its trajectory, step index and count of unmasked tokens."""

    seg: np.ndarray
    traj: np.ndarray
    index: np.ndarray
    tokens: np.ndarray

    @classmethod
    def of(cls, batch: TokenBatch) -> Steps:
        traj, step = batch.traj, batch.step
        if batch.size == 0:
            empty = np.zeros(0, dtype=np.int64)
            return cls(seg=empty, traj=empty, index=empty, tokens=np.zeros(0))
        starts = np.ones(batch.size, dtype=bool)
        starts[1:] = (traj[1:] != traj[:-1]) | (step[1:] != step[:-1])
        seg = np.cumsum(starts) - 1
        first = np.flatnonzero(starts)
        tokens = np.bincount(seg, weights=batch.mask, minlength=len(first))
        return cls(seg=seg, traj=traj[first], index=step[first], tokens=tokens)

    @property
    def count(self) -> int:
        return len(self.traj)

    @property
    def nonempty(self) -> np.ndarray:
        return self.tokens > 0


@dataclass(frozen=True)
class TrajectoryTokens:
    """One trajectory's inputs, each per-token array of the same length (checked by the
    service, which names the field; `concat` only asserts it)."""

    reward: float | None  # None: a null reward (NaN in the batch)
    student: ArrayLike | None = None
    rollout: ArrayLike | None = None
    ref: ArrayLike | None = None
    teacher: Mapping[str, ArrayLike] = field(default_factory=dict)
    pre: Mapping[str, ArrayLike] = field(default_factory=dict)
    post: Mapping[str, ArrayLike] = field(default_factory=dict)
    mask: ArrayLike | None = None  # default: every token counts
    steps: ArrayLike | None = None  # default: one step (0)
    entropy: ArrayLike | None = None
    topk_teacher: ArrayLike | None = None  # (n, k)
    topk_student: ArrayLike | None = None  # (n, k)
    advantages: ArrayLike | float | None = None  # per token, or one number

    def arrays(self) -> dict[str, np.ndarray]:
        out: dict[str, np.ndarray] = {}
        for name in ("student", "rollout", "ref", "mask", "steps", "entropy", "topk_teacher", "topk_student"):
            value = getattr(self, name)
            if value is not None:
                out[name] = np.asarray(value)
        for kind in ("teacher", "pre", "post"):
            for key, value in getattr(self, kind).items():
                out[f"{kind}.{key}"] = np.asarray(value)
        if self.advantages is not None and not np.isscalar(self.advantages):
            out["advantages"] = np.asarray(self.advantages)
        return out


def concat(groups: Sequence[Sequence[TrajectoryTokens]]) -> TokenBatch:
    """The batch of these rollout groups (in this order). Per-token inputs are kept
    where every trajectory sent them (student, the teacher/pre/post names), or NaN-filled
    where some did not (entropy, top-k)."""
    trajectories = [t for g in groups for t in g]
    arrays = [t.arrays() for t in trajectories]
    lengths = []
    for values in arrays:
        sizes = {len(v) for v in values.values()}
        assert len(sizes) <= 1, f"per-token arrays of different lengths: { {k: len(v) for k, v in values.items()} }"
        lengths.append(sizes.pop() if sizes else 0)
    offsets = np.zeros(len(trajectories) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])

    def cat(name: str, dtype: type, fill: float | None = None) -> np.ndarray | None:
        if fill is None and not all(name in a for a in arrays):
            return None
        if not any(name in a for a in arrays):
            return None
        parts = [
            a[name].astype(dtype) if name in a else np.full(n, fill, dtype=dtype)
            for a, n in zip(arrays, lengths, strict=True)
        ]
        return np.concatenate(parts)

    def common(kind: str) -> dict[str, np.ndarray]:
        names = set.intersection(*(set(getattr(t, kind)) for t in trajectories)) if trajectories else set()
        return {name: cat(f"{kind}.{name}", np.float64) for name in sorted(names)}  # type: ignore[misc]

    width = max((a["topk_teacher"].shape[1] for a in arrays if "topk_teacher" in a), default=0)

    def topk(name: str) -> np.ndarray | None:
        if not width:
            return None
        parts = []
        for a, n in zip(arrays, lengths, strict=True):
            block = np.full((n, width), np.nan)
            if name in a and n:
                block[:, : a[name].shape[1]] = a[name]
            parts.append(block)
        return np.concatenate(parts)

    own = np.array([t.advantages is not None for t in trajectories], dtype=bool)
    scalar = np.array(
        [
            float(t.advantages) if t.advantages is not None and np.isscalar(t.advantages) else np.nan
            for t in trajectories
        ]
    )
    advantages = None
    if own.any():
        advantages = np.concatenate(
            [
                np.full(n, float(t.advantages))  # type: ignore[arg-type]
                if t.advantages is not None and np.isscalar(t.advantages)
                else (a["advantages"].astype(np.float64) if "advantages" in a else np.zeros(n))
                for t, a, n in zip(trajectories, arrays, lengths, strict=True)
            ]
        )
    mask = cat("mask", bool, fill=1)
    steps = cat("steps", np.int64, fill=0)
    size = int(offsets[-1])
    return TokenBatch(
        offsets=offsets,
        group=np.repeat(np.arange(len(groups)), [len(g) for g in groups]).astype(np.int64),
        group_count=len(groups),
        reward=np.array([np.nan if t.reward is None else t.reward for t in trajectories], dtype=np.float64),
        mask=mask if mask is not None else np.ones(size, dtype=bool),
        step=steps if steps is not None else np.zeros(size, dtype=np.int64),
        student=cat("student", np.float64),
        rollout=cat("rollout", np.float64),
        ref=cat("ref", np.float64),
        teacher=common("teacher"),
        pre=common("pre"),
        post=common("post"),
        entropy=cat("entropy", np.float64, fill=np.nan),
        topk_teacher=topk("topk_teacher"),
        topk_student=topk("topk_student"),
        advantages=advantages,
        own_advantage=own,
        scalar_advantage=scalar,
    )


def segment_sum(values: np.ndarray, seg: np.ndarray, count: int) -> np.ndarray:
    return np.bincount(seg, weights=values, minlength=count).astype(np.float64, copy=False)


def invariant_sum(values: np.ndarray, seg: np.ndarray, count: int) -> np.ndarray:
    """segment_sum whose every sum is added in the order of the values (not of the
    rows): the same multiset per segment gives the same bits, wherever its members
    sit in the batch. For sums across trajectories (over a group, the batch)."""
    values = np.asarray(values, dtype=np.float64)
    order = np.lexsort((values, seg))
    return np.bincount(seg[order], weights=values[order], minlength=count).astype(np.float64, copy=False)


def segment_mean(values: np.ndarray, weights: np.ndarray, seg: np.ndarray, count: int) -> np.ndarray:
    """Weighted mean per segment (weights 0/1: the mean over unmasked entries); 0 where a
    segment has no weight."""
    total = segment_sum(weights, seg, count)
    sums = segment_sum(values * weights, seg, count)
    return np.divide(sums, total, out=np.zeros(count), where=total > 0)


def discounted_future_sum(values: np.ndarray, seg: np.ndarray, gamma: float) -> np.ndarray:
    """out_t = Σ_{t' >= t, same segment} γ^(t'−t)·values_t' for contiguous segments,
    by doubling: after the pass with offset k, out_t holds the first 2k terms and
    coef_t = γ^(2k) if t + 2k is still in t's segment, else 0. Every product is of
    numbers <= 1 in magnitude times a value: no γ^(−t) rescaling, nothing overflows."""
    out = np.array(values, dtype=np.float64)
    n = len(out)
    if n == 0 or gamma == 0:
        return out
    coef = np.zeros(n)
    coef[:-1] = np.where(seg[1:] == seg[:-1], gamma, 0.0)
    k = 1
    while k < n and coef.any():
        out[:-k] += coef[:-k] * out[k:]
        coef[:-k] *= coef[k:]
        coef[-k:] = 0.0
        k *= 2
    return out


def group_pairs(group: np.ndarray, group_count: int) -> tuple[np.ndarray, np.ndarray]:
    """Every ordered pair (i, j), i != j, of trajectories in the same group, as two
    index arrays (a ragged arange: no loop per group)."""
    order = np.argsort(group, kind="stable")
    sizes = np.bincount(group, minlength=group_count)
    starts = np.concatenate(([0], np.cumsum(sizes)[:-1]))
    g_sorted = group[order]
    reps = sizes[g_sorted]
    total = int(reps.sum())
    i = np.repeat(order, reps)
    within = np.arange(total) - np.repeat(np.cumsum(reps) - reps, reps)
    j = order[np.repeat(starts[g_sorted], reps) + within]
    keep = i != j
    return i[keep], j[keep]
