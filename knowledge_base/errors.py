"""The error tree every Rightsize layer raises from.

    RightsizeError                  root; ``transient`` says whether a retry can help
    +-- InvalidInputError           bad spec, file or field: names the source, field and value
    +-- NotFoundError               a named system, partition, plan, job... does not exist
    +-- ConflictError               a write lost a race (stale version, duplicate name)
    +-- StorageError                the knowledge base could not be read or written (transient)

Callers decide on retries by reading ``transient``, never by parsing messages.
"""

from __future__ import annotations

from typing import ClassVar

__all__ = [
    "ConflictError",
    "InvalidInputError",
    "NotFoundError",
    "RightsizeError",
    "StorageError",
]


class RightsizeError(Exception):
    """Root of every error Rightsize raises on purpose."""

    transient: ClassVar[bool] = False


class InvalidInputError(RightsizeError, ValueError):
    """Input that can never succeed as given: a malformed file, field or value."""

    def __init__(
        self,
        message: str,
        *,
        source: str | None = None,
        field: str | None = None,
        value: object = None,
    ) -> None:
        self.source = source
        self.field = field
        self.value = value
        where = ": ".join(part for part in (source, field) if part)
        if value is not None and not isinstance(value, dict | list) and repr(value) not in message:
            message = f"{message} (value: {value!r})"
        super().__init__(f"{where}: {message}" if where else message)


class NotFoundError(RightsizeError, LookupError):
    """A named thing is not in the knowledge base."""


class ConflictError(RightsizeError):
    """A write that conflicts with what is stored (stale version, duplicate)."""


class StorageError(RightsizeError):
    """The knowledge base backend failed; a retry may help."""

    transient: ClassVar[bool] = True
