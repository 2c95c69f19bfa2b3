"""Reading a page's query string or a form the way browsers send them: an empty
field means "not set"; a bad value is a 422 naming the field and the rule."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from domain.errors import InvalidInput

M = TypeVar("M", bound=BaseModel)

MAX_TEXT = 2000
MAX_CURSOR = 400  # the server's cursors are short: base64 of a key, or of a value and a key


class Fields:
    def __init__(self, values: Mapping[str, str]) -> None:
        self.values = values

    def text(self, name: str, *, max_length: int = 200) -> str | None:
        value = (self.values.get(name) or "").strip()
        if not value:
            return None
        if "\x00" in value:
            raise InvalidInput(f"{name}: contains a NUL character", field=name, rule="no_nul")
        if len(value) > max_length:
            raise InvalidInput(f"{name}: at most {max_length} characters", field=name, rule="max_length")
        return value

    def cursor(self) -> str | None:
        """A list page's `cursor` (the previous page's next_cursor)."""
        return self.text("cursor", max_length=MAX_CURSOR)

    def choice(self, name: str, choices: Sequence[str]) -> str | None:
        value = self.text(name)
        if value is not None and value not in choices:
            raise InvalidInput(f"{name}: {value!r} is not one of {', '.join(choices)}", field=name, rule="enum")
        return value

    def number(self, name: str) -> float | None:
        value = self.text(name)
        if value is None:
            return None
        try:
            number = float(value)
        except ValueError:
            raise InvalidInput(f"{name}: {value!r} is not a number", field=name, rule="number") from None
        if number != number or number in (float("inf"), float("-inf")):
            raise InvalidInput(f"{name}: must be a finite number", field=name, rule="finite")
        return number

    def integer(self, name: str, *, minimum: int = 0) -> int | None:
        value = self.text(name)
        if value is None:
            return None
        if not value.lstrip("-").isdigit() or int(value) < minimum:
            raise InvalidInput(f"{name}: {value!r} is not a whole number ≥ {minimum}", field=name, rule="integer")
        return int(value)

    def boolean(self, name: str) -> bool | None:
        value = self.choice(name, ("true", "false"))
        return None if value is None else value == "true"

    def moment(self, name: str) -> datetime | None:
        """A datetime-local field (read as UTC) or an ISO time with an offset."""
        value = self.text(name)
        if value is None:
            return None
        try:
            when = datetime.fromisoformat(value)
        except ValueError:
            raise InvalidInput(f"{name}: {value!r} is not a date and time", field=name, rule="datetime") from None
        return when.replace(tzinfo=UTC) if when.tzinfo is None else when

    def given(self, names: Sequence[str]) -> dict[str, str]:
        """The non-empty fields among `names` (to keep them in links and forms)."""
        return {n: self.values[n].strip() for n in names if (self.values.get(n) or "").strip()}


def validated(model: type[M], **values: Any) -> M:
    """A request model from form values; its first validation error as a 422."""
    try:
        return model.model_validate(values)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err.get("loc", ())) or "form"
        raise InvalidInput(f"{where}: {err.get('msg', 'invalid')}", field=where, rule=err["type"]) from None
