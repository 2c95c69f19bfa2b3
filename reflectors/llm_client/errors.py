"""What can go wrong with an LLM call, sorted by what the job should do about it.

Transient (the worker retries the job later with backoff): the endpoint is down,
overloaded or slow (`LLMUnavailable`), or the namespace spent its daily token budget
(`LLMBudgetExceeded`). Both carry an optional `retry_after` in seconds, a hint the
worker may use instead of its own backoff.

Permanent (the job fails with the message kept for operators): the endpoint refused
the request (`LLMRequestError`: bad key, unknown model, unsupported parameter — a
retry would fail the same way), or the model did not produce usable output even after
one repair turn (`LLMOutputError`, which keeps the raw answers so an operator can see
what the model said and fix the prompt or pick another model).
"""

from __future__ import annotations

from collections.abc import Sequence

from reflectors.worker import TransientError

# How much of each raw answer an LLMOutputError message keeps: the worker stores the
# message on the job (up to 10,000 characters), two answers and their errors must fit.
RAW_ANSWER_CHARS = 3_000


class LLMError(Exception):
    """A permanent LLM failure: retrying the same job would fail the same way."""


class LLMRequestError(LLMError):
    """The endpoint refused the request (400, 401, 403, 404, 422) or answered with
    something that is not a chat completion."""


class LLMOutputError(LLMError):
    """The model's answer was not valid JSON for the schema, twice (first answer and
    the repair). `raw_answers` and `errors` hold both, in order."""

    def __init__(self, purpose: str, raw_answers: Sequence[str], errors: Sequence[str]) -> None:
        self.purpose = purpose
        self.raw_answers = list(raw_answers)
        self.errors = list(errors)
        parts = [f"LLM output for {purpose!r} unusable after {len(self.raw_answers)} attempts"]
        for number, (raw, error) in enumerate(zip(self.raw_answers, self.errors, strict=True), start=1):
            shown = raw if len(raw) <= RAW_ANSWER_CHARS else raw[:RAW_ANSWER_CHARS] + " …[truncated]"
            parts.append(f"attempt {number}: {error}\nraw answer: {shown}")
        super().__init__("\n".join(parts))


class LLMUnavailable(TransientError):
    """The endpoint could not answer now (rate limit, timeout, connection refused,
    5xx) after the openai client's own retries."""

    def __init__(self, message: str, *, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class LLMBudgetExceeded(TransientError):
    """The namespace has spent its token budget for the UTC day. Transient on
    purpose: the job waits (`retry_after` points at the next UTC midnight) rather
    than failing, so reflection resumes by itself when the budget renews."""

    def __init__(self, namespace: str, *, limit: int, spent: int, requested: int, retry_after: float) -> None:
        super().__init__(
            f"namespace {namespace!r} is over its LLM token budget for today: {spent} of {limit} tokens spent "
            f"or reserved, this call needs about {requested}; retry in {retry_after:.0f} s (next UTC day)"
        )
        self.namespace = namespace
        self.limit = limit
        self.spent = spent
        self.requested = requested
        self.retry_after = retry_after
