"""Settings of the LLM reflectors, mounted as `Settings.llm` (environment variables
`REFLEXA_LLM__…`, e.g. `REFLEXA_LLM__BASE_URL=http://gpu-1:8000/v1`).

Any OpenAI-compatible chat endpoint works (vLLM, Ollama, llama.cpp, OpenAI). With no
`base_url` the LLM reflectors are off and the service runs on the offline ones only:
that is the out-of-the-box default, since nothing may assume a model is reachable.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field, SecretStr, model_validator


class LLMSettings(BaseModel):
    """One LLM endpoint per process; every reflector that needs a model shares it."""

    base_url: str | None = Field(
        None,
        description="OpenAI-compatible API root, e.g. http://localhost:8000/v1 (vLLM) or "
        "http://localhost:11434/v1 (Ollama); unset: no LLM configured, LLM reflectors are off",
    )
    api_key: SecretStr = Field(
        SecretStr("not-needed"),
        description="bearer key for the endpoint; local servers ignore it, but the openai client needs one",
    )
    model: str | None = Field(None, description="model name sent with every request (required once base_url is set)")
    timeout_seconds: float = Field(60.0, gt=0, description="per-request timeout, connect and read")
    max_retries: int = Field(
        2,
        ge=0,
        description="the openai client's own retries of 408/409/429/5xx, timeouts and connection errors "
        "(honouring Retry-After) before a job gives up and is retried later by the worker with backoff",
    )
    max_concurrency: int = Field(
        4, ge=1, description="requests in flight at once per process; the rest wait (protects a small GPU server)"
    )
    temperature: float | None = Field(
        0.2,
        ge=0.0,
        le=2.0,
        description="sampling temperature: low, since reflection is extraction, not creative writing; "
        "null: not sent (for models that accept only their default, e.g. OpenAI reasoning models)",
    )
    max_output_tokens: int = Field(1024, ge=1, description="most tokens one answer may have")
    max_tokens_field: Literal["max_tokens", "max_completion_tokens"] = Field(
        "max_tokens",
        description="request field carrying max_output_tokens: max_tokens is understood by every compatible "
        "server; OpenAI reasoning models accept only max_completion_tokens",
    )
    token_budget_per_namespace_per_day: int = Field(
        2_000_000,
        ge=0,
        description="prompt + completion tokens one namespace may spend per UTC day; 0: unlimited. Over it, "
        "LLM jobs wait for the next day instead of failing",
    )
    use_json_schema: bool = Field(
        True,
        description="true: ask for structured output with response_format json_schema (strict); false: "
        "response_format json_object, for servers without json_schema support (e.g. older llama.cpp). "
        "Either way the answer is validated and repaired once",
    )

    @model_validator(mode="after")
    def _model_named_when_enabled(self) -> LLMSettings:
        """Fail at start-up, not at the first job, when an endpoint is given without a model."""
        if self.base_url and not self.model:
            raise ValueError("llm.model is required when llm.base_url is set")
        return self

    @property
    def enabled(self) -> bool:
        """Whether an LLM is configured, i.e. whether LLM reflectors should run."""
        return bool(self.base_url)
