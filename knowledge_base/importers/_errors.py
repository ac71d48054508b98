"""Turning pydantic and JSON failures into errors that name the file, field and value."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from knowledge_base.errors import InvalidInputError


def invalid(exc: ValidationError, source: str, prefix: str = "") -> InvalidInputError:
    """The first validation failure as one readable error; the rest counted."""
    first = exc.errors()[0]
    location = ".".join(str(part) for part in first["loc"])
    field = ".".join(part for part in (prefix, location) if part) or None
    message = first["msg"].removeprefix("Value error, ")
    if first.get("type") == "extra_forbidden":
        message = "unknown field"
    extra = len(exc.errors()) - 1
    if extra:
        message += f" (and {extra} more error{'s' if extra > 1 else ''})"
    value = first.get("input")
    shown = (
        f"{message}; got {value!r}"
        if value is not None and not isinstance(value, dict)
        else message
    )
    return InvalidInputError(shown, source=source, field=field, value=value)


def load_json(path: Path | str) -> Any:
    """Parse a JSON file; a missing file or malformed/truncated JSON names the position."""
    source = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise InvalidInputError(f"cannot read: {exc.strerror}", source=source) from exc
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidInputError(
            f"malformed JSON at line {exc.lineno} column {exc.colno}: {exc.msg}",
            source=source,
        ) from exc
