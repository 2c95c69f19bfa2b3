"""The rule checks as the rubrics reflector's LLM writes them: the pydantic models
whose JSON schema the `rubrics` prompt shows (reflectors/llm_client/schemas.py), a
subset of the stored checks in their older names (`target`, `json_field`,
`step_count`; content.py reads them as `scope`, `json_path`, `max_steps`).

Only the shape is written here. What makes a check valid is `normalise_check`,
applied to every check the model writes: a check the scorer would refuse is a repair
message to the model, not a stored rubric that cannot be scored. `normalised` gives
the check as the rule engine (checks.py) and `describe_check` read it.

Rule semantics, as the rubrics prompt states them (checks.py implements them): a
target is the last step's action / result ("final_*") or any step's ("any_*": passes
if one step passes). regex uses re.search; regex and contains read a JSON action as
its JSON text, json_field reads it as the object (a string target is parsed as JSON);
path is dotted, list indexes as numbers. negate inverts regex and contains.
tool_called counts the actions naming that tool; max_times null is unbounded.
step_count bounds the number of steps, either bound null when absent.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from domain.errors import InvalidInput
from service.rubrics.content import normalise_check

Target = Literal["final_action", "final_result", "any_action", "any_result"]


class _WrittenCheck(BaseModel):
    # As every LLM answer is read: stray keys ignored, padded strings trimmed.
    model_config = ConfigDict(extra="ignore", str_strip_whitespace=True)

    def normalised(self) -> dict[str, Any]:
        """This check as the rule engine reads it (`normalise_check`)."""
        return normalise_check(self.model_dump(), "check")

    @model_validator(mode="after")
    def _scorable(self) -> _WrittenCheck:
        try:
            self.normalised()
        except InvalidInput as exc:
            raise ValueError(exc.message) from None
        return self


class RegexCheck(_WrittenCheck):
    type: Literal["regex"]
    target: Target
    pattern: str = Field(min_length=1, max_length=300, description="Python re.search pattern")
    negate: bool = Field(description="true: passes when the pattern is NOT found")


class ContainsCheck(_WrittenCheck):
    type: Literal["contains"]
    target: Target
    text: str = Field(min_length=1, max_length=300)
    case_sensitive: bool
    negate: bool = Field(description="true: passes when the text is NOT found")


class JsonFieldCheck(_WrittenCheck):
    type: Literal["json_field"]
    target: Target
    path: str = Field(min_length=1, max_length=200, description="dot path into the JSON, list indexes as numbers")
    op: Literal["exists", "equals", "not_equals"]
    value: str | int | float | bool | None = Field(description="compared value for equals/not_equals; null for exists")


class ToolCalledCheck(_WrittenCheck):
    type: Literal["tool_called"]
    tool: str = Field(min_length=1, max_length=100)
    min_times: int = Field(ge=0)
    max_times: int | None = Field(ge=0, description="null: no upper bound; 0: the tool must never be called")


class StepCountCheck(_WrittenCheck):
    type: Literal["step_count"]
    min_steps: int | None = Field(ge=0)
    max_steps: int | None = Field(ge=1)


RuleCheck = Annotated[
    RegexCheck | ContainsCheck | JsonFieldCheck | ToolCalledCheck | StepCountCheck, Field(discriminator="type")
]
