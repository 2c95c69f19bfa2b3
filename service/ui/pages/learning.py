"""Learning over time: success and reward per block of episodes and per policy
version, and what each reflector's items do."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response

from service.deps import ServicesDep
from service.params import Ns
from service.ui import charts
from service.ui.params import Fields
from service.ui.web import UI_PREFIX, UiSessionDep, render

router = APIRouter(prefix=UI_PREFIX + "/ns/{ns}/learning", include_in_schema=False)


@router.get("")
def learning(request: Request, ns: Ns, session: UiSessionDep, services: ServicesDep) -> Response:
    f = Fields(request.query_params)
    data = services.learning.learning(session.principal, ns, block_size=f.integer("block_size", minimum=1))
    overall = data.overall_success
    blocks, versions = data.blocks, data.versions
    block_labels = [b.label for b in blocks]
    version_labels = [v.label for v in versions]
    success_refs = [("all episodes", overall)] if overall is not None else []
    return render(
        request,
        "learning.html",
        {
            "ns": ns,
            "l": data,
            "params": f.given(("block_size",)),
            "block_success_chart": charts.lines(
                f"Success rate per block of {data.block_size} episodes",
                block_labels,
                [("success rate", [b.success_rate for b in blocks])],
                percent=True,
                references=success_refs,
                x_label=f"episodes, in completion order (blocks of {data.block_size})",
                y_label="success",
            ),
            "block_reward_chart": charts.lines(
                f"Mean reward per block of {data.block_size} episodes",
                block_labels,
                [("mean reward", [b.mean_reward for b in blocks])],
                x_label=f"episodes, in completion order (blocks of {data.block_size})",
                y_label="reward",
            ),
            "version_chart": charts.lines(
                "Success rate per policy version",
                version_labels,
                [("success rate", [v.success_rate for v in versions])],
                percent=True,
                references=success_refs,
                x_label="policy version, in the order first seen",
                y_label="success",
            ),
            "version_reward_chart": charts.lines(
                "Mean reward per policy version",
                version_labels,
                [("mean reward", [v.mean_reward for v in versions])],
                x_label="policy version, in the order first seen",
                y_label="reward",
            ),
            "reflector_chart": charts.stacked_bars(
                "Times served per reflector",
                [r.reflector for r in data.reflectors],
                [("served", [r.served for r in data.reflectors])],
                x_label="reflector",
                y_label="served",
            ),
        },
    )
