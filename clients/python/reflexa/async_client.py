# Generated from reflexa/client.py by `python clients/python/tools/generate.py`: do not edit.
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
from functools import partial
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal

import httpx

from reflexa import _operations as ops
from reflexa._advantage_batches import (
    DEFAULT_MAX_BYTES,
    DEFAULT_MAX_GROUP_SIZE,
    DEFAULT_MAX_TOKENS,
    BatchedAdvantagesResponse,
)
from reflexa._advantage_batches import Limits as AdvantageLimits
from reflexa._advantage_batches import merge as merge_advantages
from reflexa._download import DatasetFile
from reflexa._operations import (
    AdvantageGroupInput,
    ContextTrajectoryInput,
    ExportDataset,
    ExportFormat,
    FiltersInput,
    Operation,
    OutcomeInput,
    RenderInput,
    RubricScoreItemInput,
    ScoreTrajectoryInput,
    StepInput,
    TaskFilters,
    TeacherInput,
    TeacherItemInput,
    TrajectoryFields,
    TrajectoryFilters,
    TrajectoryInput,
)
from reflexa._retry import RetryPolicy
from reflexa._transport import AsyncTransport

if TYPE_CHECKING:  # numpy is needed only by distill_advantages_arrays
    from reflexa.binary_advantages import ArrayAdvantages
from reflexa.config import DEFAULT_TIMEOUT, ClientConfig
from reflexa.errors import ConsistencyTimeout, ReflexaError
from reflexa.models import (
    AdvantageMethod,
    AdvantagesResponse,
    BatchResult,
    CheckResult,
    ContextInclude,
    ContextsResult,
    FreezeState,
    Key,
    KeyCreated,
    Kind,
    LeakageOptions,
    Namespace,
    NamespaceSettings,
    Page,
    PrefixesResponse,
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
    StepsAppended,
    TaskStats,
    TaskStatsPage,
    TeacherContextsOptions,
    TeacherLogprobsResult,
    Trajectory,
    TrajectoryDeleted,
    TrajectoryWritten,
    coerce,
)

if TYPE_CHECKING:  # typing has Unpack from Python 3.11; the client runs on 3.10
    from typing_extensions import Unpack


