"""The namespace list and a namespace's overview."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response

from service.deps import ServicesDep
from service.params import Ns
from service.ui import charts
from service.ui.web import UI_PREFIX, UiSessionDep, render

router = APIRouter(prefix=UI_PREFIX, include_in_schema=False)


@router.get("/namespaces")
def namespaces(request: Request, session: UiSessionDep, services: ServicesDep) -> Response:
    return render(request, "namespaces.html", {"namespaces": services.namespaces.list(session.principal)})


@router.get("/ns/{ns}")
def overview(request: Request, ns: Ns, session: UiSessionDep, services: ServicesDep) -> Response:
    o = services.overview.overview(session.principal, ns)
    # Trainer data: the snapshots pinning this namespace's memory (newest first).
    snapshots = services.snapshots.list(session.principal, ns, cursor=None, limit=10)
    labels = [d[5:] for d in o.days]  # MM-DD
    succeeded = [t.successes for t in o.trajectories]
    failed = [t.total - t.successes for t in o.trajectories]
    total = sum(t.total for t in o.trajectories)
    return render(
        request,
        "overview.html",
        {
            "ns": ns,
            "o": o,
            "snapshots": snapshots,
            "traj_total": total,
            "traj_success": (sum(succeeded) / total) if total else None,
            "traj_chart": charts.stacked_bars(
                "Trajectories per day (succeeded, then the rest)",
                labels,
                [("succeeded", succeeded), ("failed or no outcome", failed)],
                x_label="day (UTC)",
                y_label="episodes",
            ),
            "success_chart": charts.rate_line(
                "Success rate per day (of all episodes)",
                labels,
                [t.successes / t.total if t.total else None for t in o.trajectories],
                x_label="day (UTC)",
                y_label="success",
                references=[("baseline: success of episodes with a retrieval outcome", o.baseline)],
            ),
            "retrieval_chart": charts.stacked_bars(
                "Retrievals per day",
                labels,
                [("retrievals", [r.total for r in o.retrievals])],
                x_label="day (UTC)",
                y_label="retrievals",
            ),
        },
    )
