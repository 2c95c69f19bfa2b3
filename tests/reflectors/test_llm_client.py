"""LLMClient against a real OpenAI-compatible HTTP server (the scripted one), through
the real openai client: parsing and validation, the repair turn, error mapping after
the client's own retries, the strict response format, budgets and concurrency."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from pydantic import ValidationError

from reflectors.llm_client import (
    InMemoryTokenBudget,
    LLMBudgetExceeded,
    LLMClient,
    LLMOutputError,
    LLMRequestError,
    LLMSettings,
    LLMUnavailable,
    strict_json_schema,
)
from reflectors.llm_client.schemas import HeuristicsOut, RubricOut
from reflectors.worker import TransientError
from tests.reflectors.openai_server import Answer, HttpError, ScriptedLLM, Stall, json_answer

NS = "ns-test"
MESSAGES = [
    {"role": "system", "content": "You reflect on attempts."},
    {"role": "user", "content": "Task: open the door. Steps: [0] …"},
]
HEURISTICS = {
    "heuristics": [
        {
            "trigger": "A door is locked and a key is visible in the room.",
            "guideline": "Pick up the key before trying the door again.",
            "rationale": "At step 2 the agent tried the locked door three times.",
            "polarity": "do",
            "evidence_steps": [1, 2],
        }
    ]
}
RUBRIC = {
    "criteria": [
        {"text": "The final answer names the right room.", "weight": 0.7, "rationale": "A and C did.", "check": None},
        {
            "text": "The agent never calls delete_file.",
            "weight": 0.3,
            "rationale": "B deleted a file and failed.",
            "check": {"type": "tool_called", "tool": "delete_file", "min_times": 0, "max_times": 0},
        },
    ]
}


MakeClient = Callable[..., LLMClient]


@pytest.fixture
def make_client(scripted_llm: ScriptedLLM) -> Iterator[MakeClient]:
    """Build clients against the scripted server (test settings plus overrides);
    they are closed before the server stops."""
    clients: list[LLMClient] = []

    def make(budget: InMemoryTokenBudget | None = None, **overrides: Any) -> LLMClient:
        values: dict[str, Any] = {
            "base_url": scripted_llm.url,
            "model": "reflector-model",
            "api_key": "sk-test",
            "timeout_seconds": 5.0,
            "max_retries": 0,
            "max_output_tokens": 256,
        }
        clients.append(LLMClient(LLMSettings(**(values | overrides)), budget=budget))
        return clients[-1]

    yield make
    for client in clients:
        client.close()


def complete(client: LLMClient, model: type = HeuristicsOut, **options: Any) -> Any:
    return client.complete_json(MESSAGES, model, namespace=NS, purpose="test.v1", **options)


def test_valid_json_is_parsed_and_validated(scripted_llm: ScriptedLLM, make_client: MakeClient) -> None:
    scripted_llm.script(json_answer(HEURISTICS, model="served-model", prompt_tokens=120, completion_tokens=40))
    result = complete(make_client())
    assert isinstance(result.parsed, HeuristicsOut)
    assert result.parsed.heuristics[0].polarity == "do"
    assert result.model == "served-model"
    assert (result.prompt_tokens, result.completion_tokens, result.total_tokens, result.attempts) == (120, 40, 160, 1)
    [request] = scripted_llm.requests
    assert request.model == "reflector-model"
    assert request.body["temperature"] == 0.2 and request.body["max_tokens"] == 256
    assert request.headers["authorization"] == "Bearer sk-test"
    # The caller's messages go out unchanged, the format instruction appended to the system message.
    assert request.messages[1] == MESSAGES[1]
    assert request.messages[0]["content"].startswith(MESSAGES[0]["content"])
    assert '"evidence_steps"' in request.messages[0]["content"]


def test_response_format_carries_the_strict_json_schema(scripted_llm: ScriptedLLM, make_client: MakeClient) -> None:
    scripted_llm.script(json_answer(HEURISTICS))
    complete(make_client())
    assert scripted_llm.requests[0].response_format == {
        "type": "json_schema",
        "json_schema": {"name": "HeuristicsOut", "schema": strict_json_schema(HeuristicsOut), "strict": True},
    }


def test_json_object_mode_for_servers_without_json_schema(scripted_llm: ScriptedLLM, make_client: MakeClient) -> None:
    scripted_llm.script(json_answer(HEURISTICS))
    complete(make_client(use_json_schema=False, temperature=None, max_tokens_field="max_completion_tokens"))
    [request] = scripted_llm.requests
    assert request.response_format == {"type": "json_object"}
    assert "temperature" not in request.body and "max_tokens" not in request.body
    assert request.body["max_completion_tokens"] == 256
    assert "JSON Schema" in request.messages[0]["content"]  # the model still learns the shape


def test_malformed_json_is_repaired_on_the_second_attempt(scripted_llm: ScriptedLLM, make_client: MakeClient) -> None:
    broken = '{"heuristics": [{"trigger": "A door is locked'
    scripted_llm.script(
        Answer(broken, prompt_tokens=100, completion_tokens=10),
        json_answer(HEURISTICS, prompt_tokens=130, completion_tokens=40),
    )
    result = complete(make_client())
    assert result.attempts == 2
    assert (result.prompt_tokens, result.completion_tokens) == (230, 50)
    first, repair = scripted_llm.requests
    assert repair.messages[: len(first.messages)] == first.messages
    assistant, correction = repair.messages[len(first.messages) :]
    assert assistant == {"role": "assistant", "content": broken}
    assert correction["role"] == "user"
    assert "not valid JSON" in correction["content"] and "Unterminated string" in correction["content"]
    assert "corrected, complete JSON object only" in correction["content"]


def test_a_code_fence_around_the_json_is_tolerated(scripted_llm: ScriptedLLM, make_client: MakeClient) -> None:
    scripted_llm.script(Answer("```json\n" + json_answer(HEURISTICS).content + "\n```"))
    assert complete(make_client()).attempts == 1


def test_schema_violation_is_repaired_with_the_validation_error(
    scripted_llm: ScriptedLLM, make_client: MakeClient
) -> None:
    bad = {"criteria": [dict(RUBRIC["criteria"][0], weight=3.0), RUBRIC["criteria"][1]]}
    scripted_llm.script(json_answer(bad), json_answer(RUBRIC))
    result = complete(make_client(), RubricOut)
    assert result.attempts == 2
    assert [c.weight for c in result.parsed.criteria] == pytest.approx([0.7, 0.3])
    correction = scripted_llm.requests[1].messages[-1]["content"]
    assert "criteria.0.weight: Input should be less than or equal to 1 (got 3.0)" in correction


def test_validation_context_reaches_the_validators(scripted_llm: ScriptedLLM, make_client: MakeClient) -> None:
    scripted_llm.script(json_answer(HEURISTICS), json_answer(HEURISTICS))
    with pytest.raises(LLMOutputError) as caught:
        complete(make_client(), context={"step_indexes": [0, 1]})
    assert "steps [2] are not in the trajectory" in scripted_llm.requests[1].messages[-1]["content"]
    assert "steps [2] are not in the trajectory" in caught.value.errors[1]


def test_malformed_twice_fails_permanently_with_both_raw_answers(
    scripted_llm: ScriptedLLM, make_client: MakeClient
) -> None:
    scripted_llm.script(Answer("Sure! Here are some heuristics: …"), Answer('{"heuristics": []}'))
    with pytest.raises(LLMOutputError) as caught:
        complete(make_client())
    error = caught.value
    assert not isinstance(error, TransientError)
    assert error.raw_answers == ["Sure! Here are some heuristics: …", '{"heuristics": []}']
    assert "not valid JSON" in error.errors[0] and "heuristics: List should have at least 1 item" in error.errors[1]
    message = str(error)  # what the worker keeps on the failed job
    assert "Sure! Here are some heuristics" in message and '{"heuristics": []}' in message and "test.v1" in message


def test_a_cut_off_answer_is_asked_to_be_shorter(scripted_llm: ScriptedLLM, make_client: MakeClient) -> None:
    scripted_llm.script(Answer('{"heuristics": [', finish_reason="length"), json_answer(HEURISTICS))
    complete(make_client())
    assert "cut off at the output length limit" in scripted_llm.requests[1].messages[-1]["content"]


def test_rate_limit_then_success_honours_retry_after(scripted_llm: ScriptedLLM, make_client: MakeClient) -> None:
    scripted_llm.script(HttpError(429, "slow down", retry_after=0.8), json_answer(HEURISTICS))
    started = time.monotonic()
    result = complete(make_client(max_retries=2))
    assert time.monotonic() - started >= 0.8  # the client's own backoff would be at most 0.5 s
    assert result.attempts == 1 and len(scripted_llm.requests) == 2


def test_rate_limit_beyond_the_clients_patience_is_transient_with_the_hint(
    scripted_llm: ScriptedLLM, make_client: MakeClient
) -> None:
    scripted_llm.script(HttpError(429, "quota", retry_after=600))  # over 2 min: the openai client does not wait
    with pytest.raises(LLMUnavailable) as caught:
        complete(make_client(max_retries=2))
    assert caught.value.retry_after == 600
    assert "429" in str(caught.value) and len(scripted_llm.requests) == 1


def test_timeouts_become_unavailable_after_the_clients_retries(
    scripted_llm: ScriptedLLM, make_client: MakeClient
) -> None:
    scripted_llm.script(Stall(2.0), Stall(2.0))
    started = time.monotonic()
    with pytest.raises(LLMUnavailable, match="unreachable"):
        complete(make_client(timeout_seconds=0.5, max_retries=1))
    assert len(scripted_llm.requests) == 2
    assert time.monotonic() - started < 3.5  # gave up on each stall instead of waiting out 2 x 2 s


def test_a_5xx_storm_becomes_unavailable(scripted_llm: ScriptedLLM, make_client: MakeClient) -> None:
    scripted_llm.script(HttpError(500, retry_after=0.01), HttpError(503, retry_after=0.01), HttpError(502))
    with pytest.raises(LLMUnavailable) as caught:
        complete(make_client(max_retries=2))
    assert isinstance(caught.value, TransientError)
    assert "(502)" in str(caught.value) and len(scripted_llm.requests) == 3


def test_bad_request_is_permanent_and_not_retried(scripted_llm: ScriptedLLM, make_client: MakeClient) -> None:
    scripted_llm.script(HttpError(400, "response_format json_schema is not supported"))
    with pytest.raises(LLMRequestError, match="json_schema is not supported") as caught:
        complete(make_client(max_retries=2))
    assert not isinstance(caught.value, TransientError)
    assert len(scripted_llm.requests) == 1


def test_over_budget_sends_nothing(scripted_llm: ScriptedLLM, make_client: MakeClient) -> None:
    clock = datetime(2025, 3, 1, 18, 0, tzinfo=UTC)
    budget = InMemoryTokenBudget(500, clock=lambda: clock)
    with pytest.raises(LLMBudgetExceeded) as caught:
        complete(make_client(budget=budget, max_output_tokens=1024))
    assert isinstance(caught.value, TransientError)
    assert caught.value.retry_after == 6 * 3600  # the next UTC day
    assert scripted_llm.requests == []
    assert budget.spent_today(NS) == 0


def test_usage_is_recorded_into_the_budget(scripted_llm: ScriptedLLM, make_client: MakeClient) -> None:
    budget = InMemoryTokenBudget(100_000)
    scripted_llm.script(
        Answer("not json", prompt_tokens=300, completion_tokens=5),
        json_answer(HEURISTICS, prompt_tokens=350, completion_tokens=60),
        json_answer(HEURISTICS, usage=False),
    )
    client = make_client(budget=budget)
    complete(client)
    assert budget.spent_today(NS) == 300 + 5 + 350 + 60
    without_usage = complete(client)  # a server that reports no usage is charged the estimates
    assert without_usage.prompt_tokens > 0 and without_usage.completion_tokens > 0
    assert budget.spent_today(NS) == 715 + without_usage.total_tokens
    assert budget.spent_today("other-namespace") == 0


def test_concurrency_is_limited_per_client(scripted_llm: ScriptedLLM, make_client: MakeClient) -> None:
    scripted_llm.script(*[json_answer(HEURISTICS, delay=0.2) for _ in range(8)])
    client = make_client(max_concurrency=2)
    results: list[Any] = []
    threads = [threading.Thread(target=lambda: results.append(complete(client))) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert len(results) == 8
    assert scripted_llm.max_in_flight == 2


def test_settings_need_a_model_once_an_endpoint_is_set() -> None:
    assert not LLMSettings().enabled
    with pytest.raises(ValidationError, match="llm.model is required"):
        LLMSettings(base_url="http://127.0.0.1:1/v1")
    with pytest.raises(ValueError, match="no LLM configured"):
        LLMClient(LLMSettings())
    assert "sk-secret" not in repr(LLMSettings(base_url="http://x/v1", model="m", api_key="sk-secret"))