class AsyncClient:
    """An asyncio connection to a Reflexa server; arguments as for :class:`reflexa.Client`
    (which alone has the local spool: episodes are logged through it).

    Use it as an async context manager, or call :meth:`aclose`.
    """

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

    async def _pages(self, page: partial[Operation[Any]]) -> AsyncIterator[Any]:
        """Every item of a listing, one ``page(cursor=…)`` at a time, following ``next_cursor``."""
        cursor: str | None = None
        while True:
            answer = await self._transport.send(page(cursor=cursor))
            for item in answer.items:
                yield item
            if not answer.next_cursor:
                return
            cursor = answer.next_cursor

    # --- health -----------------------------------------------------------------------------

    async def healthz(self) -> dict[str, Any]:
        """Liveness. Not retried: a probe should report what it sees now."""
        return await self._transport.send(ops.healthz())

    async def readyz(self) -> dict[str, Any]:
        """Readiness (database, schema, workers).

        Raises :class:`~reflexa.errors.Unavailable` when not ready; its message holds the checks.
        """
        return await self._transport.send(ops.readyz())

    # --- keys and namespaces ----------------------------------------------------------------

    async def create_key(self, role: Role, namespaces: Sequence[str], description: str | None = None) -> KeyCreated:
        """A new API key (admin only); ``namespaces`` may be ``["*"]``.

        The secret is in ``.key`` and is shown only once. Not retried once it may have
        reached the server, since a repeat would mint a second key.
        """
        return await self._transport.send(ops.create_key(role, namespaces, description))

    async def list_keys(self) -> list[Key]:
        """Every key, revoked ones included, never a secret (admin only)."""
        return await self._transport.send(ops.list_keys())

    async def revoke_key(self, key_id: str) -> Key:
        """Revoke a key (admin only): refused by every replica within 30 s; its UI
        sessions end at once. Revoking again is a no-op."""
        return await self._transport.send(ops.revoke_key(key_id))

    async def rotate_key(self, key_id: str, grace_seconds: int = 3600, description: str | None = None) -> KeyCreated:
        """A new key with the same role and scope (secret in ``.key``, shown once); the
        old one keeps working for ``grace_seconds``, then is refused (admin only)."""
        return await self._transport.send(ops.rotate_key(key_id, grace_seconds, description))

    async def create_namespace(
        self, name: str, settings: NamespaceSettings | Mapping[str, Any] | None = None
    ) -> Namespace:
        """Create a namespace; creating an identical one again returns it, a different one is a Conflict."""
        return await self._transport.send(ops.create_namespace(name, settings))

    async def list_namespaces(self) -> list[Namespace]:
        """Every namespace the key may see."""
        namespaces: list[Namespace] = []
        cursor: str | None = None
        while True:
            page = await self._transport.send(ops.list_namespaces(cursor))
            namespaces.extend(page.items)
            if not page.next_cursor:
                return namespaces
            cursor = page.next_cursor

    async def get_namespace(self, namespace: str | None = None) -> Namespace:
        """One namespace: its settings, and whether it is ``frozen`` for evaluation (since ``frozen_at``)."""
        return await self._transport.send(ops.get_namespace(self._ns(namespace)))

    # --- trajectories -----------------------------------------------------------------------

    async def create_trajectory(
        self,
        namespace: str | None = None,
        *,
        task: str,
        steps: Sequence[StepInput] | None = None,
        outcome: OutcomeInput | None = None,
        id: str | None = None,
        **fields: Unpack[TrajectoryFields],
    ) -> TrajectoryWritten:
        """Store one trajectory; with an ``outcome`` it is stored closed. ``fields``
        (:class:`~reflexa._operations.TrajectoryFields`): environment, agent,
        policy_version, group_id, parent_trajectory_id, attempt, metadata, retrieval_ids.

        Without an ``id`` the client makes one up (uuid4 hex) before the first
        attempt, so retries replay instead of duplicating. Sending an identical body
        again returns the stored trajectory; a different body under the same id is a
        :class:`~reflexa.errors.Conflict`. A retry of an earlier attempt at the task
        names it as ``parent_trajectory_id`` and says which ``attempt`` it is (1 = the
        first): attempt summaries and the ``attempts`` export are built from that.
        """
        header = ops.trajectory_header("create_trajectory", id, task, fields)
        trajectory = {**header, "steps": list(steps or ()), "outcome": outcome}
        return await self._transport.send(ops.create_trajectory(self._ns(namespace), trajectory))

    async def create_trajectories(self, namespace: str | None, trajectories: Sequence[TrajectoryInput]) -> BatchResult:
        """Store many trajectories (e.g. a rollout group) atomically.

        Items without an id get one. If any item is refused, nothing is stored and the
        error's ``field`` names it (``trajectories[3].steps[2].state.observation``).
        Items already stored identically count as replays (``created`` false).
        """
        return await self._transport.send(ops.create_trajectories(self._ns(namespace), trajectories))

    async def get_trajectory(self, namespace: str | None, trajectory_id: str) -> Trajectory:
        """One trajectory with its steps."""
        return await self._transport.send(ops.get_trajectory(self._ns(namespace), trajectory_id))

    async def list_trajectories(
        self,
        namespace: str | None = None,
        *,
        limit: int | None = None,
        cursor: str | None = None,
        **filters: Unpack[TrajectoryFilters],
    ) -> Page[Trajectory]:
        """One page of trajectories matching every filter given (:class:`~reflexa._operations.TrajectoryFilters`:
        environment, agent, task, policy_version, group_id, status, success, include_steps);
        see :meth:`iter_trajectories` for all."""
        page = ops.list_trajectories(self._ns(namespace), limit=limit, cursor=cursor, **filters)
        return await self._transport.send(page)

    async def iter_trajectories(
        self, namespace: str | None = None, *, page_size: int | None = None, **filters: Unpack[TrajectoryFilters]
    ) -> AsyncIterator[Trajectory]:
        """Every matching trajectory (the filters of :meth:`list_trajectories`), fetching pages lazily."""
        async for item in self._pages(partial(ops.list_trajectories, self._ns(namespace), limit=page_size, **filters)):
            yield item

    async def append_steps(
        self, namespace: str | None, trajectory_id: str, steps: Sequence[StepInput]
    ) -> StepsAppended:
        """Append steps to an open trajectory.

        Give each step an ``index`` (the next free one) to make retries idempotent: a
        step already stored identically at its index is a replay, not counted in
        ``appended``. Unindexed steps are only retried when they surely were not sent.
        """
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
        """Report how the episode ended; this closes the trajectory and triggers reflection.

        Repeating the same outcome is a replay; a different one for a closed
        trajectory is a :class:`~reflexa.errors.Conflict`. With ``wait_ms`` the
        answer comes only once the episode is searchable, or raises
        :class:`~reflexa.errors.ConsistencyTimeout` after ``wait_ms`` (the outcome
        is stored either way, and this client's later retrieves still wait for it).
        """
        ns = self._ns(namespace)
        outcome = {"success": success, "reward": reward, "failure_reason": failure_reason, "details": details}
        try:
            return await self._transport.send(ops.report_outcome(ns, trajectory_id, outcome, wait_ms))
        except ConsistencyTimeout:
            # The outcome is stored, but a 504 carries no token: an identical repeat
            # (a replay) answers with it, so the session waits for this write.
            with contextlib.suppress(ReflexaError):
                await self._transport.send(ops.report_outcome(ns, trajectory_id, outcome))
            raise

    async def delete_trajectory(self, namespace: str | None, trajectory_id: str) -> TrajectoryDeleted:
        """Delete a trajectory and everything derived only from it."""
        return await self._transport.send(ops.delete_trajectory(self._ns(namespace), trajectory_id))

    # --- retrieval ----------------------------------------------------------------------------

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
        step: int | None = None,
    ) -> RetrieveResult:
        """What past experience says about a state like this one: ranked items, each
        with its evidence and utility, and with ``render`` (``"markdown"``, ``"text"``,
        ``"json"``, or :class:`~reflexa.models.RenderOptions`) a ready-to-inject ``context``.

        ``observation`` / ``data`` are the state, ``internal_state`` the agent's plan
        (matched separately), ``task`` helps the match; ``environment``, ``kinds``,
        ``min_score`` and ``filters`` (:class:`~reflexa.models.RetrieveFilters`: agent,
        policy_version, status, exclude_tasks, exclude_trajectory_ids, as_of) narrow
        it; ``mmr_lambda`` diversifies it. Give ``trajectory_id`` for the episode the
        answer serves: its outcome then credits the served items when it closes.
        Otherwise report how it went with :meth:`report_retrieval_outcome`. ``step``,
        the index of the episode's step taken with the answer, is logged with it (the
        operator UI shows the retrieval beside that step).

        ``consistency``: ``"session"`` (the default) waits, up to ``wait_timeout_ms``,
        until this client's own writes to the namespace since its last such retrieve
        are searchable — read-your-writes with no code of yours; ``"none"`` does not
        wait; a token string from a write waits for that write. A wait that runs out
        raises :class:`~reflexa.errors.ConsistencyTimeout` (not retried: the server
        already waited); the session then still waits for those writes next time,
        unless their indexing failed (``rule="indexing_failed"``), which no wait can fix.

        ``snapshot``: answer from that snapshot's memory, the same every time (a
        trainer's read): not logged, so ``retrieval_id`` is ``None`` and nothing is
        credited. There is nothing to wait for, so the session's writes are neither
        sent nor settled (they stay pending for the next live retrieve); an explicit
        token with a snapshot is an :class:`~reflexa.errors.InvalidInput`
        (``rule="not_with_snapshot"``).
        """
        ns = self._ns(namespace)
        if snapshot is not None and consistency == "session":
            consistency = "none"
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
                step=step,
            )
            return await self._transport.send(ops.retrieve(ns, request))

    async def check_action(
        self,
        namespace: str | None,
        observation: str,
        action: str | Mapping[str, Any],
        *,
        data: Mapping[str, Any] | None = None,
        internal_state: str | None = None,
        task: str | None = None,
        k: int | None = None,
        filters: FiltersInput | None = None,
    ) -> CheckResult:
        """Before acting: what happened when ``action`` (text, or a tool call object as a
        step takes it) was taken in states like this one (``observation`` / ``data``,
        ``internal_state``, ``task``, matched as :meth:`retrieve` matches them, the exact
        state first).

        ``risk`` is its failure rate among the ``k`` nearest exemplars (server default
        50) of similar states, with a 95% Wilson interval (``low``, ``high``) and the
        ``failures`` / ``attempts`` behind it (``rate`` is ``None`` with no history);
        ``evidence`` the steps, each with its ``trajectory_id`` and ``step_index``;
        ``alternatives`` the other actions taken there, best first by the lower bound
        of their success rate; ``heuristics`` the active ones whose trigger or
        guideline names the action. ``filters`` as for :meth:`retrieve`. Like a
        retrieve, it first waits for this client's own writes to the namespace to be
        searchable (read-your-writes).
        """
        ns = self._ns(namespace)
        with self._transport.session.waiting(ns, "session") as token:
            request = ops.check_request(
                observation,
                action,
                data=data,
                internal_state=internal_state,
                task=task,
                k=k,
                filters=filters,
                consistency_token=token,
            )
            return await self._transport.send(ops.check_action(ns, request))

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
        """Credit what a retrieval served with how the task went (once).

        An identical repeat is a replay (``credited_items`` 0); a different outcome
        for the same retrieval is a :class:`~reflexa.errors.Conflict`. ``item_ids``
        credits only the served items the agent acted on (default: all of them).
        Retrievals made with a ``trajectory_id`` are credited by that episode's
        outcome instead, unless reported here first.
        """
        outcome = {
            "success": success,
            "reward": reward,
            "trajectory_id": trajectory_id,
            "details": details,
            "item_ids": None if item_ids is None else list(item_ids),
        }
        return await self._transport.send(ops.report_retrieval_outcome(self._ns(namespace), retrieval_id, outcome))

    # --- trainers: snapshots, freezes, curriculum statistics, teacher contexts ---------------

    async def create_snapshot(
        self, namespace: str | None = None, id: str | None = None, note: str | None = None
    ) -> Snapshot:
        """Pin the namespace's memory now: every read given ``snapshot=<its id>``
        (:meth:`retrieve`, :meth:`retrieve_batch`, :meth:`distill_contexts`,
        :meth:`list_tasks`, :meth:`export`) answers the same for as long as it exists.

        Without an ``id`` the client makes one up (``snap_`` + uuid4 hex) before the
        first attempt, so a retry replays instead of taking a second snapshot. The same
        id and note again return the stored snapshot; another note under that id is a
        :class:`~reflexa.errors.Conflict` (``field="id"``).
        """
        return await self._transport.send(ops.create_snapshot(self._ns(namespace), id, note))

    async def list_snapshots(
        self, namespace: str | None = None, *, limit: int | None = None, cursor: str | None = None
    ) -> Page[Snapshot]:
        """One page of snapshots, newest first; see :meth:`iter_snapshots` for all."""
        return await self._transport.send(ops.list_snapshots(self._ns(namespace), limit, cursor))

    async def iter_snapshots(
        self, namespace: str | None = None, *, page_size: int | None = None
    ) -> AsyncIterator[Snapshot]:
        """Every snapshot of the namespace, newest first, fetching pages lazily."""
        async for item in self._pages(partial(ops.list_snapshots, self._ns(namespace), page_size)):
            yield item

    async def get_snapshot(self, namespace: str | None, snapshot_id: str) -> Snapshot:
        """One snapshot; an unknown one is a :class:`~reflexa.errors.NotFound`."""
        return await self._transport.send(ops.get_snapshot(self._ns(namespace), snapshot_id))

    async def delete_snapshot(self, namespace: str | None, snapshot_id: str) -> None:
        """Delete a snapshot and its pinned copy of memory (reads naming it then get NotFound)."""
        await self._transport.send(ops.delete_snapshot(self._ns(namespace), snapshot_id))

    async def freeze(self, namespace: str | None = None) -> FreezeState:
        """Freeze the namespace for evaluation: ingest goes on, but no reflection job
        runs and no outcome changes utility until :meth:`thaw`. Idempotent (a second
        freeze keeps the first ``frozen_at``)."""
        return await self._transport.send(ops.freeze(self._ns(namespace)))

    async def thaw(self, namespace: str | None = None) -> FreezeState:
        """Undo :meth:`freeze`; the jobs queued meanwhile run. Idempotent."""
        return await self._transport.send(ops.thaw(self._ns(namespace)))

    async def get_freeze(self, namespace: str | None = None) -> FreezeState:
        """Whether the namespace is frozen, and since when."""
        return await self._transport.send(ops.get_freeze(self._ns(namespace)))

    async def list_tasks(
        self,
        namespace: str | None = None,
        *,
        limit: int | None = None,
        cursor: str | None = None,
        **filters: Unpack[TaskFilters],
    ) -> TaskStatsPage:
        """One page of curriculum statistics: per task (``group_by="task,policy_version"``:
        per task and policy version) its attempts, success rate, reward mean and
        variance, rollout groups and ``learning_signal`` (the mean within-group reward
        variance a group-relative learner gets), sorted by ``sort`` (nulls last).
        ``environment``, ``agent``, ``policy_version`` count only those trajectories,
        ``min_attempts`` drops tasks with fewer; under ``snapshot`` the answer is the
        same every time. A ``cursor`` is tied to its ``sort``, ``order`` and
        ``group_by``. See :meth:`iter_tasks` for every row."""
        return await self._transport.send(ops.list_tasks(self._ns(namespace), limit=limit, cursor=cursor, **filters))

    async def iter_tasks(
        self, namespace: str | None = None, *, page_size: int | None = None, **filters: Unpack[TaskFilters]
    ) -> AsyncIterator[TaskStats]:
        """Every row of :meth:`list_tasks` (its filters), fetching pages lazily by following
        ``next_cursor``. Page under a ``snapshot`` so that a live namespace cannot
        move rows between pages."""
        async for item in self._pages(partial(ops.list_tasks, self._ns(namespace), limit=page_size, **filters)):
            yield item

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
        include: Sequence[ContextInclude] | None = None,
        steps: Sequence[int] | None = None,
        fade: Mapping[str, Any] | None = None,
    ) -> ContextsResult:
        """Per step of each trajectory: the plain context (the task and the history
        the agent saw) and each teacher context (the same with a privileged block in
        the system message), as text and chat messages, for on-policy distillation.

        ``trajectories``: stored ones by id (a string, or ``{"id": ...}``), or inline
        ones (a rollout group not stored yet: a :class:`~reflexa.models.TrajectoryCreate`
        or its fields). ``teachers``: :class:`~reflexa.models.TeacherSpec` (or its
        fields, or just a kind: ``"memory"``, ``"hindsight"``, ``"evidence_card"``,
        ``"reflection"``, ``"attempt_summary"``), each answered under its
        :attr:`~reflexa.models.TeacherSpec.key`. ``leakage``
        (:class:`~reflexa.models.LeakageOptions`) opts out of guards, all on by
        default; ``template``, ``history_max_chars`` and ``steps`` (only these step
        indices) default to the server's. ``include``: ``["messages"]`` (or
        ``["text"]``) returns only that rendering, the other left ``None`` (each
        repeats the history, so asking for one halves the answer); ``["parts"]``
        states each trajectory's turns once and per step only where its window
        starts and each teacher's system message, the smallest answer
        (:func:`reflexa.contexts.step_messages` rebuilds a step's messages). ``fade``
        (``{"by": "task_success", "policy_version": ..., "floor"?, "min_attempts"?,
        "teachers"?}``) shrinks each teacher's budget as the task's success for that
        version rises (scaffold fading); each context reports its ``budget``. Under
        ``snapshot`` the answer is the same every time. Nothing is logged, so retries
        are safe.
        """
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
                fade=fade,
            )
        )

    async def distill_prefixes(
        self,
        namespace: str | None,
        *,
        step: int,
        schedule: Mapping[str, Any],
        tasks: Sequence[str] | None = None,
        trajectories: Sequence[str | Mapping[str, Any]] | None = None,
        k: int | None = None,
        snapshot: str | None = None,
        leakage: Mapping[str, Any] | None = None,
    ) -> PrefixesResponse:
        """Prefix replay (ReOPD): per task — or per rollout, with the leakage guards —
        the first steps of the task's best stored successes, as many as the schedule
        gives at the trainer's ``step`` (``{"kind": "step_decay", "start_fraction",
        "half_life_steps", "min_fraction"?}``: the share halves every half-life). Give
        ``tasks`` or ``trajectories`` (stored ones by id, or ``{"task", "id"?,
        "group_id"?}`` for a rollout not stored yet). Nothing is logged, so retries are
        safe; under ``snapshot`` the answer is the same every time.
        """
        return await self._transport.send(
            ops.distill_prefixes(
                self._ns(namespace),
                step=step,
                schedule=schedule,
                tasks=tasks,
                trajectories=trajectories,
                k=k,
                snapshot=snapshot,
                leakage=leakage,
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
        """The server's teacher endpoint's log-probs of each item's continuation,
        scored after the item's context: ``result.items[i].logprobs[t]`` is
        log π_teacher(token_ids[t] | context, token_ids[:t]), aligned with the
        continuation's tokens (the student's sampled ids, as sent).

        ``items``: :class:`~reflexa.models.TeacherLogprobsItem` or its fields, where
        ``continuation`` may be a list of token ids or a text, and ``context`` a text,
        a list of token ids, chat messages, or a context read from
        :meth:`distill_contexts` (``step.teachers["memory"]``); or ``ref``
        ``{"trajectory_id", "step", "teacher"}`` for a context the server builds under
        ``contexts`` (``{"teachers": [...], "snapshot": ...}``). ``top_k``: also the k
        likeliest tokens at each position; ``entropy``: the teacher's entropy there.
        ``wait``: seconds the teacher may take beyond this client's timeout.

        A 502 (endpoint down, refusing, or answering nonsense) or 504 (too slow) is
        raised as :class:`~reflexa.errors.Unavailable` with ``rule`` naming which, and
        not retried here: the server has retried the endpoint already.
        """
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
        """Shaped per-token advantages for a batch of rollout groups (POST
        /v1/distill/advantages; not namespaced, nothing is stored): ``method`` one of
        ``grpo``, ``token_signal`` (SEED / on-policy distillation), ``direct_opd``,
        ``step_shaping`` (StepOPSD), ``horizon_agreement`` (TurnSight); formulas and
        ``params`` in docs/distillation.md.

        ``groups``: :class:`~reflexa.models.AdvantageGroup` or its fields,
        ``{"group_id", "trajectories": [{"id", "reward", "token_steps"?, "mask"?,
        "logprobs"?: {"student", "teacher"?, "pre"?, "post"?}, "teacher_entropy"?,
        "teacher_topk"?, "advantages"?}]}``, every per-token list one entry per token
        (lists, tuples or 1-d arrays). ``params`` is sent as given, a ``None`` in it
        included (step_shaping's ``budget=None``: no budget).

        The answer's ``trajectories`` come in request order (groups, then
        trajectories), each ``advantages`` aligned with the tokens sent (0 where
        ``mask`` is 0); ``diagnostics.batch`` and ``diagnostics.groups`` hold order
        consistency, length correlation, clip and entropy shares, sign flips. A
        refused body is :class:`~reflexa.errors.InvalidInput` naming the field
        (``groups[0].trajectories[2].mask``, ``params.lambda``). Retried like a read:
        the same body always gives the same answer.
        """
        return await self._transport.send(ops.distill_advantages(method, groups, params=params))

    async def distill_advantages_arrays(
        self,
        method: AdvantageMethod,
        groups: Sequence[Mapping[str, Any]],
        *,
        params: Mapping[str, Any] | None = None,
    ) -> ArrayAdvantages:
        """:meth:`distill_advantages` with numpy in and out (needs numpy): the
        per-token values (arrays, CPU tensors or lists) go as raw columns in the
        binary body (docs/trainers.md, "The binary body"), not as JSON numbers, and
        the answer's per-token values come back as float64 arrays
        (:class:`~reflexa.binary_advantages.ArrayAdvantages`: ``columns["advantages"]``
        for every token sent, ``offsets`` per trajectory, ``response`` the rest of
        the JSON answer). The same numbers as :meth:`distill_advantages`, to the bit;
        one request (at most the server's limits). ``groups`` are dicts of the same
        fields; a refused body is :class:`~reflexa.errors.InvalidInput` naming the field.
        """
        return await self._transport.send(ops.distill_advantages_arrays(method, groups, params=params))

    async def distill_advantages_batched(
        self,
        method: AdvantageMethod,
        groups: Sequence[AdvantageGroupInput],
        *,
        params: Mapping[str, Any] | None = None,
        max_tokens: int | None = None,
        max_group_size: int | None = None,
        max_bytes: int | None = None,
    ) -> BatchedAdvantagesResponse:
        """:meth:`distill_advantages` for a batch of any size: whole groups packed into
        requests under the server's limits (``max_tokens`` tokens, ``max_bytes`` of
        body, ``max_group_size`` trajectories a group; default the server's defaults,
        2,000,000 / 32 MiB / 1,024: pass the server's own if configured otherwise),
        sent one after another, and the answers joined in the order sent.

        A group over a limit on its own is refused before anything is sent
        (:class:`~reflexa.errors.InvalidInput` naming ``groups[i]`` and its
        ``group_id``), as is a batch that needs several requests with a parameter
        whose numbers depend on the whole batch (``scale: "batch"``,
        ``kl.centered``): split, they would change. ``diagnostics.groups`` is exact;
        ``diagnostics.batch`` is combined from the requests' or recomputed from the
        per-token answer (``token_reward_raw`` is null when split); ``requests``
        holds each request's own batch diagnostics (see
        :mod:`reflexa._advantage_batches`).
        """
        limits = AdvantageLimits(
            max_tokens=max_tokens or DEFAULT_MAX_TOKENS,
            max_group_size=max_group_size or DEFAULT_MAX_GROUP_SIZE,
            max_bytes=max_bytes or DEFAULT_MAX_BYTES,
        )
        requests, sent = ops.distill_advantages_batched(method, groups, params=params, limits=limits)
        answers = []
        for request in requests:
            answers.append(await self._transport.send(request))
        return merge_advantages(sent, answers)

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
        """Stream a training dataset of the namespace into the file at ``path``;
        returns how many rows (``jsonl``) or bytes (``parquet``) were written.

        ``dataset``: ``trajectories`` (one row per trajectory, with its steps),
        ``sft`` (chat ``messages`` per step of successful trajectories, for TRL's
        SFTTrainer), ``preferences`` (``prompt`` / ``chosen`` / ``rejected`` at matched
        states, TRL's conversational preference shape) or ``attempts`` (first attempt,
        reflection, next attempt). ``filters``: the server's query parameters
        (``environment``, ``agent``, ``policy_version``, ``group_id``, ``task``,
        ``success``, ``created_after``, ``created_before``, ``limit``, ``snapshot``,
        ``context``, ``history``, ``history_max_chars``, ``max_pairs_per_state``, ``hints``); one left at
        ``None`` is not sent, an unknown one raises
        :class:`~reflexa.errors.InvalidInput` before anything is sent. Give
        ``snapshot`` for a dataset that is the same bytes every time.

        The file appears only once the export is complete (it is written to
        ``<path>.part`` first); a retried attempt starts the file over. With
        ``progress`` (and tqdm installed) a progress bar counts rows or bytes.
        """
        download = ops.export_dataset(self._ns(namespace), dataset, format, filters)
        limit = filters.get("limit") if format == "jsonl" else None
        total = limit if isinstance(limit, int) and not isinstance(limit, bool) else None
        with DatasetFile(path, format, progress=progress, total=total, description=dataset) as out:
            await self._transport.stream(download, out)
            return out.finish()

    def session_token(self, namespace: str | None = None) -> str | None:
        """The token a ``consistency="session"`` retrieve would wait for now (``None``:
        nothing pending). Hand it to another process's retrieve to give it this
        client's writes."""
        return self._transport.session.pending(self._ns(namespace))[0]

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
        """Create a rubric (a reflection of kind ``rubric``) with weighted criteria:
        ``{"id", "text", "weight", "check"?, "stage"?}``, ``check`` a rule (``{"type":
        "regex" | "contains" | "not_contains" | "json_path" | "numeric" | "tool_called"
        | "max_steps", …}``), none for an LLM judge. The same body again returns it (a
        replay); another body under ``id`` is a :class:`~reflexa.errors.Conflict`.
        Bad criteria are :class:`~reflexa.errors.InvalidInput` naming
        ``criteria[i].<field>`` and the rule."""
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
        """A rubric (written by :meth:`create_rubric` or the LLM rubrics reflector)."""
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
        """The rubric reward of one trajectory: a stored one by id (a string) or an
        inline one (not stored). ``final_answer`` replaces the last step's action as
        what ``final_answer`` checks read; ``label`` is the ground truth for
        ``{{label}}`` in checks. ``skip_judged``: with no LLM on the server, score
        the rule criteria alone instead of a :class:`~reflexa.errors.Unavailable`."""
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
        """Score a rollout group (or any batch) with one rubric; each item is a
        :class:`~reflexa.models.RubricScoreItem` or its fields (``trajectory_id`` or
        ``trajectory``, ``final_answer``, ``label``). Results in the order sent."""
        return await self._transport.send(
            ops.score_rubric_batch(self._ns(namespace), rubric_id, items, snapshot=snapshot, skip_judged=skip_judged)
        )

    async def create_reward_capability(
        self, namespace: str | None, rubric_id: str, note: str | None = None
    ) -> RewardCapabilityCreated:
        """A capability URL scoring this rubric without an API key, for OpenRLHF's
        ``--remote_rm_url``: ``client.config.base_url + created.path``. The secret is
        shown only here. Not retried once it may have reached the server (a repeat
        would mint a second one)."""
        return await self._transport.send(ops.create_reward_capability(self._ns(namespace), rubric_id, note))

    async def list_reward_capabilities(
        self, namespace: str | None, rubric_id: str, *, limit: int | None = None, cursor: str | None = None
    ) -> Page[RewardCapability]:
        """One page of the rubric's capabilities, newest first, revoked ones too (never a secret)."""
        return await self._transport.send(ops.list_reward_capabilities(self._ns(namespace), rubric_id, limit, cursor))

    async def revoke_reward_capability(self, namespace: str | None, rubric_id: str, capability_id: str) -> None:
        """Revoke a capability: its URL answers 404 from now on. Idempotent."""
        await self._transport.send(ops.revoke_reward_capability(self._ns(namespace), rubric_id, capability_id))
