"""Reflexa's errors as text a model can act on: which argument to fix and the rule
it broke, or what is wrong with the server. Never a stack trace, never the API key."""

from __future__ import annotations

from collections.abc import Mapping

from reflexa.errors import (
    ConnectionFailed,
    Forbidden,
    InvalidInput,
    NotFound,
    PayloadTooLarge,
    RateLimited,
    ReflexaError,
    Unauthorized,
    Unavailable,
)

#: The request's field paths, as the client and server name them, in the tools' own words.
_ARGUMENTS = {
    "state.observation": "state",
    "state": "state",
    "observation": "state",
    "render.max_chars": "max_chars",
    "render": "max_chars",
}


def argument_name(error_field: str, renames: Mapping[str, str] | None = None) -> str:
    names = {**_ARGUMENTS, **(renames or {})}
    return names.get(error_field, error_field)


def explain(exc: ReflexaError, *, renames: Mapping[str, str] | None = None) -> str:
    """One paragraph: what went wrong and what to change."""
    if isinstance(exc, InvalidInput | PayloadTooLarge):
        if exc.field:
            name = argument_name(exc.field, renames)
            rule = f" (rule: {exc.rule})" if exc.rule else ""
            return f"Invalid argument `{name}`: {exc.message}{rule}. Fix `{name}` and call the tool again."
        return f"Invalid input: {exc.message}. Fix the arguments and call the tool again."
    if isinstance(exc, NotFound):
        return f"Not found: {exc.message}. Check the id (it may belong to another namespace)."
    if isinstance(exc, Unauthorized):
        return (
            "Reflexa refused this MCP server's API key (REFLEXA_API_KEY): the server's configuration must be "
            "fixed; retrying will not help."
        )
    if isinstance(exc, Forbidden):
        return f"The API key's role may not do this: {exc.message}. Use a key with the needed role."
    if isinstance(exc, RateLimited):
        wait = f" in {exc.retry_after:g} s" if exc.retry_after else " later"
        return f"Reflexa is rate-limiting this key; try again{wait}."
    if isinstance(exc, ConnectionFailed | Unavailable):
        return f"Reflexa is unreachable or unavailable now ({exc.message}); try again later."
    return f"Reflexa refused the request: {exc.message}" + (f" (field `{exc.field}`)" if exc.field else "")
