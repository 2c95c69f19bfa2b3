"""Every setting in one place: environment variables `REFLEXA_…`, nested with `__`
(e.g. `REFLEXA_LIMITS__MAX_TEXT_CHARS`). Read through `get_settings()`; tests build
their own `Settings(...)` and hand it to `create_app`."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, SecretStr, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


# The LLM endpoint, mounted as `Settings.llm` (`REFLEXA_LLM__…`, e.g.
# `REFLEXA_LLM__BASE_URL=http://gpu-1:8000/v1`). Any OpenAI-compatible chat endpoint
# works (vLLM, Ollama, llama.cpp, OpenAI). With no `base_url` the LLM reflectors are
# off and the service runs on the offline ones only: the out-of-the-box default,
# since nothing may assume a model is reachable.
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


class Limits(BaseModel):
    """Input limits. Anything over them is refused with a 4xx naming the field."""

    max_body_bytes: int = Field(32 * 1024 * 1024, description="largest request body accepted (413 above)")
    max_text_chars: int = Field(
        1_048_576, description="longest text field (observation, result, task, internal state …)"
    )
    max_json_bytes: int = Field(
        262_144, description="largest structured JSON value (state data, action object, metadata)"
    )
    max_json_depth: int = Field(32, description="deepest nesting of a structured JSON value")
    max_steps_per_request: int = Field(10_000, description="most steps in one request (all items summed)")
    max_steps_per_trajectory: int = Field(100_000, description="most steps one trajectory may hold")
    max_batch_trajectories: int = Field(1_000, description="most trajectories in one batch request")
    max_rollout_tokens_per_step: int = Field(
        131_072, description="most entries of a step's rollout_logprobs and rollout_token_ids (tokens of its action)"
    )
    max_batch_retrievals: int = Field(256, description="most states in one POST …/retrieve/batch")
    max_context_steps: int = Field(
        20_000, description="most step contexts in one POST …/distill/contexts (trajectories × steps)"
    )
    max_advantage_tokens: int = Field(
        2_000_000, description="most tokens in one POST /v1/distill/advantages (all trajectories summed)"
    )
    max_advantage_group_size: int = Field(1_024, description="most trajectories in one group of …/advantages")
    max_page_size: int = Field(500, description="largest `limit` of a list request")
    requests_per_second_per_key: float = Field(
        1000.0, ge=0, description="sustained requests per second one key may send (0: no limit); see key_limits_scope"
    )
    request_burst_per_key: int = Field(2000, ge=1, description="requests one key may send at once above that rate")
    max_concurrent_requests_per_key: int = Field(
        64, ge=0, description="requests one key may have in flight in one process (0: no limit)"
    )
    key_limits_scope: Literal["auto", "process", "shared"] = Field(
        "auto",
        description="where a key's request-rate bucket lives: 'shared' in the database, drawn on by every API "
        "process (N replicas admit the rate in total), 'process' in each process; 'auto': shared on PostgreSQL",
    )
    body_timeout_seconds: float = Field(
        60.0, gt=0, description="the longest a client may take to send a request body (408 after)"
    )
    max_export_rows: int = Field(
        10_000_000, description="largest `limit` of GET …/export (without `limit` an export writes every row)"
    )


class EmbeddingSettings(BaseModel):
    backend: Literal["onnx", "torch", "openai", "hashing"] = Field(
        "onnx",
        description="onnx: the model on ONNX Runtime (default, exported offline on first start); torch: "
        "sentence-transformers; openai: an OpenAI-compatible /embeddings endpoint; hashing: no model (tests)",
    )
    model_path: str | None = Field(
        None, description="a sentence-transformers model directory; default: the packaged all-MiniLM-L6-v2"
    )
    threads: int = Field(1, ge=1, description="intra-op threads per encode (1 is best when cores are shared)")
    idle_threads: int = Field(
        2,
        ge=0,
        description="onnx: intra-op threads for an encode that finds the machine idle (no other encode running, "
        "no more runnable tasks than cores); a second session, ~110 MB; 0 or at most `threads`: off",
    )
    batch_size: int = Field(64, ge=1)
    cache_size: int = Field(100_000, ge=0, description="texts whose vectors are kept in memory (0: no cache)")
    openai_base_url: str | None = None
    openai_api_key: str | None = None
    openai_model: str | None = None
    openai_dim: int | None = None


class IndexSettings(BaseModel):
    sync_interval_ms: int = Field(
        100, ge=0, description="how stale a process's in-memory index may be before a retrieve catches it up"
    )
    snapshots: bool = Field(True, description="persist indexes under <data_dir>/indexes for fast restarts")


class WorkerSettings(BaseModel):
    in_process: bool = Field(True, description="`reflexa serve` runs a worker thread in the API process")
    # 2: the fast lane is encode-bound and ONNX Runtime releases the GIL, so two
    # jobs at once use both cores (searchable throughput 34 -> 62 items/s measured
    # by bench/retrieval on 2 cores; one intra-op thread each stays the better split).
    concurrency: int = Field(2, ge=1, description="jobs run at once per worker lane")
    starved_after_seconds: float = Field(
        5.0, gt=0, description="the last slot of a lane runs jobs due for longer than this first, oldest first"
    )
    lease_seconds: float = Field(300.0, gt=0, description="a claimed job returns to the queue after this")
    poll_interval_ms: int = Field(100, ge=1, description="how often an idle worker looks for jobs")
    express_slot: bool = Field(
        True,
        description="one more fast-lane slot that runs only jobs a reader waits on (its consistency token), "
        "so read-your-writes never waits for the batches the other slots have in flight",
    )


TeacherProtocol = Literal["openai_completions", "sglang", "trl_vllm"]


class TeacherSettings(BaseModel):
    """The teacher endpoint POST …/distill/teacher_logprobs scores continuations with
    (docs/trainers.md, "Teacher scoring"); off while `base_url` is unset."""

    base_url: str | None = Field(
        None,
        description="the teacher server's root, e.g. http://gpu-1:8000 (a trailing /v1 is dropped); unset: no "
        "teacher configured, the route answers 503",
    )
    protocol: TeacherProtocol = Field(
        "openai_completions",
        description="openai_completions: POST /v1/completions with token-id prompts (vLLM, and `trl vllm-serve` "
        "from TRL 1.16, which runs vLLM's own server); sglang: POST /generate with input_ids and return_logprob; "
        "trl_vllm: POST /get_sequence_logprobs/ of the `trl vllm-serve` of TRL 1.1 to 1.15",
    )
    logprobs_mode: Literal["prompt_logprobs", "echo"] = Field(
        "prompt_logprobs",
        description="openai_completions only: prompt_logprobs (vLLM's extension: per-token dicts by token id, top-k "
        "and full-vocabulary entropy possible) or echo (the OpenAI API's echo + logprobs, for other servers)",
    )
    model: str | None = Field(
        None, description="the model name sent with each request (openai_completions, /tokenize); unset: not sent"
    )
    api_key: SecretStr | None = Field(None, description="sent as `Authorization: Bearer …` when set")
    timeout_seconds: float = Field(60.0, gt=0, description="the longest wait for one answer (504 teacher_timeout)")
    connect_timeout_seconds: float = Field(5.0, gt=0, description="the longest wait for a connection")
    max_retries: int = Field(
        2, ge=0, description="retries of connection errors, 429 and 5xx, with exponential backoff (then 502)"
    )
    retry_backoff_seconds: float = Field(0.5, ge=0, description="the first retry's wait; doubled each time")
    max_batch: int = Field(16, ge=1, description="sequences sent in one request (1: one prompt per request)")
    max_concurrency: int = Field(4, ge=1, description="requests in flight at once per process")
    max_items: int = Field(1_000, ge=1, description="most items in one POST …/teacher_logprobs")
    tokenizer_file: str | None = Field(
        None,
        description="a Hugging Face tokenizer.json for texts; unset: the endpoint's /tokenize (openai_completions, "
        "sglang), which trl_vllm lacks",
    )
    vocab_size: int | None = Field(
        None, ge=1, description="the teacher's vocabulary size (default: the tokenizer file's), to check token ids"
    )

    @property
    def enabled(self) -> bool:
        return bool(self.base_url)


class UiSettings(BaseModel):
    """The operator web UI under /ui."""

    enabled: bool = Field(True, description="serve the operator UI under /ui")
    session_hours: float = Field(12.0, gt=0, description="a sign-in lasts this long (then sign in again)")
    page_size: int = Field(50, ge=1, le=500, description="rows per page of every list")
    review_min_uses: int = Field(5, ge=1, description="uses before an active item can be judged below baseline")
    review_renew_after: int = Field(10, ge=1, description="new uses before a kept item returns to the review queue")
    max_bulk_items: int = Field(100_000, ge=1, description="most reflections one bulk action changes")


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="REFLEXA_", env_nested_delimiter="__", extra="ignore", env_file=None)

    data_dir: Path = Field(Path("./reflexa-data"), description="where the embedded defaults keep their files")
    database_url: str | None = Field(
        None,
        description="sqlite:///path.db or postgresql+psycopg://user@host/db; default: SQLite at <data_dir>/reflexa.db",
    )
    db_pool_size: int = Field(10, description="connections per process (PostgreSQL)")
    sqlite_busy_timeout_ms: int = Field(30_000, description="how long a SQLite writer waits for the lock")
    admin_key: str | None = Field(
        None, description="admin API key; when unset one is generated on first start and printed once"
    )
    host: str = Field("127.0.0.1", description="`reflexa serve` bind address")
    port: int = Field(8080, description="`reflexa serve` port")
    check_schema: bool = Field(True, description="refuse to start on an out-of-date database schema")
    freeze_startup_objects: bool = Field(
        True,
        description="keep the objects built at start out of the garbage collector's full collections (gc.freeze): "
        "each then takes ~1 ms instead of ~100 ms, a pause every request in flight waits for",
    )
    gc_young_threshold: int | None = Field(
        10_000,
        ge=1,
        description="allocations between two collections of the garbage collector's youngest generation "
        "(gc.set_threshold's first value; the interpreter's default is 700): a 50-step append allocates a few "
        "thousand objects, all alive until it answers, so at 700 each request paid for several collections that "
        "walked them and freed nothing; 700 is the interpreter's own (None, in code: leave it as it is)",
    )
    limits: Limits = Field(default_factory=Limits)
    embedding: EmbeddingSettings = Field(default_factory=EmbeddingSettings)
    index: IndexSettings = Field(default_factory=IndexSettings)
    worker: WorkerSettings = Field(default_factory=WorkerSettings)
    llm: LLMSettings = Field(
        default_factory=LLMSettings, description="an OpenAI-compatible endpoint for LLM reflectors (off when unset)"
    )
    ui: UiSettings = Field(default_factory=UiSettings)
    teacher: TeacherSettings = Field(
        default_factory=TeacherSettings, description="the teacher endpoint of …/teacher_logprobs (off when unset)"
    )

    @property
    def resolved_database_url(self) -> str:
        if self.database_url:
            return self.database_url
        return f"sqlite:///{(self.data_dir / 'reflexa.db').resolve()}"


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return Settings()
