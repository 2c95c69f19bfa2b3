"""The batch's mask and token_steps checks, run over every trajectory at once
(`_checked_masks_and_steps`), against the per-trajectory checks they stand in for:
they accept exactly the bodies those accept, with the same arrays, and hand every
other body to them (which name its first bad value, as before)."""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from domain.errors import InvalidInput
from service.distill.advantages.schemas import AdvantagesRequest
from service.distill.advantages.service import AdvantageService, _checked_masks_and_steps

mask_values = st.one_of(st.sampled_from([0, 1]), st.sampled_from([0, 1, 2, -1, 2**70]))
step_lists = st.lists(st.integers(min_value=0, max_value=5), max_size=6).map(sorted)
bad_steps = st.one_of(
    st.lists(st.one_of(st.integers(min_value=-2, max_value=5), st.just(2**70)), max_size=6),
    step_lists.map(lambda xs: [-1, *xs]),  # in order, but one step below 0
)


@st.composite
def trajectories(draw: Any) -> dict[str, Any]:
    traj: dict[str, Any] = {"id": f"t{draw(st.integers(0, 10**9))}", "reward": 1.0}
    if draw(st.booleans()):
        traj["mask"] = draw(st.lists(mask_values, max_size=6))
    if draw(st.booleans()):
        traj["token_steps"] = draw(st.one_of(step_lists, step_lists, bad_steps))
    return traj


bodies = st.lists(st.lists(trajectories(), min_size=1, max_size=3), min_size=1, max_size=3).map(
    lambda groups: {
        "method": "grpo",
        "groups": [{"group_id": f"g{i}", "trajectories": ts} for i, ts in enumerate(groups)],
    }
)


def one_by_one(body: AdvantagesRequest) -> dict[tuple[int, int], tuple[np.ndarray, np.ndarray]] | None:
    """The per-trajectory checks: None when one of them refuses the body."""
    out = {}
    for gi, group in enumerate(body.groups):
        for ti, traj in enumerate(group.trajectories):
            path = f"groups[{gi}].trajectories[{ti}]"
            n = len(traj.mask if traj.mask is not None else traj.token_steps or [])
            try:
                out[(gi, ti)] = (AdvantageService._mask(traj, path, n), AdvantageService._steps(traj, path, n))
            except InvalidInput:
                return None
    return out


@given(bodies)
@settings(max_examples=400, deadline=None)
def test_the_batch_checks_accept_what_the_per_trajectory_checks_accept(raw: dict[str, Any]) -> None:
    body = AdvantagesRequest.model_validate(raw)
    want = one_by_one(body)
    got = _checked_masks_and_steps(body)
    assert (got is None) == (want is None)
    if got is None or want is None:
        return
    for key, (mask, steps) in want.items():
        sent = got.get(key)
        traj = body.groups[key[0]].trajectories[key[1]]
        if traj.mask is None and traj.token_steps is None:
            assert sent is None
            continue
        assert sent is not None
        if traj.mask is not None:
            assert sent[0] is not None and sent[0].dtype == bool and np.array_equal(sent[0], mask)
        if traj.token_steps is not None:
            assert sent[1] is not None and sent[1].dtype == np.int64 and np.array_equal(sent[1], steps)


def test_a_decrease_after_an_empty_trajectory_is_still_found() -> None:
    """The boundary between trajectories is left out of the order check, and an empty
    one makes no boundary that could hide a decrease."""
    body = AdvantagesRequest.model_validate(
        {
            "method": "grpo",
            "groups": [
                {
                    "group_id": "g",
                    "trajectories": [
                        {"id": "a", "reward": 1.0, "token_steps": []},
                        {"id": "b", "reward": 0.0, "token_steps": [1, 0]},
                    ],
                }
            ],
        }
    )
    assert _checked_masks_and_steps(body) is None
    body.groups[0].trajectories[1].token_steps = [0, 1]
    assert _checked_masks_and_steps(body) is not None
