"""Curriculum statistics for trainers that pick prompts by learning signal.

Cursors are opaque: base64url of a small JSON object holding the sort, order and
grouping they were issued for, and the last row's (sort value, task_hash[,
policy_version]). A cursor used with another sort, order or grouping is refused,
as is anything this server did not issue.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy.orm import Session

from domain.errors import InvalidInput
from service.auth import Permission, Principal
from service.namespaces.service import NamespaceService
from service.snapshots.service import SnapshotService
from service.tasks import repository as repo
from service.tasks.repository import NULLABLE_SORTS, TaskFilters, TaskPosition, TaskStats
from service.tasks.schemas import SortOrder, TaskGroupBy, TaskSort, TaskStatsPage, TaskStatsRead
from store.database import Database


def _bad_cursor() -> InvalidInput:
    return InvalidInput(
        "cursor is not one this server issued for this sort, order and group_by; "
        "pass next_cursor from the previous page",
        field="cursor",
        rule="opaque_cursor",
    )


def encode_cursor(row: TaskStats, *, sort: TaskSort, order: SortOrder, group_by: TaskGroupBy) -> str:
    value = row.sort_value(sort)
    if isinstance(value, datetime):
        value = value.isoformat()
    body: dict[str, Any] = {"s": sort, "o": order, "g": group_by, "v": value, "h": row.task_hash}
    if group_by != "task":
        body["p"] = row.policy_version
    raw = json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _sort_value(sort: TaskSort, value: Any) -> Any:
    """The cursor's sort value, checked against the type the sort has."""
    if value is None:
        if sort not in NULLABLE_SORTS:
            raise ValueError("null sort value")
        return None
    if isinstance(value, bool):
        raise ValueError("bool")
    if sort == "attempts":
        if not isinstance(value, int):
            raise ValueError("attempts")
        return value
    if sort == "task":
        if not isinstance(value, str):
            raise ValueError("task")
        return value
    if sort == "last_seen":
        if not isinstance(value, str):
            raise ValueError("last_seen")
        when = datetime.fromisoformat(value)
        if when.tzinfo is None:
            raise ValueError("naive")
        return when
    if not isinstance(value, int | float):
        raise ValueError(sort)
    return float(value)


def decode_cursor(
    cursor: str | None, *, sort: TaskSort, order: SortOrder, group_by: TaskGroupBy
) -> TaskPosition | None:
    if not cursor:
        return None
    try:
        body = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode())
        if not isinstance(body, dict) or (body.get("s"), body.get("o"), body.get("g")) != (sort, order, group_by):
            raise ValueError("issued for another listing")
        task_hash, policy_version = body.get("h"), body.get("p")
        if not isinstance(task_hash, str) or not (policy_version is None or isinstance(policy_version, str)):
            raise ValueError("key")
        if "v" not in body:
            raise ValueError("value")
        return TaskPosition(value=_sort_value(sort, body["v"]), task_hash=task_hash, policy_version=policy_version)
    except (ValueError, TypeError, binascii.Error, UnicodeDecodeError):  # JSONDecodeError is a ValueError
        raise _bad_cursor() from None


class TaskService:
    def __init__(self, db: Database, namespaces: NamespaceService, snapshots: SnapshotService) -> None:
        self.db = db
        self.namespaces = namespaces
        self.snapshots = snapshots

    def list(
        self,
        principal: Principal,
        ns: str,
        *,
        group_by: TaskGroupBy,
        sort: TaskSort,
        order: SortOrder,
        filters: TaskFilters,
        snapshot: str | None,
        cursor: str | None,
        limit: int,
    ) -> TaskStatsPage:
        """Tasks in the sort order (nulls last either way), statistics over the
        namespace's trajectories, live or as of `snapshot`."""
        principal.require(Permission.TRAJECTORIES_READ, ns)
        after = decode_cursor(cursor, sort=sort, order=order, group_by=group_by)
        with self.db.read() as session:
            self.namespaces.require(session, ns)
            ref = self.snapshots.resolve(session, ns, snapshot, field="snapshot")
            rows = repo.list_task_stats(
                session,
                ns,
                snapshot_pk=ref.pk if ref is not None else None,
                by_policy=group_by == "task,policy_version",
                filters=filters,
                sort=sort,
                descending=order == "desc",
                after=after,
                limit=limit + 1,
            )
        page = rows[:limit]
        next_cursor = encode_cursor(page[-1], sort=sort, order=order, group_by=group_by) if len(rows) > limit else None
        return TaskStatsPage(
            items=[TaskStatsRead.model_validate(row, from_attributes=True) for row in page],
            next_cursor=next_cursor,
            snapshot=ref.id if ref is not None else None,
        )

    @staticmethod
    def stats_for_policy(
        session: Session, ns: str, snapshot_pk: int | None, task_hashes: Sequence[str], policy_version: str
    ) -> dict[str, TaskStats]:
        """task hash -> the statistics GET …/tasks?group_by=task,policy_version gives
        the task for this policy version (absent: never attempted by it), in the
        caller's read unit."""
        wanted = sorted(set(task_hashes))
        if not wanted:
            return {}
        rows = repo.list_task_stats(
            session,
            ns,
            snapshot_pk=snapshot_pk,
            by_policy=True,
            filters=TaskFilters(policy_version=policy_version, task_hashes=tuple(wanted)),
            sort="task",
            descending=False,
            after=None,
            limit=len(wanted),
        )
        return {row.task_hash: row for row in rows}
