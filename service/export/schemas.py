"""What GET …/export accepts, and the fixed shape of each dataset's rows.

One row shape per dataset, written once as an Arrow schema: parquet files carry
it exactly, and JSON lines carry the same keys in the same order. Fields whose
value is free-form JSON (state data, a tool-call action, metadata) are Arrow's
JSON type in parquet (a UTF-8 column with the Parquet JSON logical type, which
`datasets` decodes back to objects) and plain JSON values in JSON lines.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

import pyarrow as pa
from pydantic import BaseModel, ConfigDict, Field

from domain.contexts.plain import DEFAULT_HISTORY_MAX_CHARS
from domain.schemas import ID_PATTERN

Dataset = Literal["trajectories", "sft", "preferences", "attempts"]
ExportFormat = Literal["jsonl", "parquet"]
# How an SFT prompt is built: `plain` is the task and what the agent saw (the plain
# context of domain.contexts.plain, the distill contexts' own); the others are the
# teacher contexts of POST …/distill/contexts (built by service/distill for the
# stored trajectory, its template and leakage guards).
SftContext = Literal["plain", "memory", "evidence_card", "attempt_summary"]

MEDIA_TYPES: dict[str, str] = {"jsonl": "application/x-ndjson", "parquet": "application/vnd.apache.parquet"}


class ExportQuery(BaseModel):
    """The query parameters of GET …/export (unknown ones are refused)."""

    model_config = ConfigDict(extra="forbid")

    dataset: Dataset = Field(
        description="trajectories: one row per trajectory with its steps; sft: chat `messages` per step of "
        "successful trajectories; preferences: chosen/rejected actions at matched states; attempts: "
        "(first attempt, reflection, next attempt) triples"
    )
    format: ExportFormat = Field("jsonl", description="jsonl (application/x-ndjson) or parquet")
    environment: str | None = None
    agent: str | None = None
    policy_version: str | None = None
    group_id: str | None = None
    task: str | None = Field(None, description="exact task text")
    task_contains: str | None = Field(
        None, min_length=1, max_length=2000, description="a part of the task text, in any case (% and _ are literal)"
    )
    success: bool | None = Field(
        None, description="trajectories and attempts (the next attempt's) only: sft and preferences select by outcome"
    )
    created_after: datetime | None = Field(None, description="trajectories created at or after (with a timezone)")
    created_before: datetime | None = Field(None, description="trajectories created before (with a timezone)")
    limit: int | None = Field(
        None, ge=1, description="most rows to write (default: every row); at most limits.max_export_rows"
    )
    snapshot: str | None = Field(
        None, pattern=ID_PATTERN, description="export as of this snapshot: the same bytes every time"
    )
    context: SftContext = Field(
        "plain",
        description="sft: how the prompt is built: plain (the task and what the agent saw), or the teacher "
        "context of that name from POST …/distill/contexts (memory, evidence_card, attempt_summary)",
    )
    history: int | None = Field(
        None,
        ge=0,
        le=1_000_000,
        description="sft: most earlier steps shown in the prompt (default: any number), the contexts' history_steps",
    )
    history_max_chars: int = Field(
        DEFAULT_HISTORY_MAX_CHARS,
        ge=0,
        le=1_000_000,
        description="sft: most characters of earlier steps' turns shown in the prompt, oldest dropped first "
        "(the contexts' history_max_chars)",
    )
    max_pairs_per_state: int = Field(4, ge=1, le=64, description="preferences: most pairs from one matched state")
    hints: bool = Field(
        False, description="preferences: put the matching heuristic's text (`hint`) into the system message"
    )


# -- row shapes -------------------------------------------------------------------

JSON = pa.json_()
TIMESTAMP = pa.timestamp("us", tz="UTC")
MESSAGES = pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())]))

STEP = pa.struct(
    [
        ("index", pa.int32()),
        ("observation", pa.string()),
        ("state_data", JSON),
        ("internal_state", pa.string()),
        ("action", JSON),
        ("result", pa.string()),
        ("error", pa.string()),
        ("reward", pa.float64()),
        ("done", pa.bool_()),
        ("truncated", pa.bool_()),
        ("caused_failure", pa.bool_()),
        # The step's own policy version (null: the trajectory's applies) and what the
        # inference engine reported for its action tokens (null when not recorded).
        ("policy_version", pa.string()),
        ("rollout_logprobs", pa.list_(pa.float64())),
        ("rollout_token_ids", pa.list_(pa.int32())),
    ]
)

ATTEMPT = pa.struct(
    [
        ("id", pa.string()),
        ("attempt", pa.int32()),
        ("success", pa.bool_()),
        ("reward", pa.float64()),
        ("failure_reason", pa.string()),
        ("step_count", pa.int32()),
        ("summary", pa.string()),
        ("messages", MESSAGES),
    ]
)

SCHEMAS: dict[str, pa.Schema] = {
    "trajectories": pa.schema(
        [
            ("id", pa.string()),
            ("task", pa.string()),
            ("environment", pa.string()),
            ("agent", pa.string()),
            ("policy_version", pa.string()),
            ("group_id", pa.string()),
            ("parent_trajectory_id", pa.string()),
            ("attempt", pa.int32()),
            ("status", pa.string()),
            ("success", pa.bool_()),
            ("reward", pa.float64()),
            ("failure_reason", pa.string()),
            ("metadata", JSON),
            ("created_at", TIMESTAMP),
            ("closed_at", TIMESTAMP),
            ("step_count", pa.int32()),
            ("steps", pa.list_(STEP)),
        ]
    ),
    "sft": pa.schema(
        [
            ("messages", MESSAGES),
            ("trajectory_id", pa.string()),
            ("step", pa.int32()),
            # What the prompt holds: "plain", or the teacher context's kind when it
            # applied; template_version is null for this export's own plain prompt and
            # the distill template's name@version for every prompt built there.
            ("context", pa.string()),
            ("template_version", pa.string()),
            ("item_ids", pa.list_(pa.string())),
        ]
    ),
    "preferences": pa.schema(
        [
            ("prompt", MESSAGES),
            ("chosen", MESSAGES),
            ("rejected", MESSAGES),
            ("state", pa.struct([("observation", pa.string()), ("data", JSON)])),
            ("chosen_trajectory_id", pa.string()),
            ("chosen_step", pa.int32()),
            ("rejected_trajectory_id", pa.string()),
            ("rejected_step", pa.int32()),
            ("hint", pa.string()),
            ("hint_id", pa.string()),
        ]
    ),
    "attempts": pa.schema(
        [
            ("task", pa.string()),
            ("first", ATTEMPT),
            ("reflection", pa.string()),
            ("next", ATTEMPT),
            ("improved", pa.bool_()),
        ]
    ),
}

# Rows per parquet row group: a whole trajectory is a heavy row, a chat turn a light one.
ROW_GROUP_ROWS: dict[str, int] = {"trajectories": 100, "sft": 1000, "preferences": 1000, "attempts": 100}
