"""The rollout batch bench.advantages sends: `groups` rollout groups of `group`
trajectories of `tokens` tokens each, as a trainer holds it (float32 tensors) and as
it sends it (`tensor.tolist()` into JSON), with one case per method measured.

Every trajectory is multi-turn: `turns` turns of equal length, each turn's last
quarter tool output (mask 0), the rest the student's own tokens (mask 1), so
`token_steps` and `mask` go with every request. Outcome rewards are 0/1 with mixed
outcomes in every group. Log-probs: the student's of its sampled tokens are −Exp
(mean 0.7 nats), a teacher's are the student's plus Gaussian noise (σ 0.5) kept
≤ 0, each hindsight horizon its own noise; direct_opd's post-RL log-probs are the
student's, its pre-RL ones post plus noise; the teacher's entropy is Gamma (mean 1.5
nats, above the entropy threshold of 2 for about a quarter of the tokens).
Deterministic (a fixed seed).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from reflexa.binary_advantages import encode_request

from service.distill.signals import TrajectoryTokens


@dataclass(frozen=True)
class Shape:
    groups: int
    group: int  # trajectories per group
    tokens: int  # per trajectory
    turns: int  # steps per trajectory
    seed: int = 11

    @property
    def trajectories(self) -> int:
        return self.groups * self.group

    @property
    def total_tokens(self) -> int:
        return self.trajectories * self.tokens


@dataclass(frozen=True)
class Case:
    """One measured request: a method, its params, and the per-token inputs it sends
    (besides reward, mask and token_steps, which every case sends)."""

    label: str
    method: str
    params: dict[str, Any]
    inputs: tuple[str, ...]  # student, teacher, horizons, post_pre, entropy


CASES = (
    Case("grpo", "grpo", {}, ()),
    Case(
        "token_signal (clip + compress + discount)",
        "token_signal",
        {"clip": 1.0, "compress": True, "discount": 0.99},
        ("student", "teacher"),
    ),
    Case(
        "token_signal (teacher_entropy, entropy_threshold)",
        "token_signal",
        {"entropy_threshold": 2.0},
        ("student", "teacher", "entropy"),
    ),
    Case("direct_opd", "direct_opd", {}, ("post_pre",)),
    Case("step_shaping", "step_shaping", {}, ("student", "teacher")),
    Case("horizon_agreement (2 horizons)", "horizon_agreement", {}, ("student", "horizons")),
)
HORIZONS = ("h1", "h4")
OPD_NAME = "rl"


@dataclass
class Rollout:
    """One trajectory's tensors (float32 as a trainer holds them; mask and steps ints)."""

    id: str
    reward: float
    mask: np.ndarray
    steps: np.ndarray
    student: np.ndarray
    teacher: np.ndarray
    horizons: dict[str, np.ndarray]
    pre: np.ndarray
    entropy: np.ndarray


def rollouts(shape: Shape) -> list[list[Rollout]]:
    rng = np.random.default_rng(shape.seed)
    n = shape.tokens
    steps = np.repeat(np.arange(shape.turns), -(-n // shape.turns))[:n].astype(np.int64)
    turn_len = -(-n // shape.turns)
    mask = ((np.arange(n) % turn_len) < turn_len - turn_len // 4).astype(np.int64)

    def below_zero(x: np.ndarray) -> np.ndarray:
        return np.minimum(x, 0.0).astype(np.float32)

    groups = []
    for g in range(shape.groups):
        rewards = rng.integers(0, 2, shape.group).astype(np.float64)
        rewards[0], rewards[-1] = 1.0, 0.0  # mixed outcomes in every group
        members = []
        for i in range(shape.group):
            student = below_zero(-rng.exponential(0.7, n))
            members.append(
                Rollout(
                    id=f"g{g}-{i}",
                    reward=float(rewards[i]),
                    mask=mask,
                    steps=steps,
                    student=student,
                    teacher=below_zero(student + rng.normal(0, 0.5, n)),
                    horizons={h: below_zero(student + rng.normal(0, 0.5, n)) for h in HORIZONS},
                    pre=below_zero(student + rng.normal(0, 0.3, n)),
                    entropy=rng.gamma(2.0, 0.75, n).astype(np.float32),
                )
            )
        groups.append(members)
    return groups


def _trajectory(r: Rollout, case: Case, series: Callable[[np.ndarray], Any]) -> dict[str, Any]:
    """What a trainer sends, each tensor through `series`."""
    out: dict[str, Any] = {"id": r.id, "reward": r.reward, "token_steps": series(r.steps), "mask": series(r.mask)}
    logprobs: dict[str, Any] = {}
    if "student" in case.inputs:
        logprobs["student"] = series(r.student)
    if "teacher" in case.inputs:
        logprobs["teacher"] = series(r.teacher)
    if "horizons" in case.inputs:
        logprobs["teacher"] = {h: series(v) for h, v in r.horizons.items()}
    if "post_pre" in case.inputs:
        logprobs["post"] = {OPD_NAME: series(r.student)}
        logprobs["pre"] = {OPD_NAME: series(r.pre)}
    if logprobs:
        out["logprobs"] = logprobs
    if "entropy" in case.inputs:
        out["teacher_entropy"] = series(r.entropy)
    return out


def request_groups(groups: list[list[Rollout]], case: Case, series: Callable[[np.ndarray], Any]) -> list[Any]:
    return [
        {"group_id": f"group-{g}", "trajectories": [_trajectory(r, case, series) for r in members]}
        for g, members in enumerate(groups)
    ]


def request_body(groups: list[list[Rollout]], case: Case) -> dict[str, Any]:
    """The JSON body: the tensors' `.tolist()` (float32 values as Python floats)."""
    return {"method": case.method, "params": case.params, "groups": request_groups(groups, case, np.ndarray.tolist)}


def binary_body(groups: list[list[Rollout]], case: Case) -> bytes:
    """The binary body, as the client writes it from the tensors themselves (float32
    log-probs, int64 mask and steps: columns of their own dtype)."""
    return encode_request(case.method, request_groups(groups, case, lambda a: a), case.params)


def trajectory_tokens(groups: list[list[Rollout]], case: Case) -> list[list[TrajectoryTokens]]:
    """The same batch as arrays, for service.distill.signals directly (the floor)."""

    def one(r: Rollout) -> TrajectoryTokens:
        teacher: dict[str, np.ndarray] = {}
        if "teacher" in case.inputs:
            teacher = {"default": r.teacher}
        if "horizons" in case.inputs:
            teacher = dict(r.horizons)
        opd = "post_pre" in case.inputs
        return TrajectoryTokens(
            reward=r.reward,
            student=r.student if "student" in case.inputs else None,
            teacher=teacher,
            post={OPD_NAME: r.student} if opd else {},
            pre={OPD_NAME: r.pre} if opd else {},
            mask=r.mask.astype(bool),
            steps=r.steps,
            entropy=r.entropy if "entropy" in case.inputs else None,
        )

    return [[one(r) for r in members] for members in groups]
