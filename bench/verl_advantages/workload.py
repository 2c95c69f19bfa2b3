"""The batch bench.verl_advantages sends: verl's rollout batch after the log-prob
passes, as `DataProto` holds it (verl/protocol.py; the names of
verl/trainer/ppo/ray_trainer.py compute_advantage), without verl installed.

`prompts` × `rollouts` rows of `width` response positions, right-padded. Response
lengths are log-normal (median `width`/4, clipped to [16, width]: most responses far
shorter than the budget, a few hitting it), so the padding is most of the tensor. The
outcome reward (0 or 1, about half the rollouts) sits on the last response token of
`token_level_rewards`; `old_log_probs` are −Exp (mean 0.7 nats), float32, 0 in the
padding; `teacher_log_probs` (a column a distilling trainer adds) are those plus
Gaussian noise (σ 0.5) kept ≤ 0. Rows are shuffled (a group's rows apart, as after
verl's balancing). Deterministic (a fixed seed).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch


@dataclass(frozen=True)
class Shape:
    prompts: int
    rollouts: int
    width: int
    seed: int = 21

    @property
    def rows(self) -> int:
        return self.prompts * self.rollouts


@dataclass
class VerlBatch:
    """verl's DataProto as the adapter reads it: `batch` (B, L) tensors by verl's names,
    `non_tensor_batch["uid"]` a numpy object array."""

    batch: dict[str, torch.Tensor]
    non_tensor_batch: dict[str, np.ndarray] = field(default_factory=dict)

    @property
    def tokens(self) -> int:
        """Response tokens (the positions up to each row's last mask-1 position)."""
        return int(self.batch["response_mask"].sum())


def verl_batch(shape: Shape) -> VerlBatch:
    g = np.random.default_rng(shape.seed)
    n, width = shape.rows, shape.width
    uid = np.array([f"{i // shape.rollouts:08x}-prompt" for i in range(n)], dtype=object)[g.permutation(n)]
    lengths = np.clip(np.round(g.lognormal(np.log(width / 4), 0.8, size=n)), 16, width).astype(np.int64)
    positions = np.arange(width)[None, :]
    mask = torch.from_numpy((positions < lengths[:, None]).astype(np.int64))
    rewards = np.zeros((n, width), dtype=np.float32)
    rewards[np.arange(n), lengths - 1] = (g.random(n) < 0.5).astype(np.float32)
    student = (-g.exponential(0.7, size=(n, width))).astype(np.float32)
    teacher = np.minimum(student + g.normal(0, 0.5, size=(n, width)).astype(np.float32), 0)
    on = mask.numpy().astype(np.float32)
    tensors = {
        "responses": torch.zeros((n, width), dtype=torch.int64),
        "response_mask": mask,
        "token_level_rewards": torch.from_numpy(rewards),
        "old_log_probs": torch.from_numpy(student * on),
        "teacher_log_probs": torch.from_numpy(teacher * on),
    }
    return VerlBatch(tensors, {"uid": uid})
