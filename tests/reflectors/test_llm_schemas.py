"""The answer models' checks beyond JSON Schema: operation-dependent fields, step
indexes and ids that must exist, skill parameters, rubric weights and checks."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

from reflectors.llm_client.schemas import GoldenNegativeOut, HeuristicsOut, PoolOpOut, RubricOut, SkillsOut

HEURISTIC = {
    "trigger": "  A door is locked and a key is visible.  ",
    "guideline": "Pick up the key before trying the door.",
    "rationale": "Step 2 shows three tries at the locked door.",
    "polarity": "do",
    "evidence_steps": [1, 2],
}
SKILL = {
    "name": "search_and_open_item",
    "when_to_use": "The agent must find an item in the catalogue.",
    "preconditions": ["The search box is visible."],
    "parameters": [{"name": "query", "description": "words naming the item"}],
    "steps": ["Type {query} into the search box and submit.", "Open the first matching result."],
    "step_range": [2, 4],
}


def invalid(model: type[BaseModel], data: dict[str, Any], context: dict[str, Any] | None = None) -> str:
    with pytest.raises(ValidationError) as caught:
        model.model_validate(data, context=context)
    return str(caught.value)


def test_heuristics_are_trimmed_and_their_steps_checked_against_the_trajectory() -> None:
    parsed = HeuristicsOut.model_validate({"heuristics": [HEURISTIC]}, context={"step_indexes": [0, 1, 2]})
    assert parsed.heuristics[0].trigger == "A door is locked and a key is visible."
    assert "steps [2] are not in the trajectory" in invalid(
        HeuristicsOut, {"heuristics": [HEURISTIC]}, {"step_indexes": [0, 1]}
    )
    assert "at most 3 items" in invalid(HeuristicsOut, {"heuristics": [HEURISTIC] * 4})
    assert "polarity" in invalid(HeuristicsOut, {"heuristics": [dict(HEURISTIC, polarity="Do")]})


@pytest.mark.parametrize(
    ("op", "message"),
    [
        ({"operation": "ADD", "target_id": "h-1"}, "ADD takes no target_id"),
        ({"operation": "UPVOTE", "target_id": None}, "UPVOTE needs the target_id"),
        ({"operation": "EDIT", "target_id": "h-1", "trigger": "A door is locked somewhere."}, "EDIT needs both"),
        ({"operation": "DOWNVOTE", "target_id": "h-1", "guideline": "Never open doors at all."}, "takes no trigger"),
        ({"operation": "UPVOTE", "target_id": "h-9"}, "'h-9' is not one of the existing items"),
    ],
)
def test_pool_operations_carry_exactly_their_fields(op: dict[str, Any], message: str) -> None:
    assert message in invalid(PoolOpOut, {"reason": "compared with h-1 directly", **op}, {"known_ids": ["h-1"]})


def test_valid_pool_operations() -> None:
    reason = {"reason": "the same situation and the same advice as h-1"}
    assert PoolOpOut.model_validate({"operation": "ADD", "target_id": None, **reason}).target_id is None
    edit = {"operation": "EDIT", "target_id": "h-1", "trigger": "A door is locked.", "guideline": "Find its key first."}
    assert PoolOpOut.model_validate({**edit, **reason}, context={"known_ids": ["h-1"]}).operation == "EDIT"


def test_skills_declare_their_parameters_and_cite_real_steps() -> None:
    assert SkillsOut.model_validate({"skills": [SKILL]}, context={"step_indexes": range(6)}).skills[0].step_range == [
        2,
        4,
    ]
    assert SkillsOut.model_validate({"skills": []}).skills == []
    assert "undeclared parameters ['item']" in invalid(
        SkillsOut, {"skills": [dict(SKILL, steps=["Search for {item}.", "Open it."])]}
    )
    assert "start <= end" in invalid(SkillsOut, {"skills": [dict(SKILL, step_range=[4, 2])]})
    assert "steps [9] are not in the trajectory" in invalid(
        SkillsOut, {"skills": [dict(SKILL, step_range=[2, 9])]}, {"step_indexes": range(6)}
    )
    assert "name" in invalid(SkillsOut, {"skills": [dict(SKILL, name="Search And Open")]})
    assert "must be unique" in invalid(SkillsOut, {"skills": [SKILL, SKILL]})
    assert "already exist in the library" in invalid(
        SkillsOut, {"skills": [SKILL]}, {"known_skill_names": ["search_and_open_item"]}
    )


def criterion(weight: float, check: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "text": "The final answer names the room.",
        "weight": weight,
        "rationale": "A did, B did not.",
        "check": check,
    }


def test_rubric_weights_must_sum_to_one_and_are_rescaled_exactly() -> None:
    parsed = RubricOut.model_validate({"criteria": [criterion(0.5), criterion(0.48)]})
    assert sum(c.weight for c in parsed.criteria) == pytest.approx(1.0, abs=1e-12)
    assert "sum to 0.600" in invalid(RubricOut, {"criteria": [criterion(0.3), criterion(0.3)]})


def test_rubric_checks_are_tagged_by_type() -> None:
    regex = {"type": "regex", "target": "final_action", "pattern": r"42\.50", "negate": False}
    field = {"type": "json_field", "target": "final_action", "path": "args.city", "op": "equals", "value": "Oslo"}
    parsed = RubricOut.model_validate({"criteria": [criterion(0.5, regex), criterion(0.5, field)]})
    assert [type(c.check).__name__ for c in parsed.criteria] == ["RegexCheck", "JsonFieldCheck"]
    assert "does not compile" in invalid(
        RubricOut, {"criteria": [criterion(0.5, dict(regex, pattern="(")), criterion(0.5)]}
    )
    assert "does not match any of the expected tags" in invalid(
        RubricOut, {"criteria": [criterion(0.5, {"type": "llm"}), criterion(0.5)]}
    )


@pytest.mark.parametrize(
    ("check", "message"),
    [
        ({"type": "step_count", "min_steps": None, "max_steps": None}, "check.max_steps or min_steps is required"),
        ({"type": "step_count", "min_steps": 5, "max_steps": 2}, "check.min_steps is 5, above max_steps 2"),
        (
            {"type": "tool_called", "tool": "open", "min_times": 3, "max_times": 1},
            "check.min_times is 3, above max_times 1",
        ),
        (
            {"type": "json_field", "target": "final_action", "path": "a[", "op": "exists", "value": None},
            "check.path is not a JSON path",
        ),
    ],
)
def test_rubric_checks_the_scorer_would_refuse_are_sent_back_for_repair(check: dict[str, Any], message: str) -> None:
    """The rubric package's rules decide what a written check may be: a rubric the
    reflector stores is one the service can score."""
    assert message in invalid(RubricOut, {"criteria": [criterion(0.5, check), criterion(0.5)]})


def test_golden_negative_critical_step_must_exist() -> None:
    data = {
        "critical_step": 7,
        "what_went_wrong": "The agent edited the wrong service's configuration.",
        "corrected_action": "Edit the staging service.",
        "hint": "Check which environment each match belongs to.",
        "heuristics": [HEURISTIC],
    }
    assert GoldenNegativeOut.model_validate(data).critical_step == 7
    assert "steps [7] are not in the trajectory" in invalid(GoldenNegativeOut, data, {"step_indexes": [0, 1, 2]})
