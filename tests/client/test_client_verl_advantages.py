"""reflexa.integrations.verl_advantages against a real server (``live_server``), on a
verl ``DataProto``: verl 0.9.1's own class when verl is installed (CI: ``pip install
--no-deps verl==0.9.1`` beside tensordict, ray, omegaconf and codetiming), and always
on a stand-in with the same fields (``batch``: tensors by verl's names, (B, L);
``non_tensor_batch["uid"]``: a numpy object array; verl/protocol.py ``DataProto``).

Rows shuffled (a group's rows apart), right padding of different lengths, tool output
(mask 0) inside the responses: the padding is never sent, the advantages there are 0,
and the write-back equals GRPO / RLOO / the token signal computed here with numpy,
verl's own estimators (when installed), and itself split over several requests.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest
import torch
from reflexa import Client
from reflexa.binary_advantages import ArrayAdvantages
from reflexa.integrations import verl_advantages as va

HAS_VERL = importlib.util.find_spec("verl") is not None
WHY = "verl is not installed (pip install --no-deps verl==0.9.1 tensordict ray omegaconf codetiming)"
WIDTH, GROUPS, ROLLOUTS = 48, 6, 4


@dataclass
class VerlShaped:
    """verl's DataProto as the adapter reads it (verl/protocol.py: ``batch`` a TensorDict
    of (B, ...) tensors, ``non_tensor_batch`` numpy object arrays)."""

    batch: dict[str, torch.Tensor]
    non_tensor_batch: dict[str, np.ndarray] = field(default_factory=dict)


@dataclass
class Rows:
    uid: np.ndarray
    lengths: np.ndarray  # response tokens before the right padding
    mask: torch.Tensor
    rewards: torch.Tensor
    student: torch.Tensor
    teacher: torch.Tensor


def rows(seed: int = 5) -> Rows:
    g = np.random.default_rng(seed)
    n = GROUPS * ROLLOUTS
    uid = np.array([f"prompt-{i // ROLLOUTS}" for i in range(n)], dtype=object)
    order = g.permutation(n)  # verl's rows need not be grouped
    uid = uid[order]
    lengths = g.integers(4, WIDTH, size=n)
    lengths[3] = WIDTH  # one row without padding
    mask = torch.zeros(n, WIDTH, dtype=torch.int64)
    for i, k in enumerate(lengths):
        mask[i, :k] = 1
        if k > 10:
            mask[i, 4:7] = 0  # tool output inside the response
    rewards = torch.zeros(n, WIDTH)
    for i, k in enumerate(lengths):  # the outcome reward on the last token, as verl's reward managers put it
        rewards[i, k - 1] = float(g.integers(0, 3))
    student = torch.tensor(-g.exponential(0.7, size=(n, WIDTH)), dtype=torch.float32) * mask
    teacher = torch.clamp(student + torch.tensor(g.normal(0, 0.3, size=(n, WIDTH)), dtype=torch.float32), max=0) * mask
    return Rows(uid, lengths, mask, rewards, student, teacher)


def data_proto(r: Rows, kind: str, *, old_verl: bool = False) -> Any:
    tensors = {
        "responses": torch.zeros(r.mask.shape, dtype=torch.int64),
        "token_level_rewards": r.rewards.clone(),
        "old_log_probs": r.student.clone(),
        "teacher_log_probs": r.teacher.clone(),
    }
    if old_verl:  # before response_mask: the response's slice of attention_mask
        tensors["attention_mask"] = torch.cat([torch.ones(len(r.mask), 5, dtype=torch.int64), r.mask], dim=1)
    else:
        tensors["response_mask"] = r.mask.clone()
    if kind == "verl":
        from verl.protocol import DataProto

        return DataProto.from_dict(tensors=tensors, non_tensors={"uid": r.uid.copy()})
    return VerlShaped(tensors, {"uid": r.uid.copy()})


def numpy_outcome(r: Rows, method: str, eps: float = 1e-6) -> np.ndarray:
    """GRPO (group std, ddof 1) or RLOO per row, worked here."""
    score = r.rewards.double().sum(-1).numpy()
    out = np.zeros(len(score))
    for key in set(r.uid):
        members = np.flatnonzero(r.uid == key)
        s = score[members]
        if method == "grpo":
            out[members] = (s - s.mean()) / (s.std(ddof=1) + eps)
        else:
            out[members] = s - (s.sum() - s) / (len(s) - 1)
    return out


KINDS = ["stand-in", pytest.param("verl", marks=pytest.mark.skipif(not HAS_VERL, reason=WHY))]


@pytest.fixture
def env_client(admin: Client, live_server: Any, monkeypatch: pytest.MonkeyPatch) -> Client:
    monkeypatch.setenv("REFLEXA_URL", live_server.url)
    monkeypatch.setenv("REFLEXA_API_KEY", live_server.admin_key)
    return admin


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("method", ["grpo", "rloo"])
def test_outcome_write_back(admin: Client, kind: str, method: str) -> None:
    r = rows()
    data = data_proto(r, kind)
    answer = va.compute_advantages(data, method, client=admin)
    assert isinstance(answer, ArrayAdvantages)  # one request: the binary body
    adv = data.batch["advantages"]
    assert adv.shape == r.mask.shape and adv.dtype == torch.float32
    assert torch.equal(data.batch["returns"], adv)
    want = numpy_outcome(r, method)[:, None] * r.mask.numpy()
    assert np.allclose(adv.numpy(), want, atol=1e-5)
    assert (adv[r.mask == 0] == 0).all()  # padding and tool output
    assert answer.diagnostics.batch.groups == GROUPS and answer.diagnostics.batch.tokens == int(r.mask.sum())

    split = data_proto(r, kind)
    answer = va.compute_advantages(split, method, client=admin, max_tokens=int(r.lengths.max()) * ROLLOUTS)
    assert len(answer.requests) >= 2  # split: JSON requests, the same numbers to the bit
    assert torch.equal(split.batch["advantages"], adv)


def test_padding_is_never_sent() -> None:
    r = rows()
    groups, order, lengths = va.rollout_groups(r.rewards.sum(-1), r.mask, r.uid, {"student": r.student})
    assert lengths == [int(k) for k in r.lengths]  # the last mask-1 position + 1
    sent = {t["id"]: t for g in groups for t in g["trajectories"]}
    assert sorted(order) == list(range(len(r.uid)))
    for row in order:
        traj = sent[f"row-{row}"]
        assert len(traj["mask"]) == len(traj["logprobs"]["student"]) == r.lengths[row]
        assert traj["mask"] == r.mask[row, : r.lengths[row]].tolist()  # tool output inside is sent as mask 0
    # each group is one uid, in the order of first appearance
    firsts = list(dict.fromkeys(r.uid.tolist()))
    assert [{r.uid[int(t["id"][4:])] for t in g["trajectories"]} for g in groups] == [{u} for u in firsts]


@pytest.mark.parametrize("kind", KINDS)
def test_token_signal_and_split(admin: Client, kind: str) -> None:
    r = rows(seed=8)
    params = {"beta": 0.5}
    data = data_proto(r, kind)
    va.compute_advantages(data, "token_signal", params, client=admin)
    signal = (r.teacher.double() - r.student.double()).numpy()
    want = (numpy_outcome(r, "grpo")[:, None] + 0.5 * signal) * r.mask.numpy()
    assert np.allclose(data.batch["advantages"].numpy(), want, atol=1e-5)
    split = data_proto(r, kind)
    answer = va.compute_advantages(split, "token_signal", params, client=admin, max_bytes=12_000)
    assert len(answer.requests) >= 3
    assert torch.equal(split.batch["advantages"], data.batch["advantages"])


def test_older_verl_attention_mask(admin: Client) -> None:
    r = rows()
    new, old = data_proto(r, "stand-in"), data_proto(r, "stand-in", old_verl=True)
    va.compute_advantages(new, "grpo", client=admin)
    va.compute_advantages(old, "grpo", client=admin)
    assert torch.equal(new.batch["advantages"], old.batch["advantages"])


def test_missing_columns_are_named(admin: Client) -> None:
    data = data_proto(rows(), "stand-in")
    del data.batch["teacher_log_probs"]
    with pytest.raises(KeyError, match="teacher_log_probs"):
        va.compute_advantages(data, "token_signal", client=admin)
    with pytest.raises(KeyError, match="ref_log_prob"):
        va.compute_advantages(data, "grpo", {"kl": {"coef": 0.1}}, client=admin)
    with pytest.raises(ValueError, match="patch_compute_advantage"):
        va.estimator("token_signal")


@pytest.mark.skipif(not HAS_VERL, reason=WHY)
@pytest.mark.parametrize(("name", "theirs"), [("reflexa_grpo", "grpo"), ("reflexa_rloo", "rloo")])
def test_verl_registry_equals_verl_estimators(env_client: Client, name: str, theirs: str) -> None:
    """verl's compute_advantage with the registered name gives verl's own numbers."""
    from verl.trainer.config import AlgoConfig
    from verl.trainer.ppo.core_algos import get_adv_estimator_fn
    from verl.trainer.ppo.ray_trainer import compute_advantage

    assert get_adv_estimator_fn(name).__name__ == f"reflexa_{theirs}"
    r = rows()
    ours = compute_advantage(data_proto(r, "verl"), name, config=AlgoConfig(adv_estimator=name))
    verls = compute_advantage(data_proto(r, "verl"), theirs, config=AlgoConfig(adv_estimator=theirs))
    assert torch.allclose(ours.batch["advantages"], verls.batch["advantages"], atol=1e-5)
    assert torch.equal(ours.batch["returns"], ours.batch["advantages"])
    # Dr. GRPO: verl's norm_adv_by_std_in_grpo reaches params.std
    if theirs == "grpo":
        config = AlgoConfig(adv_estimator=name, norm_adv_by_std_in_grpo=False)
        ours = compute_advantage(data_proto(r, "verl"), name, config=config)
        verls = compute_advantage(data_proto(r, "verl"), theirs, norm_adv_by_std_in_grpo=False, config=config)
        assert torch.allclose(ours.batch["advantages"], verls.batch["advantages"], atol=1e-5)


@pytest.mark.skipif(not HAS_VERL, reason=WHY)
def test_patched_compute_advantage(admin: Client, monkeypatch: pytest.MonkeyPatch) -> None:
    from verl.trainer.ppo import ray_trainer

    monkeypatch.setattr(ray_trainer, "compute_advantage", ray_trainer.compute_advantage)  # undone after the test
    va.patch_compute_advantage("reflexa_token_signal", "token_signal", {"beta": 0.5}, client=admin)
    r = rows(seed=8)
    direct = data_proto(r, "verl")
    va.compute_advantages(direct, "token_signal", {"beta": 0.5}, client=admin)
    patched = ray_trainer.compute_advantage(data_proto(r, "verl"), "reflexa_token_signal")
    assert torch.equal(patched.batch["advantages"], direct.batch["advantages"])
    other = ray_trainer.compute_advantage(data_proto(r, "verl"), "rloo")  # verl's own, untouched
    assert np.allclose(other.batch["advantages"].numpy(), numpy_outcome(r, "rloo")[:, None] * r.mask.numpy(), atol=1e-5)
