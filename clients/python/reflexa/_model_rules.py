"""What the generated models (:mod:`reflexa._generated_models`) build on, by hand:
the two base classes, the generic page, and the behaviour the OpenAPI document
cannot carry — the server's "exactly one of" validators, mirrored so a mistake fails
here before a round trip, and a few convenience properties. Each mixin is attached
to its class by the generator's ``MIXINS`` table (clients/python/tools)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Generic, TypeVar

from pydantic import BaseModel, ConfigDict, model_validator

T = TypeVar("T")
Self = TypeVar("Self")  # the model a mixin's validator checks (typing.Self needs Python 3.11)


class RequestModel(BaseModel):
    """Base of what the client sends. Unknown fields are refused (a typo in a field
    name fails here, before a round trip, instead of being silently dropped), and so
    are NaN and infinity, because JSON cannot carry them."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class ResponseModel(BaseModel):
    """Base of what the client reads. Unknown fields are ignored, so this client keeps
    working when a newer server adds some."""

    model_config = ConfigDict(extra="ignore")


class Page(ResponseModel, Generic[T]):
    """One page of a list; pass ``next_cursor`` as ``cursor`` to get the next (null at the end)."""

    items: list[T]
    next_cursor: str | None = None


def _exactly_one_of(*names: str, what: str) -> type:
    """A mixin whose validator accepts exactly one of the fields ``names``."""

    class ExactlyOne:
        @model_validator(mode="after")
        def _one(self: Self) -> Self:
            given = [name for name in names if getattr(self, name) is not None]
            if len(given) != 1:
                options = " or ".join(f"`{n}`" for n in names)
                got = f" (got {' and '.join(given)})" if given else ""
                raise ValueError(f"give exactly one of {options} for the {what}{got}")
            return self

    ExactlyOne.__doc__ = f"{' or '.join(names)}, exactly one."
    return ExactlyOne


OneContinuation = _exactly_one_of("token_ids", "text", what="continuation")
OnePrompt = _exactly_one_of("text", "messages", "token_ids", what="context")
OneContext = _exactly_one_of("context", "ref", what="context of the continuation")


class OneTrajectory:
    """``trajectory_id`` (a stored trajectory) or ``trajectory`` (an inline one), exactly one."""

    if TYPE_CHECKING:  # the fields of the class this is mixed into
        trajectory_id: str | None
        trajectory: Any

    @model_validator(mode="after")
    def _one_trajectory(self: Self) -> Self:
        if (self.trajectory_id is None) == (self.trajectory is None):
            raise ValueError("give trajectory_id (a stored trajectory) or trajectory (an inline one), not both")
        return self


class StoredOrInline:
    """A stored trajectory is named by ``{"id"}`` alone; an inline one needs its ``task``."""

    if TYPE_CHECKING:
        id: str | None
        task: str | None
        model_fields_set: set[str]

    @model_validator(mode="after")
    def _stored_or_inline(self: Self) -> Self:
        if self.task is None:
            if self.id is None:
                raise ValueError("give the id of a stored trajectory, or an inline trajectory with its task")
            extra = sorted(self.model_fields_set - {"id", "task"})
            if extra:
                raise ValueError(f"a stored trajectory is named by id alone; an inline one needs a task (got {extra})")
        return self

    @property
    def stored(self) -> bool:
        return self.task is None


class RolloutTokens:
    """A step's rollout record, checked as the server checks it: log-probs <= 0, token
    ids 0 <= id < 2^31, one id per log-prob when both are given. (Its length limit is
    the server's setting, ``limits.max_rollout_tokens_per_step``.)"""

    if TYPE_CHECKING:
        rollout_logprobs: list[float] | None
        rollout_token_ids: list[int] | None

    @model_validator(mode="after")
    def _rollout_tokens(self: Self) -> Self:
        logprobs, token_ids = self.rollout_logprobs, self.rollout_token_ids  # type: ignore[attr-defined]
        if logprobs and max(logprobs) > 0:
            j = next(j for j, v in enumerate(logprobs) if v > 0)
            raise ValueError(f"rollout_logprobs[{j}] is {logprobs[j]:g}; a log-probability is <= 0")
        if token_ids and (min(token_ids) < 0 or max(token_ids) >= 2**31):
            j = next(j for j, v in enumerate(token_ids) if not 0 <= v < 2**31)
            raise ValueError(f"rollout_token_ids[{j}] is {token_ids[j]}; a token id is 0 <= id < 2^31")
        if logprobs is not None and token_ids is not None and len(logprobs) != len(token_ids):
            raise ValueError(
                f"rollout_token_ids has {len(token_ids)} tokens but rollout_logprobs has {len(logprobs)}; "
                "one id per log-prob"
            )
        return self


class TeacherKey:
    """The name a teacher's context is answered under."""

    if TYPE_CHECKING:
        kind: str
        name: str | None
        horizon: int | None

    @property
    def key(self) -> str:
        """The name this teacher's context is answered under."""
        if self.name is not None:
            return self.name
        return f"hindsight@{self.horizon or 1}" if self.kind == "hindsight" else self.kind


class BatchCounts:
    """How many items of a batch write were stored and how many were replays."""

    if TYPE_CHECKING:
        items: list[Any]

    @property
    def created(self) -> int:
        """How many trajectories this call stored (the rest were replays)."""
        return sum(1 for item in self.items if item.created)

    @property
    def replayed(self) -> int:
        return len(self.items) - self.created
