"""The asyncio client: the same methods as :class:`reflexa.Client`, awaited.

Requests, validation, retries and errors are shared with the sync client (see
:mod:`reflexa._operations`); only the waiting differs. To log an episode from
asyncio code, use :meth:`reflexa.Client.episode`: its ``step`` never blocks, and
``async with`` flushes without blocking the event loop.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator, Mapping, Sequence
from types import TracebackType
from typing import Any, Literal

import httpx

from reflexa import _operations as ops
from reflexa._download import DatasetFile
from reflexa._operations import (
    AdvantageGroupInput,
    ContextTrajectoryInput,
    ExportDataset,
    ExportFormat,
    FiltersInput,
    OutcomeInput,
    RenderInput,
    RubricScoreItemInput,
    ScoreTrajectoryInput,
    StepInput,
    TeacherInput,
    TeacherItemInput,
    TrajectoryInput,
)
from reflexa._retry import RetryPolicy
from reflexa._transport import AsyncTransport
from reflexa.config import DEFAULT_TIMEOUT, ClientConfig
from reflexa.errors import ConsistencyTimeout, ReflexaError
from reflexa.models import (
    AdvantageMethod,
    AdvantagesResponse,
    BatchResult,
    ContextRendering,
    ContextsResult,
    FreezeState,
    Key,
    KeyCreated,
    Kind,
    LeakageOptions,
    Namespace,
    NamespaceSettings,
    Page,
    RetrievalOutcome,
    RetrieveRequest,
    RetrieveResult,
    RewardCapability,
    RewardCapabilityCreated,
    Role,
    Rubric,
    RubricBatchScore,
    RubricCriterion,
    RubricScore,
    Snapshot,
    SortOrder,
    StepsAppended,
    TaskGroupBy,
    TaskSort,
    TaskStats,
    TaskStatsPage,
    TeacherContextsOptions,
    TeacherLogprobsResult,
    Trajectory,
    TrajectoryDeleted,
    TrajectoryStatus,
    TrajectoryWritten,
    coerce,
)


class AsyncClient:
    """An asyncio connection to a Reflexa server; arguments as for :class:`reflexa.Client`."""

    def __init__(
        self,
        base_url: str | None = None,
        api_key: str | None = None,
        *,
        namespace: str | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        max_retries: int = 3,
        backoff: float = 0.5,
        max_backoff: float = 30.0,
        http_client: httpx.AsyncClient | None = None,
    ) -> None:
        self.config = ClientConfig.resolve(
            base_url=base_url,
            api_key=api_key,
            namespace=namespace,
            timeout=timeout,
            retry=RetryPolicy(max_retries=max_retries, backoff=backoff, max_backoff=max_backoff),
        )
        self._transport = AsyncTransport(self.config, http_client)

    async def aclose(self) -> None:
        await self._transport.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    def _ns(self, namespace: str | None) -> str:
        return self.config.namespace_or_default(namespace)

    async def healthz(self) -> dict[str, Any]:
        return await self._transport.send(ops.healthz())

    async def readyz(self) -> dict[str, Any]:
        return await self._transport.send(ops.readyz())

    async def create_key(self, role: Role, namespaces: Sequence[str], description: str | None = None) -> KeyCreated:
        return await self._transport.send(ops.create_key(role, namespaces, description))

    async def list_keys(self) -> list[Key]:
        return await self._transport.send(ops.list_keys())

    async def revoke_key(self, key_id: str) -> Key:
        return await self._transport.send(ops.revoke_key(key_id))

    async def rotate_key(self, key_id: str, grace_seconds: int = 3600, description: str | None = None) -> KeyCreated:
        return await self._transport.send(ops.rotate_key(key_id, grace_seconds, description))

    async def create_namespace(
        self, name: str, settings: NamespaceSettings | Mapping[str, Any] | None = None
    ) -> Namespace:
        return await self._transport.send(ops.create_namespace(name, settings))

    async def list_namespaces(self) -> list[Namespace]:
        namespaces: list[Namespace] = []
        cursor: str | None = None
        while True:
            page = await self._transport.send(ops.list_namespaces(cursor))
            namespaces.extend(page.items)
            if not page.next_cursor:
                return namespaces
            cursor = page.next_cursor

    async def get_namespace(self, namespace: str | None = None) -> Namespace:
        return await self._transport.send(ops.get_namespace(self._ns(namespace)))

    async def create_trajectory(
        self,
        namespace: str | None = None,
        *,
        task: str,
        steps: Sequence[StepInput] | None = None,
        outcome: OutcomeInput | None = None,
        id: str | None = None,
        environment: str | None = None,
        agent: str | None = None,
        policy_version: str | None = None,
        group_id: str | None = None,
        parent_trajectory_id: str | None = None,
        attempt: int | None = None,
        metadata: Mapping[str, Any] | None = None,
        retrieval_ids: Sequence[str] | None = None,
    ) -> TrajectoryWritten:
        trajectory = {
            "id": id,
            "task": task,
            "environment": environment,
            "agent": agent,
            "policy_version": policy_version,
            "group_id": group_id,
            "parent_trajectory_id": parent_trajectory_id,
            "attempt": attempt,
            "metadata": metadata,
            "steps": list(steps or ()),
            "outcome": outcome,
            "retrieval_ids": list(retrieval_ids) if retrieval_ids is not None else None,
        }
        return await self._transport.send(ops.create_trajectory(self._ns(namespace), trajectory))

    async def create_trajectories(self, namespace: str | None, trajectories: Sequence[TrajectoryInput]) -> BatchResult:
        return await self._transport.send(ops.create_trajectories(self._ns(namespace), trajectories))

    async def get_trajectory(self, namespace: str | None, trajectory_id: str) -> Trajectory:
        return await self._transport.send(ops.get_trajectory(self._ns(namespace), trajectory_id))

    async def list_trajectories(
        self,
        namespace: str | None = None,
        *,
        limit: int | None = None,
        cursor: str | None = None,
        environment: str | None = None,
        agent: str | None = None,
        task: str | None = None,
        policy_version: str | None = None,
        group_id: str | None = None,
        status: TrajectoryStatus | None = None,
        success: bool | None = None,
        include_steps: bool = False,
    ) -> Page[Trajectory]:
        filters = {
            "limit": limit,
            "cursor": cursor,
            "environment": environment,
            "agent": agent,
            "task": task,
            "policy_version": policy_version,
            "group_id": group_id,
            "status": status,
            "success": success,
            "include_steps": include_steps,
        }
        return await self._transport.send(ops.list_trajectories(self._ns(namespace), filters))

    async def iter_trajectories(
        self,
        namespace: str | None = None,
        *,
        page_size: int | None = None,
        environment: str | None = None,
        agent: str | None = None,
        task: str | None = None,
        policy_version: str | None = None,
        group_id: str | None = None,
        status: TrajectoryStatus | None = None,
        success: bool | None = None,
        include_steps: bool = False,
    ) -> AsyncIterator[Trajectory]:
        cursor: str | None = None
        while True:
            page = await self.list_trajectories(
                namespace,
                limit=page_size,
                cursor=cursor,
                environment=environment,
                agent=agent,
                task=task,
                policy_version=policy_version,
                group_id=group_id,
                status=status,
                success=success,
                include_steps=include_steps,
            )
            for trajectory in page.items:
                yield trajectory
            if not page.next_cursor:
                return
            cursor = page.next_cursor

    async def append_steps(
        self, namespace: str | None, trajectory_id: str, steps: Sequence[StepInput]
    ) -> StepsAppended:
        return await self._transport.send(ops.append_steps(self._ns(namespace), trajectory_id, steps))

    async def report_outcome(
        self,
        namespace: str | None,
        trajectory_id: str,
        *,
        success: bool | None = None,
        reward: float | None = None,
        failure_reason: str | None = None,
        details: Mapping[str, Any] | None = None,
        wait_ms: int = 0,
    ) -> TrajectoryWritten:
        ns = self._ns(namespace)
        outcome = {"success": success, "reward": reward, "failure_reason": failure_reason, "details": details}
        try:
            return await self._transport.send(ops.report_outcome(ns, trajectory_id, outcome, wait_ms))
        except ConsistencyTimeout:
            # Stored, but a 504 carries no token: a replay fetches it for the session.
            with contextlib.suppress(ReflexaError):
                await self._transport.send(ops.report_outcome(ns, trajectory_id, outcome))
            raise

    async def delete_trajectory(self, namespace: str | None, trajectory_id: str) -> TrajectoryDeleted:
        return await self._transport.send(ops.delete_trajectory(self._ns(namespace), trajectory_id))

    async def retrieve(
        self,
        namespace: str | None,
        observation: str,
        *,
        data: Mapping[str, Any] | None = None,
        internal_state: str | None = None,
        task: str | None = None,
        environment: str | None = None,
        kinds: Sequence[Kind] | None = None,
        k: int = 10,
        min_score: float | None = None,
        mmr_lambda: float | None = None,
        filters: FiltersInput | None = None,
        render: RenderInput | None = None,
        trajectory_id: str | None = None,
        snapshot: str | None = None,
        consistency: Literal["session", "none"] | str = "session",
        wait_timeout_ms: int = 5000,
    ) -> RetrieveResult:
        """See :meth:`reflexa.Client.retrieve`; the session is this client's own writes."""
        ns = self._ns(namespace)
        if snapshot is not None and consistency == "session":
            consistency = "none"  # nothing to wait for; the session keeps its writes
        with self._transport.session.waiting(ns, consistency) as token:
            request = ops.retrieve_request(
                observation,
                data=data,
                internal_state=internal_state,
                task=task,
                environment=environment,
                kinds=kinds,
                k=k,
                min_score=min_score,
                mmr_lambda=mmr_lambda,
                filters=filters,
                render=render,
                trajectory_id=trajectory_id,
                snapshot=snapshot,
                consistency_token=token,
                wait_timeout_ms=wait_timeout_ms,
            )
            return await self._transport.send(ops.retrieve(ns, request))

    async def retrieve_batch(
        self,
        namespace: str | None,
        requests: Sequence[RetrieveRequest | Mapping[str, Any]],
        *,
        consistency: Literal["session", "none"] | str = "session",
        wait_timeout_ms: int = 5000,
    ) -> list[RetrieveResult]:
        """Many states in one call (a rollout group, a batch of agents): each request
        is what :meth:`retrieve` sends (a :class:`~reflexa.models.RetrieveRequest` or
        its fields as a mapping: ``state``, ``internal_state``, ``task``, ``k``,
        ``filters``, ``render``, ``trajectory_id``, …), and each result is what it
        would answer, with its own ``retrieval_id``, in the order given. The texts
        are encoded as one batch on the server. ``consistency`` as for
        :meth:`retrieve` (the session's token goes with the first request; none goes
        with a batch that names a ``snapshot``, which every request of it must name alike)."""
        ns = self._ns(namespace)
        bodies = [coerce(RetrieveRequest, r, field=f"requests[{i}]") for i, r in enumerate(requests)]
        if ops.names_snapshot(bodies) and consistency == "session":
            consistency = "none"
        with self._transport.session.waiting(ns, consistency) as token:
            if token is not None and bodies and bodies[0].consistency_token is None:
                bodies[0] = bodies[0].model_copy(
                    update={"consistency_token": token, "wait_timeout_ms": wait_timeout_ms}
                )
            result = await self._transport.send(ops.retrieve_batch(ns, bodies))
        return result.results

    async def report_retrieval_outcome(
        self,
        namespace: str | None,
        retrieval_id: str,
        *,
        success: bool | None = None,
        reward: float | None = None,
        trajectory_id: str | None = None,
        details: Mapping[str, Any] | None = None,
        item_ids: Sequence[str] | None = None,
    ) -> RetrievalOutcome:
        outcome = {
            "success": success,
            "reward": reward,
            "trajectory_id": trajectory_id,
            "details": details,
            "item_ids": None if item_ids is None else list(item_ids),
        }
        return await self._transport.send(ops.report_retrieval_outcome(self._ns(namespace), retrieval_id, outcome))

    # --- trainers -----------------------------------------------------------------------------

    async def create_snapshot(
        self, namespace: str | None = None, id: str | None = None, note: str | None = None
    ) -> Snapshot:
        """See :meth:`reflexa.Client.create_snapshot`: without an ``id`` one is made up, so retries replay."""
        return await self._transport.send(ops.create_snapshot(self._ns(namespace), id, note))

    async def list_snapshots(
        self, namespace: str | None = None, *, limit: int | None = None, cursor: str | None = None
    ) -> Page[Snapshot]:
        return await self._transport.send(ops.list_snapshots(self._ns(namespace), limit, cursor))

    async def iter_snapshots(
        self, namespace: str | None = None, *, page_size: int | None = None
    ) -> AsyncIterator[Snapshot]:
        cursor: str | None = None
        while True:
            page = await self.list_snapshots(namespace, limit=page_size, cursor=cursor)
            for snapshot in page.items:
                yield snapshot
            if not page.next_cursor:
                return
            cursor = page.next_cursor

    async def get_snapshot(self, namespace: str | None, snapshot_id: str) -> Snapshot:
        return await self._transport.send(ops.get_snapshot(self._ns(namespace), snapshot_id))

    async def delete_snapshot(self, namespace: str | None, snapshot_id: str) -> None:
        await self._transport.send(ops.delete_snapshot(self._ns(namespace), snapshot_id))

    async def freeze(self, namespace: str | None = None) -> FreezeState:
        return await self._transport.send(ops.freeze(self._ns(namespace)))

    async def thaw(self, namespace: str | None = None) -> FreezeState:
        return await self._transport.send(ops.thaw(self._ns(namespace)))

    async def get_freeze(self, namespace: str | None = None) -> FreezeState:
        return await self._transport.send(ops.get_freeze(self._ns(namespace)))

    async def list_tasks(
        self,
        namespace: str | None = None,
        *,
        group_by: TaskGroupBy = "task",
        sort: TaskSort = "learning_signal",
        order: SortOrder = "desc",
        environment: str | None = None,
        agent: str | None = None,
        policy_version: str | None = None,
        min_attempts: int | None = None,
        snapshot: str | None = None,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> TaskStatsPage:
        """See :meth:`reflexa.Client.list_tasks`."""
        return await self._transport.send(
            ops.list_tasks(
                self._ns(namespace),
                group_by=group_by,
                sort=sort,
                order=order,
                environment=environment,
                agent=agent,
                policy_version=policy_version,
                min_attempts=min_attempts,
                snapshot=snapshot,
                limit=limit,
                cursor=cursor,
            )
        )

    async def iter_tasks(
        self,
        namespace: str | None = None,
        *,
        group_by: TaskGroupBy = "task",
        sort: TaskSort = "learning_signal",
        order: SortOrder = "desc",
        environment: str | None = None,
        agent: str | None = None,
        policy_version: str | None = None,
        min_attempts: int | None = None,
        snapshot: str | None = None,
        page_size: int | None = None,
    ) -> AsyncIterator[TaskStats]:
        cursor: str | None = None
        while True:
            page = await self.list_tasks(
                namespace,
                group_by=group_by,
                sort=sort,
                order=order,
                environment=environment,
                agent=agent,
                policy_version=policy_version,
                min_attempts=min_attempts,
                snapshot=snapshot,
                limit=page_size,
                cursor=cursor,
            )
            for row in page.items:
                yield row
            if not page.next_cursor:
                return
            cursor = page.next_cursor

    async def distill_contexts(
        self,
        namespace: str | None,
        trajectories: Sequence[ContextTrajectoryInput],
        teachers: Sequence[TeacherInput] = (),
        *,
        snapshot: str | None = None,
        leakage: LeakageOptions | Mapping[str, Any] | None = None,
        template: str | None = None,
        history_max_chars: int | None = None,
        include: Sequence[ContextRendering] | None = None,
        steps: Sequence[int] | None = None,
    ) -> ContextsResult:
        """See :meth:`reflexa.Client.distill_contexts`."""
        return await self._transport.send(
            ops.distill_contexts(
                self._ns(namespace),
                trajectories,
                teachers,
                snapshot=snapshot,
                leakage=leakage,
                template=template,
                history_max_chars=history_max_chars,
                include=include,
                steps=steps,
            )
        )

    async def teacher_logprobs(
        self,
        namespace: str | None,
        items: Sequence[TeacherItemInput],
        *,
        contexts: TeacherContextsOptions | Mapping[str, Any] | None = None,
        top_k: int | None = None,
        entropy: bool | None = None,
        wait: float | None = None,
    ) -> TeacherLogprobsResult:
        """See :meth:`reflexa.Client.teacher_logprobs`."""
        return await self._transport.send(
            ops.teacher_logprobs(self._ns(namespace), items, contexts=contexts, top_k=top_k, entropy=entropy, wait=wait)
        )

    async def distill_advantages(
        self,
        method: AdvantageMethod,
        groups: Sequence[AdvantageGroupInput],
        *,
        params: Mapping[str, Any] | None = None,
    ) -> AdvantagesResponse:
        """See :meth:`reflexa.Client.distill_advantages`."""
        return await self._transport.send(ops.distill_advantages(method, groups, params=params))

    async def export(
        self,
        namespace: str | None,
        dataset: ExportDataset,
        path: str | os.PathLike[str],
        *,
        format: ExportFormat = "jsonl",
        progress: bool = True,
        **filters: Any,
    ) -> int:
        """See :meth:`reflexa.Client.export`; the file is written as the stream arrives."""
        download = ops.export_dataset(self._ns(namespace), dataset, format, filters)
        limit = filters.get("limit") if format == "jsonl" else None
        total = limit if isinstance(limit, int) and not isinstance(limit, bool) else None
        with DatasetFile(path, format, progress=progress, total=total, description=dataset) as out:
            await self._transport.stream(download, out)
            return out.finish()

    # --- trainers: rubric rewards -----------------------------------------------------------

    async def create_rubric(
        self,
        namespace: str | None,
        id: str,
        name: str,
        criteria: Sequence[RubricCriterion | Mapping[str, Any]],
        *,
        task: str | None = None,
        environment: str | None = None,
        status: Literal["candidate", "active"] = "active",
    ) -> Rubric:
        """See :meth:`reflexa.Client.create_rubric`."""
        rubric = {
            "id": id,
            "name": name,
            "criteria": list(criteria),
            "task": task,
            "environment": environment,
            "status": status,
        }
        return await self._transport.send(ops.create_rubric(self._ns(namespace), rubric))

    async def get_rubric(self, namespace: str | None, rubric_id: str) -> Rubric:
        """See :meth:`reflexa.Client.get_rubric`."""
        return await self._transport.send(ops.get_rubric(self._ns(namespace), rubric_id))

    async def score_rubric(
        self,
        namespace: str | None,
        rubric_id: str,
        trajectory: ScoreTrajectoryInput,
        *,
        final_answer: str | Mapping[str, Any] | None = None,
        label: Any = None,
        snapshot: str | None = None,
        skip_judged: bool = False,
    ) -> RubricScore:
        """See :meth:`reflexa.Client.score_rubric`."""
        item = ops.score_item(trajectory, final_answer=final_answer, label=label)
        request = {**item, "snapshot": snapshot, "skip_judged": skip_judged}
        return await self._transport.send(ops.score_rubric(self._ns(namespace), rubric_id, request))

    async def score_rubric_batch(
        self,
        namespace: str | None,
        rubric_id: str,
        items: Sequence[RubricScoreItemInput],
        *,
        snapshot: str | None = None,
        skip_judged: bool = False,
    ) -> RubricBatchScore:
        """See :meth:`reflexa.Client.score_rubric_batch`."""
        return await self._transport.send(
            ops.score_rubric_batch(self._ns(namespace), rubric_id, items, snapshot=snapshot, skip_judged=skip_judged)
        )

    async def create_reward_capability(
        self, namespace: str | None, rubric_id: str, note: str | None = None
    ) -> RewardCapabilityCreated:
        """See :meth:`reflexa.Client.create_reward_capability`."""
        return await self._transport.send(ops.create_reward_capability(self._ns(namespace), rubric_id, note))

    async def list_reward_capabilities(
        self, namespace: str | None, rubric_id: str, *, limit: int | None = None, cursor: str | None = None
    ) -> Page[RewardCapability]:
        """See :meth:`reflexa.Client.list_reward_capabilities`."""
        return await self._transport.send(ops.list_reward_capabilities(self._ns(namespace), rubric_id, limit, cursor))

    async def revoke_reward_capability(self, namespace: str | None, rubric_id: str, capability_id: str) -> None:
        """See :meth:`reflexa.Client.revoke_reward_capability`."""
        await self._transport.send(ops.revoke_reward_capability(self._ns(namespace), rubric_id, capability_id))

    def session_token(self, namespace: str | None = None) -> str | None:
        """See :meth:`reflexa.Client.session_token`."""
        return self._transport.session.pending(self._ns(namespace))[0]
