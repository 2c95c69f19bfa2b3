"""What each prompt must answer: the pydantic models the LLM client validates
answers against (and derives the strict JSON schema from).

Limits here are the contract the prompts state in words. Anything the JSON schema
cannot express, checked by validators: step indexes that must exist in the shown
trajectory, ids that must be among the shown pool items, weights that must sum to 1.
Those checks read the validation context the reflector passes to `complete_json`
(`step_indexes`, `known_ids`, `known_skill_names`); without a context they are skipped.
A failed check becomes the repair message the model sees, so messages say what to fix.
"""

from __future__ import annotations

import string
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from service.rubrics.written_checks import RuleCheck


def _drop_docstring(schema: dict[str, Any]) -> None:
    """Class docstrings here are written for developers; only field descriptions,
    written for the model, go into the schema it is shown."""
    schema.pop("description", None)


class _Out(BaseModel):
    """Shared config: tolerate stray keys (json_object mode has no schema to hold the
    model to), trim the whitespace models like to pad strings with, and keep class
    docstrings out of the JSON schema."""

    model_config = ConfigDict(extra="ignore", str_strip_whitespace=True, json_schema_extra=_drop_docstring)


def _check_steps(indexes: list[int], info: ValidationInfo) -> list[int]:
    known = (info.context or {}).get("step_indexes")
    if known is not None:
        unknown = sorted(set(indexes) - set(known))
        if unknown:
            raise ValueError(f"steps {unknown} are not in the trajectory (its step indexes are {sorted(known)})")
    return indexes


# -- heuristics (ERL, and the golden-negative reflection) -------------------------


class HeuristicItem(_Out):
    """One heuristic: when it applies, what to do or avoid, and why."""

    trigger: str = Field(
        min_length=10,
        max_length=300,
        description="when it applies: conditions on the observable state and the agent's situation, "
        "general enough to recur on other tasks; no names or values specific to this episode",
    )
    guideline: str = Field(
        min_length=10, max_length=400, description="what to do (polarity do) or avoid (polarity avoid), imperative"
    )
    rationale: str = Field(min_length=10, max_length=400, description="why, grounded in what happened in the steps")
    polarity: Literal["do", "avoid"]
    evidence_steps: list[Annotated[int, Field(ge=0)]] = Field(
        min_length=1, max_length=10, description="indexes of the steps that support it"
    )

    @field_validator("evidence_steps")
    @classmethod
    def _steps_exist(cls, indexes: list[int], info: ValidationInfo) -> list[int]:
        return _check_steps(indexes, info)


class HeuristicsOut(_Out):
    """heuristics_single: 1-3 heuristics from one attempt."""

    heuristics: list[HeuristicItem] = Field(min_length=1, max_length=3)


# -- pool maintenance (ExpeL) ------------------------------------------------------


class PoolOpOut(_Out):
    """pool_maintenance: one operation on the heuristic pool for a new candidate.

    ADD: the candidate is new (target_id, trigger, guideline null). EDIT: rewrite
    target_id as `trigger` + `guideline` (both given, the full new wording). UPVOTE /
    DOWNVOTE: target_id is confirmed / contradicted by the candidate (no new wording).
    """

    operation: Literal["ADD", "EDIT", "UPVOTE", "DOWNVOTE"]
    target_id: str | None = Field(description="id of the existing item acted on; null for ADD")
    trigger: str | None = Field(
        default=None, min_length=10, max_length=300, description="EDIT only: the rewritten trigger"
    )
    guideline: str | None = Field(
        default=None, min_length=10, max_length=400, description="EDIT only: the rewritten guideline"
    )
    reason: str = Field(min_length=10, max_length=500, description="why this operation, comparing the two texts")

    @model_validator(mode="after")
    def _fields_match_operation(self, info: ValidationInfo) -> PoolOpOut:
        op = self.operation
        if op == "ADD":
            if self.target_id is not None or self.trigger is not None or self.guideline is not None:
                raise ValueError("ADD takes no target_id, trigger or guideline (set them to null)")
            return self
        if self.target_id is None:
            raise ValueError(f"{op} needs the target_id of an existing item")
        known = (info.context or {}).get("known_ids")
        if known is not None and self.target_id not in known:
            raise ValueError(f"target_id {self.target_id!r} is not one of the existing items {sorted(known)}")
        if op == "EDIT" and (self.trigger is None or self.guideline is None):
            raise ValueError("EDIT needs both the rewritten trigger and guideline")
        if op != "EDIT" and (self.trigger is not None or self.guideline is not None):
            raise ValueError(f"{op} takes no trigger or guideline (set them to null)")
        return self


# -- skills (Agent Workflow Memory, Voyager, SEED) ---------------------------------


class SkillParameter(_Out):
    name: str = Field(pattern=r"^[a-z][a-z0-9_]{0,39}$", description="snake_case, used in steps as {name}")
    description: str = Field(min_length=3, max_length=200, description="what value it stands for")


