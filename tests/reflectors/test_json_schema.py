"""The strict-schema converter: closed objects, every property required, $refs
inlined, tagged unions as anyOf, unsupported keywords dropped, and clear errors for
what strict mode cannot express."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import pytest
from pydantic import BaseModel, Field

from reflectors.llm_client.json_schema import response_format, strict_json_schema
from reflectors.llm_client.schemas import OUTPUT_MODELS


class Inner(BaseModel):
    label: str = Field(min_length=2, max_length=5, description="a short label")


class Cat(BaseModel):
    kind: Literal["cat"]
    lives: int = Field(9, ge=0, le=9)


class Dog(BaseModel):
    kind: Literal["dog"]
    good: bool = True


class Outer(BaseModel):
    """Developer notes that pydantic turns into a description."""

    name: str
    note: str | None = None
    inner: Inner = Field(description="the inner one")
    inners: list[Inner] = Field(default_factory=list, max_length=3)
    pet: Annotated[Cat | Dog, Field(discriminator="kind")] | None = None


def test_conversion_of_a_representative_model() -> None:
    inner = {
        "type": "object",
        "properties": {"label": {"description": "a short label", "type": "string"}},
        "required": ["label"],
        "additionalProperties": False,
    }
    assert strict_json_schema(Outer) == {
        "description": "Developer notes that pydantic turns into a description.",
        "type": "object",
        "properties": {
            "name": {"type": "string"},
            "note": {"anyOf": [{"type": "string"}, {"type": "null"}]},
            "inner": {**inner, "description": "the inner one"},
            "inners": {"type": "array", "maxItems": 3, "items": inner},
            "pet": {
                "anyOf": [
                    {
                        "type": "object",
                        "properties": {
                            "kind": {"enum": ["cat"], "type": "string"},
                            "lives": {"type": "integer", "minimum": 0, "maximum": 9},
                        },
                        "required": ["kind", "lives"],
                        "additionalProperties": False,
                    },
                    {
                        "type": "object",
                        "properties": {"kind": {"enum": ["dog"], "type": "string"}, "good": {"type": "boolean"}},
                        "required": ["kind", "good"],
                        "additionalProperties": False,
                    },
                    {"type": "null"},
                ]
            },
        },
        "required": ["name", "note", "inner", "inners", "pet"],
        "additionalProperties": False,
    }


def _walk(node: Any) -> Any:
    if isinstance(node, dict):
        yield node
        for key, value in node.items():
            if key == "properties":
                for sub in value.values():
                    yield from _walk(sub)
            else:
                yield from _walk(value)
    elif isinstance(node, list):
        for item in node:
            yield from _walk(item)


@pytest.mark.parametrize("name", sorted(OUTPUT_MODELS))
def test_every_output_schema_is_strict(name: str) -> None:
    schema = strict_json_schema(OUTPUT_MODELS[name])
    assert "description" not in schema  # developer docstrings stay out of the prompt
    for node in _walk(schema):
        assert (
            not {"$ref", "$defs", "oneOf", "allOf", "const", "default", "title", "minLength", "maxLength"} & node.keys()
        )
        if node.get("type") == "object":
            assert node["additionalProperties"] is False
            assert node["required"] == list(node["properties"])


class Tree(BaseModel):
    children: list[Tree]


class Loose(BaseModel):
    extra: dict[str, int]


class Pair(BaseModel):
    span: tuple[int, int]


@pytest.mark.parametrize(("model", "message"), [(Tree, "recursive"), (Loose, "free-form"), (Pair, "prefixItems")])
def test_what_strict_mode_cannot_express_is_refused(model: type[BaseModel], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        strict_json_schema(model)


def test_response_format_modes() -> None:
    assert response_format(Inner, use_json_schema=False) == {"type": "json_object"}
    strict = response_format(Inner, use_json_schema=True)
    assert strict["type"] == "json_schema"
    assert strict["json_schema"]["name"] == "Inner" and strict["json_schema"]["strict"] is True
