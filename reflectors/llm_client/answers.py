"""The JSON side of a structured LLM call: the format instruction added to the
prompt, turning an answer into a validated model, and the repair message sent when
that fails.

The schema travels in the prompt as well as in `response_format` because the servers
that enforce it by constrained decoding (vLLM, llama.cpp) restrict which tokens the
model may emit but never show it the schema: without the instruction the model does
not know what the fields mean, only which characters are allowed.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from reflectors.llm_client.json_schema import strict_json_schema

Message = dict[str, str]
"""A chat message: {"role": "system" | "user" | "assistant", "content": str}."""

T = TypeVar("T", bound=BaseModel)

_FENCED = re.compile(r"^```[a-zA-Z]*\s*\n(.*?)\n?```$", re.DOTALL)
_SHOWN_INPUT_CHARS = 80


class AnswerError(ValueError):
    """An answer that is not valid JSON for the schema; the message is written for
    the model to read in the repair turn."""


def with_format_instruction(messages: Sequence[Message], model: type[BaseModel]) -> list[Message]:
    """`messages` with the JSON format instruction and schema appended to the system
    message (one is added first when there is none). The caller's list is not changed."""
    schema = json.dumps(strict_json_schema(model), separators=(",", ":"), ensure_ascii=False)
    instruction = (
        "Answer with one JSON object and nothing else: no prose before or after it, no code fences. "
        f"It must match this JSON Schema:\n{schema}"
    )
    out = [dict(m) for m in messages]
    if out and out[0]["role"] == "system":
        out[0]["content"] = f"{out[0]['content'].rstrip()}\n\n{instruction}"
    else:
        out.insert(0, {"role": "system", "content": instruction})
    return out


def parse_answer(raw: str, model: type[T], context: Mapping[str, Any] | None = None) -> T:
    """Validate `raw` as `model`. A single Markdown code fence around the JSON is
    tolerated (models add one even when told not to); anything else that is not the
    JSON object raises AnswerError. `context` reaches the model's validators."""
    text = raw.strip()
    fenced = _FENCED.match(text)
    if fenced:
        text = fenced.group(1).strip()
    if not text:
        raise AnswerError("the answer was empty")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise AnswerError(f"the answer is not valid JSON: {exc}") from exc
    try:
        return model.model_validate(data, context=dict(context) if context is not None else None)
    except ValidationError as exc:
        raise AnswerError(describe_validation_error(exc)) from exc


def describe_validation_error(exc: ValidationError) -> str:
    """One line per problem, `path: message (got value)`: short enough to fit the
    repair turn and the job's error record, precise enough to fix."""
    lines = ["the JSON does not match the schema:"]
    for error in exc.errors(include_url=False):
        path = ".".join(str(part) for part in error["loc"]) or "(top level)"
        message = error["msg"]
        if error["type"] not in ("missing", "value_error", "assertion_error"):
            shown = json.dumps(error.get("input"), ensure_ascii=False, default=str)
            if len(shown) > _SHOWN_INPUT_CHARS:
                shown = shown[:_SHOWN_INPUT_CHARS] + "…"
            message += f" (got {shown})"
        lines.append(f"- {path}: {message}")
    return "\n".join(lines)


def repair_messages(conversation: Sequence[Message], raw: str, problem: str, *, truncated: bool) -> list[Message]:
    """The conversation extended with the model's bad answer and a request to fix it.
    Keeping the bad answer in context lets the model correct it rather than start over."""
    request = f"Your answer could not be used because {problem}\n\n"
    if truncated:
        request += "Your answer was cut off at the output length limit: keep every text field shorter.\n\n"
    request += (
        "Reply with the corrected, complete JSON object only (the whole object, not just the fixed part), "
        "matching the schema, with no prose and no code fences."
    )
    return [*conversation, {"role": "assistant", "content": raw}, {"role": "user", "content": request}]
