"""The LLM reflectors: heuristics (ERL) kept in an ExpeL-style pool, skills (AWM /
SEED), rubrics (RubricEM / CRPO) and golden negatives (ReflectRL). See
docs/reflection.md.

They run only in worker processes with an LLM configured (`REFLEXA_LLM__BASE_URL`):
`service.container.make_worker` registers `make_handlers(...)` then, and only then
does the exemplar job queue their work (`triggers.queue_llm_reflection`).

Every handler reads in short read units, calls the LLM and the embedder with no
transaction open, and returns one write function that the worker runs with the
job's completion: an LLM failure writes nothing, and a job run again writes
nothing twice.
"""

from __future__ import annotations

from reflectors.llm import LLMClient
from reflectors.llm_reflectors.common import (
    GOLDEN_NEGATIVE_JOB,
    HEURISTICS_JOB,
    JOB_KINDS,
    RUBRICS_JOB,
    SKILLS_JOB,
)
from reflectors.llm_reflectors.heuristics import GoldenNegativeReflector, HeuristicsReflector
from reflectors.llm_reflectors.rubrics import RubricsReflector
from reflectors.llm_reflectors.skills import SkillsReflector
from reflectors.worker import Handler
from store.database import Database
from store.embedding.base import Embedder

__all__ = ["JOB_KINDS", "make_handlers"]


def make_handlers(db: Database, embedder: Embedder, llm: LLMClient) -> dict[str, Handler]:
    """Job kind -> handler, all sharing the process's one LLM client."""
    return {
        HEURISTICS_JOB: HeuristicsReflector(db, embedder, llm),
        SKILLS_JOB: SkillsReflector(db, embedder, llm),
        GOLDEN_NEGATIVE_JOB: GoldenNegativeReflector(db, embedder, llm),
        RUBRICS_JOB: RubricsReflector(db, embedder, llm),
    }
