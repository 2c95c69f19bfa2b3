"""Teacher-scoring schemas: POST /v1/namespaces/{ns}/distill/teacher_logprobs.

Per item, a continuation (the student's sampled token ids, or a text to tokenize)
and the context to score it under: given inline (text, chat messages, or token ids)
or named by reference (a step of a stored trajectory and a teacher, built by
…/distill/contexts). The answer: per continuation token, the teacher's log-prob of
that token, aligned one to one with the continuation's token ids.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from domain.schemas import ClientId, RequestModel, ResponseModel
from service.distill.contexts.schemas import TEACHER_NAME, TEMPLATE_NAME, LeakageOptions, TeacherSpec

MAX_TOKENS = 1_000_000  # per sequence: far above any model's context, a guard against absurd bodies
MAX_TOP_K = 100
TokenId = Annotated[int, Field(ge=0)]


def _exactly_one(model: RequestModel, names: tuple[str, ...], what: str) -> None:
    given = [name for name in names if getattr(model, name) is not None]
    if len(given) != 1:
        options = " or ".join(f"`{n}`" for n in names)
        got = f" (got {' and '.join(given)})" if given else ""
        raise ValueError(f"give exactly one of {options} for the {what}{got}")


class ChatTurn(RequestModel):
    """One chat message of a context sent inline (distill/contexts' `messages`)."""

    role: Literal["system", "user", "assistant"]
    content: str


class TeacherContinuation(RequestModel):
    """The student's sampled continuation: its token ids (scored as they are), or a
    text tokenized without special tokens."""

    token_ids: list[TokenId] | None = Field(None, min_length=1, max_length=MAX_TOKENS)
    text: str | None = Field(None, min_length=1)

    @model_validator(mode="after")
    def _one(self) -> TeacherContinuation:
        _exactly_one(self, ("token_ids", "text"), "continuation")
        return self


class TeacherPrompt(RequestModel):
    """A context given inline, as …/distill/contexts returns it (`text` or `messages`),
    or already as token ids. Text is tokenized with the tokenizer's special tokens (a
    BOS); messages are rendered by the endpoint's chat template with the generation
    prompt (openai_completions only)."""

    text: str | None = Field(None, min_length=1)
    messages: list[ChatTurn] | None = Field(None, min_length=1)
    token_ids: list[TokenId] | None = Field(None, min_length=1, max_length=MAX_TOKENS)

    @model_validator(mode="after")
    def _one(self) -> TeacherPrompt:
        _exactly_one(self, ("text", "messages", "token_ids"), "context")
        return self


class TeacherContextRef(RequestModel):
    """A context the service builds: step `step` of stored trajectory `trajectory_id`,
    under teacher `teacher` (a name of the request's `contexts.teachers`; null: the
    plain context), rendered as `rendering`."""

    trajectory_id: ClientId
    step: int = Field(ge=0, description="the step's index")
    teacher: str | None = Field(
        None, pattern=TEACHER_NAME, description="a key of contexts.teachers (TeacherSpec.key); null: the plain context"
    )
    rendering: Literal["text", "messages"] = Field(
        "text", description="which rendering of the context to score under (messages: openai_completions only)"
    )


class TeacherContextsOptions(RequestModel):
    """How referenced contexts are built: the body of …/distill/contexts, less the
    trajectories and steps (taken from the items)."""

    teachers: list[TeacherSpec] = Field(default_factory=list)
    snapshot: ClientId | None = None
    template: str = Field("default", pattern=TEMPLATE_NAME)
    leakage: LeakageOptions = Field(default_factory=LeakageOptions)
    history_max_chars: int = Field(16_000, ge=0, le=1_000_000)


class TeacherLogprobsItem(RequestModel):
    id: str | None = Field(None, max_length=200, description="echoed in the answer, for the trainer's bookkeeping")
    continuation: TeacherContinuation
    context: TeacherPrompt | None = Field(None, description="the context inline (or give `ref`)")
    ref: TeacherContextRef | None = Field(None, description="a context built by the service (or give `context`)")

    @model_validator(mode="after")
    def _one(self) -> TeacherLogprobsItem:
        _exactly_one(self, ("context", "ref"), "context of the continuation")
        return self


class TeacherLogprobsRequest(RequestModel):
    items: list[TeacherLogprobsItem] = Field(min_length=1)
    contexts: TeacherContextsOptions | None = Field(
        None, description="how items' `ref` contexts are built (needed once any item has a ref to a teacher)"
    )
    top_k: int = Field(0, ge=0, le=MAX_TOP_K, description="the teacher's k most likely tokens at each position")
    entropy: bool = Field(
        False, description="the teacher's entropy at each position (asks the endpoint for the whole distribution)"
    )


class TopLogprob(ResponseModel):
    token_id: int | None = Field(description="null: the endpoint named the token only by its text (echo mode)")
    token: str | None = Field(None, description="the token's text, where the endpoint gave only that")
    logprob: float


class ContextUsed(ResponseModel):
    """What a referenced context resolved to."""

    trajectory_id: str
    step: int
    teacher: str | None
    rendering: str
    applicable: bool = Field(description="false: the teacher had nothing to add; the plain context was scored")
    template_version: str


class ScoredItem(ResponseModel):
    index: int = Field(description="the item's position in the request")
    id: str | None = None
    token_ids: list[int] = Field(description="the continuation's tokens, as scored")
    logprobs: list[float] = Field(description="log π_teacher(token_ids[t] | context, token_ids[:t]), aligned")
    prompt_tokens: int = Field(description="tokens of the context the continuation was scored after")
    entropies: list[float] | None = Field(None, description="with `entropy`: the teacher's entropy at each position")
    top_k: list[list[TopLogprob]] | None = Field(None, description="with `top_k`: the k most likely, best first")
    context: ContextUsed | None = Field(None, description="for an item given by `ref`")
    endpoint_ms: float = Field(description="the duration of the endpoint call that scored this item")


class TeacherEndpointRead(ResponseModel):
    url: str = Field(description="the endpoint's root, without credentials")
    protocol: str
    model: str | None


class TeacherTiming(ResponseModel):
    total_ms: float = Field(description="this request, end to end on our side")
    endpoint_ms: float = Field(description="wall time during which a scoring call to the endpoint was in flight")
    tokenize_ms: float = Field(description="tokenizing contexts and continuations (file or endpoint)")
    contexts_ms: float = Field(description="building referenced contexts")
    requests: int = Field(description="scoring requests sent (each up to teacher.max_batch sequences)")
    retries: int = Field(description="requests repeated after a connection error, 429 or 5xx")


class TeacherLogprobsResponse(ResponseModel):
    endpoint: TeacherEndpointRead
    items: list[ScoredItem]
    timing: TeacherTiming