class SkillItem(_Out):
    """A reusable procedure induced from a successful trajectory."""

    name: str = Field(pattern=r"^[a-z][a-z0-9_]{2,63}$", description="snake_case verb_object name")
    when_to_use: str = Field(min_length=10, max_length=400, description="the state / sub-goal where it applies")
    preconditions: list[Annotated[str, Field(min_length=3, max_length=300)]] = Field(
        max_length=8, description="what must hold before starting"
    )
    parameters: list[SkillParameter] = Field(max_length=8, description="the values that vary between uses")
    steps: list[Annotated[str, Field(min_length=3, max_length=300)]] = Field(
        min_length=2, max_length=15, description="abstract imperative steps; episode values replaced by {parameter}"
    )
    step_range: list[Annotated[int, Field(ge=0)]] = Field(
        min_length=2, max_length=2, description="[start, end] step indexes (inclusive) it was induced from"
    )

    @model_validator(mode="after")
    def _consistent(self, info: ValidationInfo) -> SkillItem:
        start, end = self.step_range
        if start > end:
            raise ValueError(f"step_range [{start}, {end}] must have start <= end")
        _check_steps([start, end], info)
        declared = {p.name for p in self.parameters}
        used = {field for step in self.steps for _, field, _, _ in string.Formatter().parse(step) if field}
        if used - declared:
            raise ValueError(f"steps use undeclared parameters {sorted(used - declared)}; declare them in parameters")
        return self


class SkillsOut(_Out):
    """skills: 0-4 skills (none when the trajectory holds nothing reusable)."""

    skills: list[SkillItem] = Field(max_length=4)

    @model_validator(mode="after")
    def _new_names(self, info: ValidationInfo) -> SkillsOut:
        names = [s.name for s in self.skills]
        if len(set(names)) != len(names):
            raise ValueError("skill names must be unique")
        existing = set((info.context or {}).get("known_skill_names") or ())
        if clash := sorted(existing.intersection(names)):
            raise ValueError(f"skills {clash} already exist in the library; omit them or choose another name")
        return self


# -- rubrics (RubricEM, CRPO) --------------------------------------------------------
#
# A criterion's check is written in the rubric package's form (service/rubrics/
# written_checks.py: the shapes, checked by the rules the scorer applies).


class Criterion(_Out):
    text: str = Field(min_length=10, max_length=300, description="the criterion, judgeable from the trajectory alone")
    weight: float = Field(ge=0.0, le=1.0)
    rationale: str = Field(min_length=10, max_length=400, description="how it separated the shown outcomes")
    check: RuleCheck | None = Field(description="a deterministic rule when one can decide it; null: an LLM judges")


class RubricOut(_Out):
    """rubrics: 2-8 weighted criteria. Weights must sum to 1 within 0.05 and are then
    rescaled to sum to exactly 1: models round, and a repair turn for 0.99 is waste."""

    criteria: list[Criterion] = Field(min_length=2, max_length=8)

    @model_validator(mode="after")
    def _weights_sum_to_one(self) -> RubricOut:
        total = sum(c.weight for c in self.criteria)
        if abs(total - 1.0) > 0.05:
            raise ValueError(f"criteria weights sum to {total:.3f}; they must sum to 1")
        for criterion in self.criteria:
            criterion.weight = criterion.weight / total
        return self


# -- the rubric judge (rubric rewards: the criteria no rule decides) ----------------------


class CriterionVerdict(_Out):
    id: str = Field(min_length=1, max_length=128, description="the criterion's id, exactly as given")
    score: float = Field(ge=0.0, le=1.0, description="1: clearly met; 0: not met, or no evidence; between: partly")
    rationale: str = Field(min_length=3, max_length=400, description="the evidence for the score, citing [steps]")


class RubricJudgeOut(_Out):
    """rubric_judge: one verdict per criterion shown, each id once. The ids are
    checked against the validation context's `known_ids` (the criteria shown)."""

    verdicts: list[CriterionVerdict] = Field(min_length=1, max_length=100)

    @model_validator(mode="after")
    def _every_criterion_once(self, info: ValidationInfo) -> RubricJudgeOut:
        ids = [v.id for v in self.verdicts]
        if len(set(ids)) != len(ids):
            raise ValueError("grade each criterion once: an id appears twice")
        known = (info.context or {}).get("known_ids")
        if known is not None and set(ids) != set(known):
            missing, unknown = sorted(set(known) - set(ids)), sorted(set(ids) - set(known))
            raise ValueError(f"grade exactly the criteria shown: missing {missing}, not shown {unknown}")
        return self


# -- golden negatives (ReflectRL, RPO) -------------------------------------------------


class GoldenNegativeOut(_Out):
    """golden_negative: the critical mistake of a failed expert attempt, the fix,
    a hint for hint-conditioned preference pairs, and heuristics."""

    critical_step: int = Field(ge=0, description="index of the step where the attempt went wrong")
    what_went_wrong: str = Field(min_length=20, max_length=800)
    corrected_action: str = Field(
        min_length=5, max_length=800, description="what should have been done at the critical step instead"
    )
    hint: str = Field(
        min_length=10, max_length=400, description="a hint that steers toward the fix without giving it away"
    )
    heuristics: list[HeuristicItem] = Field(min_length=1, max_length=3)

    @field_validator("critical_step")
    @classmethod
    def _step_exists(cls, step: int, info: ValidationInfo) -> int:
        _check_steps([step], info)
        return step


OUTPUT_MODELS: dict[str, type[BaseModel]] = {
    "heuristics_single": HeuristicsOut,
    "pool_maintenance": PoolOpOut,
    "skills": SkillsOut,
    "rubrics": RubricOut,
    "golden_negative": GoldenNegativeOut,
    "rubric_judge": RubricJudgeOut,
}
"""Prompt name -> the model its answer is validated against."""
