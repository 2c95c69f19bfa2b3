"""Logging an episode from inside an agent loop without slowing it down.

``ep.step(...)`` validates the step, gives it the next index and puts it on a
bounded in-memory queue; it never waits for the network and never raises for
network problems. A daemon thread sends the queue in order: the first request
creates the trajectory with the first steps, later ones append with explicit
indexes (so a retried request is a harmless replay), the outcome goes last. Steps
are sent in batches of ``batch_size``, or after ``flush_interval`` seconds,
whichever comes first.

Nothing is lost silently. When the queue holds ``max_buffered_steps``, new steps
are dropped (they get no index, so the stored indexes stay contiguous). Transient
failures are retried until the episode is closed and ``flush_timeout`` runs out. A
permanent failure (the server refused a request) stops delivery of this episode,
because later steps could no longer be stored at their indexes. All of this shows
in :attr:`Episode.stats`, in a warning logged on close, in the optional
``on_error`` callback and, with ``strict=True``, as an
:class:`~reflexa.errors.EpisodeDeliveryError` raised by :meth:`Episode.close`.

:meth:`Episode.retrieve` asks the server for past experience while the episode
runs. It is one of the two calls that wait (the agent needs the answer); it is tied to
the episode, whose outcome credits what was served. The other,
:meth:`Episode.check_action`, asks how an action fared in states like the current
one before the agent takes it (the pre-action check). Leaving the ``with`` block
after :meth:`Episode.finish` with ``wait_searchable_ms`` also waits until the
episode is searchable; either way the client's next retrieve sees it.

If the ``with`` block exits with an exception before :meth:`Episode.finish` was
called, the steps are flushed but no outcome is sent: the trajectory stays open,
since an interrupted run has no outcome to learn from.

The logger runs its own thread, so it works from asyncio code too: ``step`` and
``finish`` never block, and ``async with`` / :meth:`Episode.aclose` flush in a
worker thread instead of blocking the event loop.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypedDict

from reflexa import _operations as ops
from reflexa._delivery import EpisodeSender, EpisodeStats
from reflexa._operations import FiltersInput, RenderInput, TrajectoryFields
from reflexa._spool import Spool, SpoolReplayer
from reflexa._transport import SyncTransport
from reflexa.errors import EpisodeDeliveryError, ReflexaError
from reflexa.models import CheckResult, Kind, Outcome, RetrieveResult, Step, TrajectoryCreate, coerce, dump

if TYPE_CHECKING:  # typing has Unpack from Python 3.11; the client runs on 3.10
    from typing_extensions import Unpack

__all__ = ["Episode", "EpisodeClient", "EpisodeErrorCallback", "EpisodeOptions", "EpisodeStats", "RetrieveOptions"]

log = logging.getLogger("reflexa.episode")

#: Called with a permanent delivery failure (from the sender thread) or, on close,
#: with an :class:`~reflexa.errors.EpisodeDeliveryError` for dropped or timed-out steps.
EpisodeErrorCallback = Callable[[ReflexaError], None]


class EpisodeOptions(TrajectoryFields, total=False):
    """The keywords of :meth:`reflexa.Client.episode` besides ``task``: the
    trajectory's id and fields, how its steps are sent, and how failures are told;
    each as :class:`Episode` takes it (with its default there)."""

    id: str | None
    batch_size: int
    flush_interval: float
    max_buffered_steps: int
    flush_timeout: float
    wait_searchable_ms: int
    strict: bool
    on_error: EpisodeErrorCallback | None


class RetrieveOptions(TypedDict, total=False):
    """The keywords of :meth:`Episode.retrieve`: those of :meth:`reflexa.Client.retrieve`
    (with its defaults) but the ones the episode sets itself (``trajectory_id``, ``step``)
    and ``snapshot`` (an episode is live)."""

    data: Mapping[str, Any] | None
    internal_state: str | None
    task: str | None
    environment: str | None
    kinds: Sequence[Kind] | None
    k: int
    min_score: float | None
    mmr_lambda: float | None
    filters: FiltersInput | None
    render: RenderInput | None
    consistency: Literal["session", "none"] | str
    wait_timeout_ms: int


class EpisodeClient(Protocol):
    """What an episode needs of the client that starts it (a :class:`reflexa.Client`):
    its transport, its local spool and replayer, and its ``retrieve``. Stated here so
    that this module does not import the client, which imports it."""

    _transport: SyncTransport
    _spool: Spool | None
    _replayer: SpoolReplayer | None
    retrieve: Callable[..., RetrieveResult]


class Episode:
    """One trajectory being logged as it happens. Made by :meth:`reflexa.Client.episode`.

    ``id`` is the trajectory's id (given, or made up here), known before anything is sent.
    """

    def __init__(
        self,
        client: EpisodeClient,
        namespace: str,
        *,
        task: str,
        id: str | None = None,
        batch_size: int = 50,
        flush_interval: float = 0.2,
        max_buffered_steps: int = 10_000,
        flush_timeout: float = 10.0,
        wait_searchable_ms: int = 0,
        strict: bool = False,
        on_error: EpisodeErrorCallback | None = None,
        **fields: Unpack[TrajectoryFields],
    ) -> None:
        if batch_size < 1 or max_buffered_steps < 1:
            raise ValueError("batch_size and max_buffered_steps must be at least 1")
        if flush_interval < 0 or flush_timeout < 0 or wait_searchable_ms < 0:
            raise ValueError("flush_interval, flush_timeout and wait_searchable_ms must not be negative")
        self.id = id or ops.new_trajectory_id()
        self.namespace = namespace
        self._client = client
        self._task = task
        self._environment = fields.get("environment")
        self._retrieval_ids: list[str] = []
        self._retrievals_lock = threading.Lock()
        self._state: tuple[str, Mapping[str, Any] | None, str | None] | None = None  # the current state
        header = coerce(TrajectoryCreate, ops.trajectory_header("Episode", self.id, task, fields))
        self._flush_timeout = flush_timeout
        self._strict = strict
        self._on_error = on_error
        self._sender = EpisodeSender(
            client._transport,
            namespace,
            dump(header),
            batch_size=batch_size,
            flush_interval=flush_interval,
            max_buffered_steps=max_buffered_steps,
            flush_timeout=flush_timeout,
            wait_searchable_ms=wait_searchable_ms,
            on_failure=self._report,
            spool=client._spool,
        )

    def step(
        self,
        observation: str,
        action: str | Mapping[str, Any],
        *,
        state_data: Mapping[str, Any] | None = None,
        internal_state: str | None = None,
        result: str | None = None,
        reward: float | None = None,
        done: bool = False,
        truncated: bool = False,
        caused_failure: bool = False,
        error: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        policy_version: str | None = None,
        rollout_logprobs: Sequence[float] | None = None,
        rollout_token_ids: Sequence[int] | None = None,
    ) -> int | None:
        """Record a step; returns its index, or ``None`` if it was dropped (buffer full).

        Never blocks and never raises for network problems. The step is copied now,
        so the caller may reuse its dicts. Invalid arguments (a non-text observation,
        an object JSON cannot hold, a positive log-prob) raise
        :class:`~reflexa.errors.InvalidInput` here, where the bug is; a step after
        :meth:`finish` or :meth:`close` raises ``RuntimeError``.

        ``policy_version`` is the policy that acted at this step when it changes within
        an episode (asynchronous RL; leave it out and the episode's applies);
        ``rollout_logprobs`` the inference engine's log-probs of the action's tokens and
        ``rollout_token_ids`` their ids, stored with the step so a trainer can measure
        staleness later (docs/trainers.md, "Measuring staleness").
        """
        if self._sender.drop_if_full():
            return None
        body = dump(
            coerce(
                Step,
                {
                    "state": {"observation": observation, "data": state_data},
                    "internal_state": internal_state,
                    "action": action,
                    "result": result,
                    "error": error,
                    "reward": reward,
                    "done": done,
                    "truncated": truncated,
                    "caused_failure": caused_failure,
                    "policy_version": policy_version,
                    "rollout_logprobs": None if rollout_logprobs is None else list(rollout_logprobs),
                    "rollout_token_ids": None if rollout_token_ids is None else list(rollout_token_ids),
                    "metadata": metadata,
                },
            )
        )
        return self._sender.add_step(body)

    def finish(
        self,
        *,
        success: bool | None = None,
        reward: float | None = None,
        failure_reason: str | None = None,
        details: Mapping[str, Any] | None = None,
    ) -> None:
        """Set the outcome, sent after the last step; it closes the trajectory. Never blocks."""
        outcome = dump(
            coerce(
                Outcome,
                {
                    "success": success,
                    "reward": reward,
                    "failure_reason": failure_reason,
                    "details": details,
                },
            )
        )
        self._sender.set_outcome(outcome)

    def retrieve(self, observation: str, **options: Unpack[RetrieveOptions]) -> RetrieveResult:
        """:meth:`reflexa.Client.retrieve` for this episode's current state; waits for the answer.

        The retrieval is tied to this episode (``trajectory_id``) and to the step
        recorded next (``step``: the one taken with its answer), so its outcome
        credits the served items when it closes; ``task`` and ``environment``
        default to the episode's. Its id is added to :attr:`retrieval_ids`. It does
        not wait for this episode's own unsent steps, which are not searchable
        before the episode closes anyway. Network problems raise, as for any retrieve.
        """
        self._state = (observation, options.get("data"), options.get("internal_state"))
        if options.get("task") is None:
            options["task"] = self._task
        if options.get("environment") is None:
            options["environment"] = self._environment
        result = self._client.retrieve(
            self.namespace, observation, trajectory_id=self.id, step=self._sender.next_index, **options
        )
        if result.retrieval_id is not None:  # always, for a live retrieve
            with self._retrievals_lock:
                self._retrieval_ids.append(result.retrieval_id)
        return result

    async def aretrieve(self, observation: str, **kwargs: Any) -> RetrieveResult:
        """:meth:`retrieve` in a worker thread, so the event loop keeps running while it waits."""
        return await asyncio.to_thread(self.retrieve, observation, **kwargs)

    def check_action(
        self,
        action: str | Mapping[str, Any],
        *,
        observation: str | None = None,
        data: Mapping[str, Any] | None = None,
        internal_state: str | None = None,
        task: str | None = None,
        k: int | None = None,
        filters: FiltersInput | None = None,
    ) -> CheckResult:
        """:meth:`reflexa.Client.check_action` in this episode's current state; waits for the answer.

        The current state is the one given here (``observation``, ``data``,
        ``internal_state``), else the one of the last :meth:`retrieve` or
        :meth:`check_action` of this episode (``data`` / ``internal_state`` given
        here replace its own); with neither, ``ValueError``. ``task``
        and the environment are the episode's. The check is not tied to the episode:
        its outcome credits nothing (the check serves every action's exemplars, not
        the one taken). Network problems raise, as for any check.
        """
        if observation is None:
            if self._state is None:
                raise ValueError("no current state: give observation=, or call retrieve() first")
            observation, kept_data, kept_internal = self._state
            data = data if data is not None else kept_data
            internal_state = internal_state if internal_state is not None else kept_internal
        else:
            self._state = (observation, data, internal_state)
        transport = self._client._transport
        with transport.session.waiting(self.namespace, "session") as token:  # the client's own writes
            request = ops.check_request(
                observation,
                action,
                data=data,
                internal_state=internal_state,
                task=task if task is not None else self._task,
                k=k,
                filters=filters,
                environment=self._environment,
                consistency_token=token,
            )
            return transport.send(ops.check_action(self.namespace, request))

    async def acheck_action(self, action: str | Mapping[str, Any], **kwargs: Any) -> CheckResult:
        """:meth:`check_action` in a worker thread, so the event loop keeps running while it waits."""
        return await asyncio.to_thread(self.check_action, action, **kwargs)

    @property
    def retrieval_ids(self) -> list[str]:
        """Ids of the retrievals made through :meth:`retrieve`, oldest first."""
        with self._retrievals_lock:
            return list(self._retrieval_ids)

    @property
    def stats(self) -> EpisodeStats:
        return self._sender.stats()

    def close(self) -> EpisodeStats:
        """Send what is left, waiting at most ``flush_timeout`` seconds; idempotent.

        Returns the final stats. Anything not delivered is logged as a warning and,
        if steps were dropped or timed out, reported to ``on_error``; with
        ``strict=True`` it raises :class:`~reflexa.errors.EpisodeDeliveryError`.
        """
        return self._close(raise_on_loss=self._strict)

    async def aclose(self) -> EpisodeStats:
        """:meth:`close` in a worker thread, so the event loop keeps running while it flushes."""
        return await asyncio.to_thread(self.close)

    def __enter__(self) -> Episode:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        # Never let a delivery error hide the exception that ended the block.
        self._close(raise_on_loss=self._strict and exc is None)

    async def __aenter__(self) -> Episode:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await asyncio.to_thread(self._close, raise_on_loss=self._strict and exc is None)

    def _close(self, *, raise_on_loss: bool) -> EpisodeStats:
        timed_out = self._sender.close(self._flush_timeout)
        stats = self._sender.stats()
        if timed_out is None:  # closed before; it was reported then
            return stats
        if stats.delivered and self._client._replayer is not None:
            self._client._replayer.kick()  # the server is reachable: send what earlier episodes spooled
        if not stats.delivered:
            message = (
                f"episode {self.id}: {stats.dropped} steps dropped, {stats.failed} not delivered, "
                f"{stats.spooled} kept in the spool for later, "
                f"outcome {stats.outcome}; last error: {stats.last_error}"
            )
            log.warning("%s", message)
            if stats.dropped or timed_out:
                self._report(EpisodeDeliveryError(message, stats=stats))
            lost = stats.dropped or stats.failed or stats.outcome == "failed"
            if raise_on_loss and lost:  # (kept in the spool is late, not lost)
                raise EpisodeDeliveryError(message, stats=stats)
        return stats

    def _report(self, error: ReflexaError) -> None:
        if self._on_error is None:
            return
        try:
            self._on_error(error)
        except Exception:
            log.exception("episode %s: on_error callback raised", self.id)
