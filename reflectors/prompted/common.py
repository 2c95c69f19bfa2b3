"""What the LLM reflectors share: reflector names, loading a closed
trajectory and its namespace settings in one short read, showing its steps to a
prompt, and deterministic ids."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

from domain.settings import LLMReflectionSettings, NamespaceSettings
from domain.steps import step_mapping
from reflectors.prompts.steps import render_steps
from service.namespaces.stored import read_settings
from store.database import Database
from store.models import Trajectory
from store.trajectory_reader import StoredStep, read_step_records

HEURISTICS_NAME = "llm_heuristics"
SKILLS_NAME = "llm_skills"
GOLDEN_NEGATIVE_NAME = "llm_golden_negative"
RUBRICS_NAME = "llm_rubrics"
# The heuristic pool the LLM reflectors maintain: both write into it and compare
# against it. Offline (contrastive) heuristics are recounted from statistics and
# stay out of it, so an LLM never rewrites a counted rule.
HEURISTIC_POOL = (HEURISTICS_NAME, GOLDEN_NEGATIVE_NAME)

POOL_LIMIT = 5_000  # newest pool items compared against (brute-force cosine)


def stable_id(prefix: str, *parts: str | None) -> str:
    """A deterministic id from the parts (a re-run job writes the same id)."""
    key = "\x00".join("" if p is None else p for p in parts)
    return prefix + hashlib.sha256(key.encode()).hexdigest()[:28]


def normalise(text: str) -> str:
    """Case, spacing and trailing punctuation do not make a different item."""
    return " ".join(text.lower().split()).rstrip(" .!;:")


@dataclass
class Source:
    """A closed trajectory as a per-trajectory LLM job reads it."""

    trajectory: Trajectory
    steps: list[StoredStep]
    settings: NamespaceSettings

    @property
    def llm(self) -> LLMReflectionSettings:
        return self.settings.reflection.llm


def load_source(db: Database, trajectory_pk: int, reflector: str) -> Source | None:
    """The trajectory, its steps and its namespace's settings; None when there is
    nothing to do (deleted since, no steps, or the reflector was switched off)."""
    with db.read() as session:
        traj = session.get(Trajectory, trajectory_pk)
        if traj is None:
            return None
        settings = read_settings(session, traj.namespace)
        cfg = settings.reflection.llm
        if not cfg.enabled or reflector not in cfg.reflectors:
            return None
        steps = read_step_records(session, traj.namespace, None, [traj.pk], StoredStep)[traj.pk]
    if not steps:
        return None
    return Source(traj, steps, settings)


def show_steps(steps: Sequence[StoredStep], limit: int, *, max_field_chars: int = 1_500) -> tuple[list[int], str]:
    """The `{steps}` text of a prompt and the indexes it shows (what an answer may
    cite). Past `limit` steps, the first quarter and the rest from the end are shown
    with a marker between: the end of an attempt is where failures show."""
    if len(steps) <= limit:
        shown = list(steps)
        return [s.index for s in shown], render_steps([step_mapping(s) for s in shown], max_field_chars=max_field_chars)
    head = steps[: max(1, limit // 4)]
    tail = steps[len(steps) - (limit - len(head)) :]
    omitted = len(steps) - len(head) - len(tail)
    text = (
        render_steps([step_mapping(s) for s in head], max_field_chars=max_field_chars)
        + f"\n\n(… {omitted} steps omitted …)\n\n"
        + render_steps([step_mapping(s) for s in tail], max_field_chars=max_field_chars)
    )
    return [s.index for s in (*head, *tail)], text


def is_expert(traj: Trajectory) -> bool:
    """The expert marker: `metadata.expert == true`."""
    return isinstance(traj.metadata_, dict) and traj.metadata_.get("expert") is True
