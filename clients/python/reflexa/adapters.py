"""Rubric rewards inside RL trainers, through Reflexa's scoring routes: a verl
``compute_score`` and TRL ``reward_funcs``. Only httpx and pydantic (no torch);
everything is computed by the server (``POST …/rubrics/{id}/score/batch``).

Configuration: the arguments, else the environment — ``REFLEXA_URL``,
``REFLEXA_API_KEY`` (a ``trainer`` key), ``REFLEXA_NAMESPACE``, ``REFLEXA_RUBRIC``.

verl (``custom_reward_function.path`` = this file's path, ``name`` =
``compute_score``, or ``compute_score_batch`` with verl's ``BatchRewardManager``)::

    compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs)
        -> {"score": reward, "rubric/<criterion id>": score, ...}

or ``verl_compute_score(rubric="math", namespace="lab")`` for a configured one.
The keyword arguments verl merges into each call from
``custom_reward_function.reward_kwargs`` (verl/trainer/ppo/reward.py,
``_call_with_kwargs``) may configure it: ``rubric``, ``namespace``, ``base_url``,
``api_key``, ``timeout``, ``skip_judged``, ``snapshot`` (VERL_CONFIG) override the
environment (or the configured adapter); the ones verl's reward loop adds itself
(``reward_router_address``, ``reward_model_tokenizer``) are ignored; any other is a
TypeError naming it — a misspelt ``rubirc`` must not silently score with another rubric.
Each sample is scored as an inline trajectory of one step: the task and
observation are ``extra_info["question"]`` (else ``extra_info["prompt"]``, else
``data_source``), the action and final answer are ``solution_str``, the label
(``{{label}}`` in checks) is ``ground_truth``.

TRL (``GRPOTrainer(reward_funcs=[trl_reward_func(rubric="math")], ...)``, or
``trl_async_reward_func`` for an async one)::

    reward_func(prompts, completions, **kwargs) -> list[float | None]

``trl_reward_func`` is a callable instance (sync: every TRL version calls it as it
is; picklable). ``trl_async_reward_func`` is a plain ``async def`` function, because
TRL before 1.16 recognises an async reward function by
``inspect.iscoroutinefunction(reward_func)`` (``asyncio.iscoroutinefunction`` in
0.27–0.29), which is False for an instance with an async ``__call__``: such an
instance is called as a sync one and TRL fails with ``'coroutine' object is not
iterable``. The function is not picklable (a closure); TRL's AsyncGRPOTrainer, which
ships reward functions to a spawned process, takes ``trl_reward_func`` or, from TRL
1.16 (``trl.trainer.utils.is_async_callable`` looks at ``__call__``), an
``AsyncTRLRewardFunc`` instance.

Prompts and completions may be plain text or conversational (lists of messages):
a completion's assistant messages become steps (an assistant message with
``tool_calls`` is an action ``{"tool_calls": [...]}``, the ``tool`` messages after
it its result and the next step's observation), and its last assistant text is the
final answer. The label is the dataset column ``label_key``, else the first of
``ground_truth``, ``solution``, ``answer``, ``label`` present in the batch (TRL
passes dataset columns as keyword arguments). ``None`` (a reward with nothing
scored) reaches TRL as NaN. With TRL's ``log_metric``, each criterion's mean score
is logged as ``rubric/<criterion id>``.

A scoring failure raises (after the client's retries) the client's exception,
whose text is the server's message with the field and rule it names
(``… | field=items[3].label | rule=label_not_numeric | status=422``), and logs it
at WARNING on the ``reflexa.adapters`` logger first (for the reward managers that
catch a reward function's exception and score 0: verl's ``prime`` and
``rate_limited`` ones): a trainer must not train on rewards that silently became zeros.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import threading
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypedDict

from reflexa.async_client import AsyncClient
from reflexa.client import Client
from reflexa.config import ENV_RUBRIC
from reflexa.errors import ReflexaError
from reflexa.models import RubricScore

if TYPE_CHECKING:  # typing has Unpack from Python 3.11; the client runs on 3.10
    from typing_extensions import Unpack

DEFAULT_TIMEOUT = 300.0  # judged criteria wait on an LLM
BATCH_SIZE = 256  # items per scoring request
LABEL_COLUMNS = ("ground_truth", "solution", "answer", "label")
_TRL_RESERVED = frozenset({"completion_ids", "trainer_state", "log_extra", "log_metric", "environments"})


class ScorerConfig(TypedDict, total=False):
    """Every adapter's configuration: the rubric, where it lives and how to reach it
    (each left out is the environment's), and how to score; see :class:`_Scorer`."""

    rubric: str | None
    namespace: str | None
    base_url: str | None
    api_key: str | None
    timeout: float
    skip_judged: bool
    snapshot: str | None


#: What verl's ``custom_reward_function.reward_kwargs`` may set (the adapters' configuration).
VERL_CONFIG = tuple(ScorerConfig.__annotations__)
#: What verl's reward loop passes on its own (verl/experimental/reward_loop/reward_manager/naive.py): ignored.
VERL_PASSED = ("reward_router_address", "reward_model_tokenizer")

log = logging.getLogger("reflexa.adapters")


def _rubric(rubric: str | None) -> str:
    chosen = rubric or os.environ.get(ENV_RUBRIC)
    if not chosen:
        raise ValueError(f"no rubric given: pass rubric=... or set {ENV_RUBRIC}")
    return chosen


def _plain(value: Any) -> Any:
    """A dataset value as JSON (numpy scalars and arrays without importing numpy)."""
    if hasattr(value, "tolist"):
        return value.tolist()
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def _criterion_scores(score: RubricScore) -> dict[str, float]:
    return {f"rubric/{c.id}": c.score if c.score is not None else math.nan for c in score.criteria}


class _Scorer:
    """What the adapters share: the rubric, where it lives, and a lazily built
    client (not pickled: trainers ship reward functions to worker processes)."""

    def __init__(
        self,
        *,
        rubric: str | None = None,
        namespace: str | None = None,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        skip_judged: bool = False,
        snapshot: str | None = None,
    ) -> None:
        self.rubric = _rubric(rubric)
        self.namespace = namespace
        self.base_url = base_url
        self.api_key = api_key
        self.timeout = timeout
        self.skip_judged = skip_judged
        self.snapshot = snapshot
        self._client: Client | None = None
        self._async: tuple[asyncio.AbstractEventLoop, AsyncClient] | None = None
        self._lock = threading.Lock()

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state.update(_client=None, _async=None, _lock=None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def client(self) -> Client:
        with self._lock:
            if self._client is None:
                self._client = Client(self.base_url, self.api_key, namespace=self.namespace, timeout=self.timeout)
                self._client.config.namespace_or_default(None)  # fail now without a namespace
            return self._client

    def async_client(self) -> AsyncClient:
        """One per event loop (an httpx.AsyncClient belongs to the loop it runs on)."""
        loop = asyncio.get_running_loop()
        if self._async is None or self._async[0] is not loop:
            client = AsyncClient(self.base_url, self.api_key, namespace=self.namespace, timeout=self.timeout)
            client.config.namespace_or_default(None)
            self._async = (loop, client)
        return self._async[1]

    def _failed(self, exc: ReflexaError, start: int) -> None:
        """Log a refusal at WARNING (the server's message, field and rule), with the
        field renumbered from the request's items to the call's samples."""
        if exc.field and exc.field.startswith("items[") and start:
            index, _, rest = exc.field[len("items[") :].partition("]")
            if index.isdigit():
                exc.field = f"items[{int(index) + start}]{rest}"
        log.warning("reflexa: scoring with rubric %r failed: %s", self.rubric, exc)

    def _batches(self, items: Sequence[Mapping[str, Any]]) -> Iterator[tuple[int, dict[str, Any]]]:
        """Each request of a scoring call: its first item's index, and the arguments of
        ``score_rubric_batch`` for its (at most BATCH_SIZE) items."""
        for start in range(0, len(items), BATCH_SIZE):
            batch = list(items[start : start + BATCH_SIZE])
            options = {"snapshot": self.snapshot, "skip_judged": self.skip_judged}
            yield start, {"namespace": None, "rubric_id": self.rubric, "items": batch, **options}

    @contextlib.contextmanager
    def _reported(self, start: int) -> Iterator[None]:
        """A request's failure logged (its items numbered as in the whole call), then raised."""
        try:
            yield
        except ReflexaError as exc:
            self._failed(exc, start)
            raise

    def score(self, items: Sequence[Mapping[str, Any]]) -> list[RubricScore]:
        out: list[RubricScore] = []
        client = self.client()
        for start, arguments in self._batches(items):
            with self._reported(start):
                out.extend(client.score_rubric_batch(**arguments).items)
        return out

    async def score_async(self, items: Sequence[Mapping[str, Any]]) -> list[RubricScore]:
        out: list[RubricScore] = []
        client = self.async_client()
        for start, arguments in self._batches(items):
            with self._reported(start):
                out.extend((await client.score_rubric_batch(**arguments)).items)
        return out

    def config(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in VERL_CONFIG}


# --- verl -----------------------------------------------------------------------------------


def _verl_item(data_source: Any, solution_str: str, ground_truth: Any, extra_info: Any) -> dict[str, Any]:
    info = extra_info if isinstance(extra_info, Mapping) else {}
    task = next(
        (v for v in (info.get("question"), info.get("prompt"), data_source) if isinstance(v, str) and v),
        "(verl sample)",
    )
    item: dict[str, Any] = {
        "trajectory": {
            "task": task,
            "metadata": {"adapter": "verl", "data_source": str(data_source)},
            "steps": [{"state": {"observation": task}, "action": solution_str}],
        },
        "final_answer": solution_str,
    }
    if ground_truth is not None:
        item["label"] = _plain(ground_truth)
    return item


def _verl_overrides(kwargs: Mapping[str, Any], where: str) -> dict[str, Any]:
    """The configuration among verl's keyword arguments (see the module docstring)."""
    unknown = sorted(set(kwargs) - set(VERL_CONFIG) - set(VERL_PASSED))
    if unknown:
        raise TypeError(
            f"{where} got unexpected keyword argument{'s' if len(unknown) > 1 else ''} "
            f"{', '.join(map(repr, unknown))} (from custom_reward_function.reward_kwargs?); it accepts "
            f"{', '.join(VERL_CONFIG)}, and ignores verl's own {', '.join(VERL_PASSED)}"
        )
    return {k: kwargs[k] for k in VERL_CONFIG if k in kwargs}


_configured: dict[str, VerlComputeScore] = {}
_configured_lock = threading.Lock()


def _verl_scorer(base: dict[str, Any] | None, overrides: Mapping[str, Any]) -> VerlComputeScore:
    """The adapter for ``base`` (None: the environment's) with ``overrides``, made once per configuration."""
    config = {**(base or {}), **overrides}
    key = repr(sorted(config.items()))
    with _configured_lock:
        if key not in _configured:
            _configured[key] = VerlComputeScore(**config)
        return _configured[key]


def _verl_result(score: RubricScore) -> dict[str, Any]:
    reward = score.reward if score.reward is not None else 0.0
    return {"score": reward, **_criterion_scores(score)}


class VerlComputeScore(_Scorer):
    """verl's custom reward function on a Reflexa rubric (see the module docstring);
    its arguments are VERL_CONFIG, each defaulting to the environment's."""

    def __call__(
        self, data_source: Any, solution_str: str, ground_truth: Any, extra_info: Any = None, **kwargs: Any
    ) -> dict[str, Any]:
        """``{"score": reward, "rubric/<criterion id>": score, …}`` (a reward with nothing
        scored is 0.0; a skipped criterion NaN). ``kwargs``: see the module docstring."""
        overrides = _verl_overrides(kwargs, "compute_score")
        scorer = _verl_scorer(self.config(), overrides) if overrides else self
        [score] = scorer.score([_verl_item(data_source, solution_str, ground_truth, extra_info)])
        return _verl_result(score)

    def batch(
        self,
        data_sources: Iterable[Any],
        solution_strs: Sequence[str],
        ground_truths: Iterable[Any],
        extra_infos: Iterable[Any] | None = None,
        **kwargs: Any,
    ) -> list[dict[str, Any]]:
        """verl's BatchRewardManager form: one result per sample, in order."""
        overrides = _verl_overrides(kwargs, "compute_score_batch")
        scorer = _verl_scorer(self.config(), overrides) if overrides else self
        infos = list(extra_infos) if extra_infos is not None else [None] * len(solution_strs)
        items = [
            _verl_item(d, s, g, e) for d, s, g, e in zip(data_sources, solution_strs, ground_truths, infos, strict=True)
        ]
        return [_verl_result(score) for score in scorer.score(items)]


def verl_compute_score(**config: Any) -> VerlComputeScore:
    """A verl ``compute_score`` on one rubric; ``config``: rubric, namespace, base_url,
    api_key, timeout, skip_judged, snapshot (the rest from the environment)."""
    return VerlComputeScore(**config)


_default: VerlComputeScore | None = None
_default_lock = threading.Lock()


def _default_scorer() -> VerlComputeScore:
    global _default
    with _default_lock:
        if _default is None:
            _default = VerlComputeScore()
        return _default


def compute_score(
    data_source: Any, solution_str: str, ground_truth: Any, extra_info: Any = None, **kwargs: Any
) -> dict[str, Any]:
    """verl's ``compute_score`` signature, configured from the environment
    (``REFLEXA_URL``, ``REFLEXA_API_KEY``, ``REFLEXA_NAMESPACE``, ``REFLEXA_RUBRIC``) and
    from ``custom_reward_function.reward_kwargs`` (``kwargs``: see the module docstring)."""
    overrides = _verl_overrides(kwargs, "compute_score")
    scorer = _verl_scorer(None, overrides) if overrides else _default_scorer()
    return scorer(data_source, solution_str, ground_truth, extra_info)


def compute_score_batch(
    data_sources: Iterable[Any],
    solution_strs: Sequence[str],
    ground_truths: Iterable[Any],
    extra_infos: Iterable[Any] | None = None,
    **kwargs: Any,
) -> list[dict[str, Any]]:
    """The batch form (verl's ``reward_model.reward_manager=batch``), configured from the
    environment and ``kwargs`` as :func:`compute_score` is."""
    overrides = _verl_overrides(kwargs, "compute_score_batch")
    scorer = _verl_scorer(None, overrides) if overrides else _default_scorer()
    return scorer.batch(data_sources, solution_strs, ground_truths, extra_infos)


# --- TRL ------------------------------------------------------------------------------------


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # multimodal parts: the text ones
        return "".join(p.get("text", "") for p in content if isinstance(p, Mapping) and p.get("type") == "text")
    return "" if content is None else str(content)


def _prompt_text(prompt: Any) -> tuple[str, str]:
    """(task, observation) of a TRL prompt: plain text, or a conversation (its last
    user message is the task; the observation is the whole conversation)."""
    if isinstance(prompt, str):
        return prompt, prompt
    messages = [m for m in prompt if isinstance(m, Mapping)] if isinstance(prompt, list) else []
    users = [_content_text(m.get("content")) for m in messages if m.get("role") == "user"]
    transcript = "\n".join(f"{m.get('role', '?')}: {_content_text(m.get('content'))}" for m in messages)
    return (users[-1] if users else transcript), transcript


def _completion_steps(completion: Any, observation: str) -> tuple[list[dict[str, Any]], str]:
    """(steps, final answer) of a TRL completion (see the module docstring)."""
    if isinstance(completion, str):
        return [{"state": {"observation": observation}, "action": completion}], completion
    steps: list[dict[str, Any]] = []
    final = ""
    pending = observation
    for message in completion if isinstance(completion, list) else []:
        if not isinstance(message, Mapping):
            continue
        role, text = message.get("role"), _content_text(message.get("content"))
        if role == "assistant":
            calls = message.get("tool_calls")
            if calls:
                action: Any = {"tool_calls": _plain(calls)}
                if text:
                    action["content"] = text
            else:
                action = text
                final = text
            steps.append({"state": {"observation": pending}, "action": action})
            pending = ""
        elif role == "tool" and steps:
            previous = steps[-1].get("result")
            steps[-1]["result"] = text if previous is None else f"{previous}\n{text}"
            pending = steps[-1]["result"]
    if not steps:
        steps = [{"state": {"observation": observation}, "action": ""}]
    return steps, final


class _TRLItems:
    def __init__(self, label_key: str | None) -> None:
        self.label_key = label_key

    def labels(self, n: int, columns: Mapping[str, Any]) -> list[Any]:
        if self.label_key is not None:
            if self.label_key not in columns:
                raise ValueError(f"label_key {self.label_key!r} is not a column of the batch ({sorted(columns)})")
            key: str | None = self.label_key
        else:
            key = next((k for k in LABEL_COLUMNS if k in columns), None)
        return [None] * n if key is None else [_plain(v) for v in columns[key]]

    def build(
        self, prompts: Sequence[Any], completions: Sequence[Any], kwargs: Mapping[str, Any]
    ) -> list[dict[str, Any]]:
        columns = {k: v for k, v in kwargs.items() if k not in _TRL_RESERVED}
        labels = self.labels(len(completions), columns)
        items = []
        for prompt, completion, label in zip(prompts, completions, labels, strict=True):
            task, observation = _prompt_text(prompt)
            steps, final = _completion_steps(completion, observation)
            item: dict[str, Any] = {
                "trajectory": {"task": task or "(empty prompt)", "metadata": {"adapter": "trl"}, "steps": steps},
                "final_answer": final,
            }
            if label is not None:
                item["label"] = label
            items.append(item)
        return items


def _log(scores: Sequence[RubricScore], log_metric: Any) -> None:
    if not callable(log_metric):
        return
    per: dict[str, list[float]] = {}
    for score in scores:
        for c in score.criteria:
            if c.score is not None:
                per.setdefault(c.id, []).append(c.score)
    for id_, values in per.items():
        log_metric(f"rubric/{id_}", sum(values) / len(values))


class TRLRewardFunc(_Scorer):
    """A TRL reward function on a Reflexa rubric (sync); see the module docstring."""

    def __init__(
        self, *, label_key: str | None = None, name: str | None = None, **config: Unpack[ScorerConfig]
    ) -> None:
        super().__init__(**config)
        self.items = _TRLItems(label_key)
        self.__name__ = name or f"reflexa_{self.rubric}"  # TRL logs rewards/<name>/mean

    def __call__(self, prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any) -> list[float | None]:
        scores = self.score(self.items.build(prompts, completions, kwargs))
        _log(scores, kwargs.get("log_metric"))
        return [s.reward for s in scores]


class AsyncTRLRewardFunc(TRLRewardFunc):
    """The async form as a (picklable) instance: TRL from 1.16 awaits it on its event loop,
    alongside other async reward functions; earlier TRL needs :func:`trl_async_reward_func`."""

    async def __call__(  # type: ignore[override]
        self, prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any
    ) -> list[float | None]:
        scores = await self.score_async(self.items.build(prompts, completions, kwargs))
        _log(scores, kwargs.get("log_metric"))
        return [s.reward for s in scores]


def trl_reward_func(**config: Any) -> Callable[..., list[float | None]]:
    """A TRL ``reward_funcs`` entry scoring completions with a rubric; ``config``:
    rubric, namespace, base_url, api_key, label_key, name, timeout, skip_judged, snapshot."""
    return TRLRewardFunc(**config)


def trl_async_reward_func(**config: Any) -> Callable[..., Awaitable[list[float | None]]]:
    """The async form of :func:`trl_reward_func`: a plain ``async def`` function (so
    ``inspect.iscoroutinefunction`` is true for it, as TRL before 1.16 requires), named
    ``reflexa_<rubric>`` (or ``name``); ``scorer`` is its :class:`AsyncTRLRewardFunc`."""
    scorer = AsyncTRLRewardFunc(**config)

    async def reward_func(prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any) -> list[float | None]:
        return await scorer(prompts, completions, **kwargs)

    reward_func.__name__ = reward_func.__qualname__ = scorer.__name__
    reward_func.scorer = scorer  # type: ignore[attr-defined]
    return reward_func
