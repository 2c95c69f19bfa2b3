"""Reflection kinds and statuses, and the typed draft a reflector fills in for a
new reflection row."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal, get_args

Kind = Literal["exemplar", "heuristic", "skill", "rubric", "evidence_card"]
KINDS: tuple[Kind, ...] = get_args(Kind)
Status = Literal["candidate", "active", "retired"]
STATUSES: tuple[Status, ...] = get_args(Status)

# Kinds that describe a task rather than a state (evidence cards, rubrics): indexed
# by their task's text and matched against the query's task.
TASK_KEYED: frozenset[str] = frozenset({"evidence_card", "rubric"})


@dataclass(frozen=True)
class ReflectionDraft:
    """A reflection as a reflector wrote it, before it is a row: every column a new
    row needs, named and typed (the store fills the counters and timestamps)."""

    namespace: str
    id: str
    kind: Kind
    content: dict[str, Any]
    text: str
    reflector: str
    reflector_version: str
    status: Status = "candidate"
    environment: str | None = None
    task: str | None = None
    model: str | None = None
    # The dedup key of the job output that writes it (a re-run job finds it);
    # default: kind and id.
    source_key: str | None = field(default=None)

    def values(self) -> dict[str, Any]:
        """The column values of a new row (store.reflections.create_reflection)."""
        out = asdict(self)
        out["source_key"] = self.source_key or f"{self.kind}:{self.id}"
        return out
