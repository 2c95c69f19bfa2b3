"""Scoring a trajectory with a rubric: rule criteria through the rule engine
(service/rubrics/checks.py), judged ones from the verdicts of an LLM judge, combined
into the weighted reward, whole and per stage (RubricEM). Pure: no I/O; the judge
is reached through the `RubricJudge` protocol, and what it is asked is planned
here (`judge_tasks`).

The reward is the weighted mean of the criteria's scores, sum(w * s) / sum(w),
over the criteria that were scored (a skipped one counts in neither sum); rules
score 1 (pass) or 0 (fail), a judge anything in [0, 1]. None when nothing with a
positive weight was scored.

Stages: a step's `metadata.stage` names the stage it belongs to. A criterion with
a `stage` is scored on that stage's steps only (its final answer is the stage's
last action), and scores 0 when the trajectory has no step of that stage (the
stage was never reached). Criteria without a stage are scored on the whole
trajectory. Per stage, in the order stages first appear (then stages only
criteria name): its own criteria, plus every stage-less *rule* criterion scored on
the stage's steps as well (a view only: it does not change the reward); judged
stage-less criteria are judged once, on the whole trajectory.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Literal, Protocol

from service.rubrics.checks import Episode, evaluate
from service.rubrics.content import Criterion

Method = Literal["rule", "llm", "skipped"]


@dataclass(frozen=True)
class Verdict:
    """A judge's score of one criterion, in [0, 1], and why."""

    score: float
    rationale: str


@dataclass(frozen=True)
class JudgeTask:
    """The judged criteria of one trajectory (stage None) or of one of its stages,
    with the steps they are judged on."""

    stage: str | None
    criteria: tuple[Criterion, ...]
    episode: Episode


class RubricJudge(Protocol):
    """Judges criteria that no rule decides (an LLM). Raises domain errors
    (`Unavailable`) when it cannot answer."""

    def judge(self, namespace: str, tasks: Sequence[JudgeTask]) -> list[dict[str, Verdict]]:
        """One mapping criterion id -> verdict per task, in order."""
        ...


@dataclass(frozen=True)
class CriterionScore:
    id: str
    score: float | None  # None: skipped
    weight: float
    method: Method
    rationale: str | None
    stage: str | None = None


@dataclass(frozen=True)
class StageScore:
    stage: str
    steps: tuple[int, ...]  # the indexes of its steps
    reward: float | None
    criteria: tuple[CriterionScore, ...]


@dataclass(frozen=True)
class RubricScore:
    reward: float | None
    criteria: tuple[CriterionScore, ...]
    stages: tuple[StageScore, ...]


Verdicts = Mapping[str | None, Mapping[str, Verdict]]
"""stage (None: the whole trajectory) -> criterion id -> verdict."""


def weighted_reward(scores: Sequence[CriterionScore]) -> float | None:
    scored = [s for s in scores if s.score is not None]
    total = sum(s.weight for s in scored)
    if total <= 0:
        return None
    return sum(s.weight * s.score for s in scored if s.score is not None) / total


def stages_of(episode: Episode, criteria: Sequence[Criterion]) -> list[str]:
    """The stages of the steps in order of first appearance, then those only criteria name."""
    out: list[str] = []
    for name in [s.stage for s in episode.steps] + [c.stage for c in criteria]:
        if name is not None and name not in out:
            out.append(name)
    return out


def stage_slice(episode: Episode, stage: str) -> Episode:
    """The stage's steps as an episode of their own (its final answer: its last action)."""
    return replace(episode, steps=tuple(s for s in episode.steps if s.stage == stage), final_answer=None)


def judge_tasks(criteria: Sequence[Criterion], episode: Episode) -> list[JudgeTask]:
    """What a judge must be asked for this episode: its stage-less judged criteria on
    the whole, and each reached stage's judged criteria on that stage."""
    tasks = []
    whole = tuple(c for c in criteria if c.judged and c.stage is None)
    if whole:
        tasks.append(JudgeTask(None, whole, episode))
    for stage in stages_of(episode, criteria):
        own = tuple(c for c in criteria if c.judged and c.stage == stage)
        part = stage_slice(episode, stage)
        if own and part.steps:
            tasks.append(JudgeTask(stage, own, part))
    return tasks


def _score(
    c: Criterion, episode: Episode, verdicts: Mapping[str, Verdict] | None, skipped: str, stage: str | None
) -> CriterionScore:
    if c.stage is not None and not episode.steps:
        return CriterionScore(
            c.id, 0.0, c.weight, "llm" if c.judged else "rule", f"stage {c.stage!r} has no steps", c.stage
        )
    if c.check is not None:
        result = evaluate(c.check, episode)
        return CriterionScore(c.id, 1.0 if result.passed else 0.0, c.weight, "rule", result.rationale, stage)
    verdict = (verdicts or {}).get(c.id)
    if verdict is None:
        return CriterionScore(c.id, None, c.weight, "skipped", skipped, stage)
    return CriterionScore(c.id, min(1.0, max(0.0, verdict.score)), c.weight, "llm", verdict.rationale, stage)


def score_episode(
    criteria: Sequence[Criterion],
    episode: Episode,
    verdicts: Verdicts | None = None,
    *,
    skipped: str = "judged by an LLM; not judged",
) -> RubricScore:
    """The rubric's score of the episode. `verdicts` answer `judge_tasks(criteria,
    episode)`; a judged criterion without one is skipped (`skipped` is its rationale)."""
    verdicts = verdicts or {}
    stages = stages_of(episode, criteria)
    slices = {stage: stage_slice(episode, stage) for stage in stages}
    scores = []
    for c in criteria:
        if c.stage is None:
            scores.append(_score(c, episode, verdicts.get(None), skipped, None))
        else:
            scores.append(_score(c, slices[c.stage], verdicts.get(c.stage), skipped, c.stage))
    per_stage = []
    for stage in stages:
        part = slices[stage]
        entries = [s for s in scores if s.stage == stage]
        entries += [_score(c, part, None, skipped, stage) for c in criteria if c.stage is None and not c.judged]
        order = {c.id: c.position for c in criteria}
        entries.sort(key=lambda s: order[s.id])
        per_stage.append(
            StageScore(stage, tuple(s.index for s in part.steps), weighted_reward(entries), tuple(entries))
        )
    return RubricScore(weighted_reward(scores), tuple(scores), tuple(per_stage))
