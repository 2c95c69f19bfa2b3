"""The one way reflectors talk to an LLM: `LLMClient.complete_json`, a chat
completion whose answer must validate against a pydantic model.

Built once per worker process (it holds the HTTP connection pool) and shared by its
threads. Around each request it enforces the process's concurrency limit and the
namespace's token budget; on top of the openai client's own retries (429, 5xx,
timeouts) it adds one repair turn for unusable output, and it sorts every failure
into transient (`LLMUnavailable`, `LLMBudgetExceeded`: the job retries later) or
permanent (`LLMRequestError`, `LLMOutputError`: the job fails, the error kept).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic

import openai

from reflectors.llm_client.answers import (
    AnswerError,
    Message,
    T,
    parse_answer,
    repair_messages,
    with_format_instruction,
)
from reflectors.llm_client.budget import InMemoryTokenBudget, TokenBudget, estimate_tokens
from reflectors.llm_client.errors import LLMOutputError, LLMRequestError, LLMUnavailable
from reflectors.llm_client.json_schema import response_format
from service.settings import LLMSettings

log = logging.getLogger("reflexa.llm")

MAX_ATTEMPTS = 2  # the first answer and one repair: a model that fails twice needs a better prompt, not a third try


@dataclass(frozen=True)
class LLMResult(Generic[T]):
    """A validated answer and what it cost. Token counts and `attempts` cover every
    request of the call (the repair turn included); `raw` is the answer that parsed."""

    parsed: T
    raw: str
    model: str
    prompt_tokens: int
    completion_tokens: int
    attempts: int

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


@dataclass(frozen=True)
class _Answer:
    raw: str
    model: str
    prompt_tokens: int
    completion_tokens: int
    truncated: bool


class LLMClient:
    """JSON completions against one OpenAI-compatible endpoint.

    `budget` defaults to a per-process `InMemoryTokenBudget` with the settings' daily
    limit; pass a shared implementation to enforce one limit across processes.
    """

    def __init__(self, settings: LLMSettings, *, budget: TokenBudget | None = None) -> None:
        if not settings.base_url or not settings.model:
            raise ValueError("no LLM configured: set llm.base_url and llm.model")
        self.settings = settings
        self.model = settings.model
        self.budget = budget if budget is not None else InMemoryTokenBudget(settings.token_budget_per_namespace_per_day)
        self._base_url = settings.base_url
        self._openai = openai.OpenAI(
            base_url=settings.base_url,
            api_key=settings.api_key.get_secret_value(),
            timeout=settings.timeout_seconds,
            max_retries=settings.max_retries,
        )
        self._slots = threading.BoundedSemaphore(settings.max_concurrency)

    def close(self) -> None:
        """Release the HTTP connection pool (worker shutdown)."""
        self._openai.close()

    def complete_json(
        self,
        messages: Sequence[Message],
        schema_model: type[T],
        *,
        namespace: str,
        purpose: str,
        context: Mapping[str, Any] | None = None,
    ) -> LLMResult[T]:
        """Ask for a JSON answer valid as `schema_model` and return it parsed.

        `namespace` is charged for the tokens; `purpose` (e.g. "heuristics_single.v1")
        names the call in logs and errors. `context` is handed to the model's
        validators (e.g. the step indexes an answer may cite). An unusable answer gets
        one repair turn quoting the validation error; if that fails too,
        LLMOutputError carries both raw answers.
        """
        started = time.monotonic()
        conversation = with_format_instruction(messages, schema_model)
        fmt = response_format(schema_model, use_json_schema=self.settings.use_json_schema)
        raws: list[str] = []
        problems: list[str] = []
        prompt_tokens = completion_tokens = 0
        for attempt in range(1, MAX_ATTEMPTS + 1):
            answer = self._request(conversation, fmt, namespace)
            prompt_tokens += answer.prompt_tokens
            completion_tokens += answer.completion_tokens
            raws.append(answer.raw)
            try:
                parsed = parse_answer(answer.raw, schema_model, context)
            except AnswerError as exc:
                problems.append(str(exc))
                log.warning("llm %s (namespace %s) attempt %d unusable: %s", purpose, namespace, attempt, exc)
                conversation = repair_messages(conversation, answer.raw, str(exc), truncated=answer.truncated)
                continue
            log.info(
                "llm %s (namespace %s): %s, %d attempt(s), %d+%d tokens, %.1f s",
                purpose,
                namespace,
                answer.model,
                attempt,
                prompt_tokens,
                completion_tokens,
                time.monotonic() - started,
            )
            return LLMResult(parsed, answer.raw, answer.model, prompt_tokens, completion_tokens, attempt)
        raise LLMOutputError(purpose, raws, problems)

    def _request(self, messages: list[Message], fmt: dict[str, Any], namespace: str) -> _Answer:
        """One chat completion (with the openai client's retries), charged to the
        namespace's budget: the estimate is reserved first (prompt at len/4 plus the
        full output allowance, the worst case), the real usage recorded after."""
        prompt_estimate = estimate_tokens("".join(m["content"] for m in messages))
        reservation = self.budget.reserve(namespace, prompt_estimate + self.settings.max_output_tokens)
        used = 0
        try:
            # The slot is held through the openai client's retry waits too: a rate-limited
            # endpoint should see this process slow down, not more requests from it.
            with self._slots:
                response = self._create(messages, fmt)
            answer = self._answer(response, prompt_estimate)
            used = answer.prompt_tokens + answer.completion_tokens
            return answer
        finally:
            self.budget.record(reservation, used)

    def _create(self, messages: list[Message], fmt: dict[str, Any]) -> Any:
        options: dict[str, Any] = {
            "model": self.model,
            "messages": messages,
            "response_format": fmt,
            self.settings.max_tokens_field: self.settings.max_output_tokens,
        }
        if self.settings.temperature is not None:
            options["temperature"] = self.settings.temperature
        where = f"LLM endpoint {self._base_url} (model {self.model!r})"
        try:
            return self._openai.chat.completions.create(**options)
        except openai.APIConnectionError as exc:  # timeouts included
            raise LLMUnavailable(f"{where} unreachable: {exc}") from exc
        except openai.APIStatusError as exc:
            status = exc.status_code
            if status in (408, 409, 429) or status >= 500:
                retry_after = _retry_after(exc.response.headers)
                raise LLMUnavailable(f"{where} unavailable ({status}): {exc.message}", retry_after=retry_after) from exc
            raise LLMRequestError(f"{where} refused the request ({status}): {exc.message}") from exc
        except openai.APIError as exc:
            raise LLMRequestError(f"{where} failed: {exc}") from exc
        except ValueError as exc:  # a 200 whose body is not JSON
            raise LLMRequestError(f"{where} answered with a body that is not JSON: {exc}") from exc

    def _answer(self, response: Any, prompt_estimate: int) -> _Answer:
        """The first choice's text and the usage. The openai client does not validate
        response bodies, and servers that only claim compatibility do omit fields:
        usage falls back to estimates, a missing choice is a request error."""
        choices = getattr(response, "choices", None)
        message = getattr(choices[0], "message", None) if choices else None
        if message is None:
            raise LLMRequestError(f"LLM endpoint {self._base_url} answered without a choice: {response!r:.300}")
        # A refusal comes without content; keep its text as the raw answer for operators.
        raw = message.content if message.content is not None else (getattr(message, "refusal", None) or "")
        usage = getattr(response, "usage", None)
        prompt_tokens = getattr(usage, "prompt_tokens", None)
        completion_tokens = getattr(usage, "completion_tokens", None)
        return _Answer(
            raw=raw,
            model=getattr(response, "model", None) or self.model,
            prompt_tokens=prompt_tokens if isinstance(prompt_tokens, int) else prompt_estimate,
            completion_tokens=completion_tokens if isinstance(completion_tokens, int) else estimate_tokens(raw),
            truncated=getattr(choices[0], "finish_reason", None) == "length",
        )


def _retry_after(headers: Mapping[str, str]) -> float | None:
    """Seconds from a Retry-After(-ms) header, for the worker's next attempt; HTTP
    dates are left to the worker's own backoff."""
    for header, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        value = headers.get(header)
        if value is None:
            continue
        try:
            seconds = float(value) * scale
        except ValueError:
            continue
        if seconds >= 0:
            return seconds
    return None
