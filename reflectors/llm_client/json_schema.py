"""Turn a pydantic model's JSON Schema into one that strict structured output accepts.

OpenAI's `response_format={"type": "json_schema", "strict": true}` (and the servers
that copy it) accept only a subset of JSON Schema: every object closed
(`additionalProperties: false`) with every property listed in `required`, optional
values expressed as a union with null, and a short list of keywords. Pydantic emits
more: `$ref`s into `$defs`, `oneOf` + `discriminator` for tagged unions, `default`,
`title`, `minLength`… This module rewrites the schema into that subset.

Constraints dropped here (string lengths, for instance) are still enforced: the client
validates every answer with the pydantic model itself and asks for a repair when it
fails, so the sent schema only has to guide decoding, not be the whole contract.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

# Keywords strict mode accepts; anything else is dropped.
_KEPT_KEYWORDS = frozenset(
    {
        "type",
        "description",
        "enum",
        "pattern",
        "format",
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "multipleOf",
        "minItems",
        "maxItems",
    }
)


def strict_json_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The strict-compatible schema of `model`: self-contained (no `$ref`), closed,
    all properties required. Raises ValueError for what strict mode cannot express
    (recursive models, free-form dicts, tuples, intersections), so a schema author
    finds out in a unit test rather than from a 400 in production."""
    root = model.model_json_schema()
    schema = _convert(root, defs=root.get("$defs", {}), seen=())
    if schema.get("type") != "object":
        raise ValueError(f"{model.__name__}: the root of a structured output must be an object")
    return schema


def response_format(model: type[BaseModel], *, use_json_schema: bool) -> dict[str, Any]:
    """The `response_format` request field: strict json_schema, or plain json_object
    for servers that lack json_schema (the schema then travels in the prompt only)."""
    if not use_json_schema:
        return {"type": "json_object"}
    return {
        "type": "json_schema",
        "json_schema": {"name": model.__name__, "schema": strict_json_schema(model), "strict": True},
    }


def _convert(node: dict[str, Any], *, defs: dict[str, Any], seen: tuple[str, ...]) -> dict[str, Any]:
    if "$ref" in node:
        name = node["$ref"].removeprefix("#/$defs/")
        if name in seen:
            raise ValueError(f"recursive model {name!r} cannot be inlined into a strict schema")
        # Keywords next to the $ref (a field's description) win over the definition's.
        merged = {**defs[name], **{k: v for k, v in node.items() if k != "$ref"}}
        return _convert(merged, defs=defs, seen=(*seen, name))
    if "allOf" in node:
        if len(node["allOf"]) != 1:
            raise ValueError("allOf with several schemas is not supported in strict mode")
        merged = {**node["allOf"][0], **{k: v for k, v in node.items() if k != "allOf"}}
        return _convert(merged, defs=defs, seen=seen)
    if "prefixItems" in node:
        raise ValueError("tuples (prefixItems) are not supported in strict mode; use a list with minItems/maxItems")

    out = {key: value for key, value in node.items() if key in _KEPT_KEYWORDS}
    if "const" in node:  # a one-value enum says the same, and every server's grammar knows enum
        out["enum"] = [node["const"]]
    variants = _union_variants(node)
    if variants is not None:
        out["anyOf"] = [_convert(variant, defs=defs, seen=seen) for variant in variants]
    if node.get("type") == "object":
        properties = node.get("properties")
        if not properties:
            raise ValueError("free-form objects (dict fields) are not supported in strict mode")
        out["properties"] = {name: _convert(sub, defs=defs, seen=seen) for name, sub in properties.items()}
        out["required"] = list(properties)
        out["additionalProperties"] = False
    if "items" in node:
        out["items"] = _convert(node["items"], defs=defs, seen=seen)
    return out


def _union_variants(node: dict[str, Any]) -> list[dict[str, Any]] | None:
    """The flattened alternatives of an anyOf/oneOf (pydantic nests a discriminated
    union's oneOf inside the anyOf that adds null); None when `node` is no union.
    oneOf becomes anyOf: strict mode has no oneOf, and tagged variants are disjoint
    by their one-value tag anyway."""
    if "anyOf" not in node and "oneOf" not in node:
        return None
    variants: list[dict[str, Any]] = []
    for variant in node.get("anyOf", []) + node.get("oneOf", []):
        nested = _union_variants(variant)
        variants.extend(nested if nested is not None and "type" not in variant else [variant])
    return variants
