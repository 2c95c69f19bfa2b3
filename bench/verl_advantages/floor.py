"""The raw floor: the same advantages computed in this process with numpy on the
padded tensors (no JSON, no HTTP, no trimming): GRPO over the uid groups (sample std,
ddof 1, as the server and verl), plus for token_signal β·(teacher − student), masked.
"""

from __future__ import annotations

import numpy as np

from bench.verl_advantages.workload import VerlBatch

EPS = 1e-6


def grpo(rewards: np.ndarray, uid: np.ndarray) -> np.ndarray:
    """(B,) group-relative outcome advantages."""
    _, group = np.unique(uid, return_inverse=True)
    count = np.bincount(group).astype(np.float64)
    mean = np.bincount(group, weights=rewards) / count
    dev = rewards - mean[group]
    std = np.sqrt(np.bincount(group, weights=dev**2) / (count - 1))
    return dev / (std[group] + EPS)


def floor(data: VerlBatch, method: str, beta: float = 1.0) -> np.ndarray:
    """(B, L) float32 advantages, 0 in the padding."""
    batch = data.batch
    mask = batch["response_mask"].numpy().astype(np.float64)
    rewards = batch["token_level_rewards"].numpy().astype(np.float64).sum(axis=1)
    out = grpo(rewards, data.non_tensor_batch["uid"])[:, None] * mask
    if method == "token_signal":
        teacher = batch["teacher_log_probs"].numpy().astype(np.float64)
        student = batch["old_log_probs"].numpy().astype(np.float64)
        out = out + beta * (teacher - student) * mask
    return out.astype(np.float32)
