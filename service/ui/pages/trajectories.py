"""Trajectories: a filtered list and the step-by-step viewer with the retrievals
made during the episode."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response

from domain.errors import InvalidInput
from service.deps import ServicesDep
from service.params import Ns, TrajectoryId
from service.ui.params import Fields
from service.ui.web import UI_PREFIX, UiSessionDep, render
from store.trajectory_reader import TrajectoryFilter

router = APIRouter(prefix=UI_PREFIX + "/ns/{ns}/trajectories", include_in_schema=False)

FILTERS = ("environment", "task", "agent", "policy_version", "group_id", "success", "created_after", "created_before")


@router.get("")
def trajectories(request: Request, ns: Ns, session: UiSessionDep, services: ServicesDep) -> Response:
    f = Fields(request.query_params)
    filters = TrajectoryFilter(
        environment=f.text("environment"),
        agent=f.text("agent"),
        task_contains=f.text("task", max_length=2000),
        policy_version=f.text("policy_version"),
        group_id=f.text("group_id"),
        success=f.boolean("success"),
        created_after=f.moment("created_after"),
        created_before=f.moment("created_before"),
    )
    page = services.trajectories.list(
        session.principal,
        ns,
        filters,
        cursor=f.cursor(),
        limit=services.settings.ui.page_size,
        include_steps=False,
    )
    params = f.given((*FILTERS, "cursor"))
    return render(request, "trajectories.html", {"ns": ns, "page": page, "params": params})


def _highlight(raw: str | None) -> set[int]:
    """`3-5` or `4`: the steps an evidence link cites."""
    if not raw:
        return set()
    start, _, end = raw.partition("-")
    try:
        lo, hi = int(start), int(end or start)
    except ValueError:
        lo, hi = -1, -1  # refused just below, with the same message
    if lo < 0 or hi < lo or hi - lo > 100_000:
        raise InvalidInput(f"highlight: {raw!r} is not a step or a range a-b", field="highlight", rule="range")
    return set(range(lo, hi + 1))


@router.get("/{id}")
def trajectory(request: Request, ns: Ns, id: TrajectoryId, session: UiSessionDep, services: ServicesDep) -> Response:
    f = Fields(request.query_params)
    episode = services.inspect.episode(session.principal, ns, id)
    highlight = _highlight(f.text("highlight", max_length=40))
    size = services.settings.ui.page_size
    steps = episode.trajectory.steps or []
    pages = max(1, -(-len(steps) // size))
    # An evidence link names its steps, not a page: open the page that holds them.
    position = next((i for i, s in enumerate(steps) if s.index in highlight), 0)
    number = min(f.integer("page", minimum=1) or position // size + 1, pages)
    shown = steps[(number - 1) * size : number * size]
    by_step, unplaced = episode.placed()
    return render(
        request,
        "trajectory.html",
        {
            "ns": ns,
            "t": episode.trajectory,
            "steps": shown,
            "page_number": number,
            "pages": pages,
            "by_step": by_step,
            "unplaced": unplaced,
            "retrieval_count": len(episode.retrievals),
            "highlight": highlight,
        },
    )
