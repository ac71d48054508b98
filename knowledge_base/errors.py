"""The error tree every Rightsize layer raises from, and the one rule for retrying.

    RightsizeError                      root; ``transient`` says whether a retry can help
    +-- InvalidInputError               bad spec, file or field: names the source, field and value
    |   +-- MalformedEventError         (agents.events) bytes that are not a valid event
    |   |   +-- UnknownEventTypeError   an event type nobody registered
    |   |   +-- EventSchemaError        a registered type whose payload does not validate
    |   +-- EventLogError               (agents.eventlog) a recorded event log that cannot be read
    +-- NotFoundError                   a named system, partition, plan, job... does not exist
    +-- ConflictError                   a write lost a race (stale version, duplicate name)
    +-- StorageError                    the knowledge base could not be read or written;
    |                                   transient only when the store was busy (SQLite's
    |                                   lock) or unreachable/slow (MongoDB); a broken
    |                                   constraint, a corrupt file, a duplicate key: not
    +-- BusError                        (agents.bus.base) the broker did not answer (transient)
    |   +-- BusRejectedError            the broker refused the request for good
    |   +-- CommitFailedError           the partition moved to another group member
    |   +-- BusClosedError              the bus or consumer was used after stop
    +-- ActuatorError                   (tools.actuators.model) an executor failed
    |   +-- RequestRejected             the request breaks a limit; never transient
    |   +-- SubmissionFailed            the batch system refused or did not answer
    |   +-- JobNotFound                 the executor knows no such job
    |   +-- SlurmCommandError           (tools.actuators.slurm_commands) a SLURM command
    |                                   failed; transient when the controller did not answer
    +-- PlanRaced, JobRaced             (knowledge_base.cas) a plan or job record kept
                                        changing under compare-and-set (transient)

The retry rule, the same for every error and every caller: a retry may help exactly
when ``is_transient(exc)`` says so, and it reads the *instance's* ``transient``. A class
sets the default for its kind (``transient = True`` on ``BusError``); one failure may
say otherwise when it is raised (``SubmissionFailed(msg, transient=True)`` when the SLURM
controller did not answer, ``StorageError(msg, transient=False)`` for a broken
constraint). Errors from outside the tree are never transient: wrap them. Callers
decide on retries by this flag, never by parsing messages, and never by
``type(exc).transient`` (that would miss the per-failure answer).
"""

from __future__ import annotations

__all__ = [
    "ConflictError",
    "InvalidInputError",
    "NotFoundError",
    "RightsizeError",
    "StorageError",
    "is_transient",
]


class RightsizeError(Exception):
    """Root of every error Rightsize raises on purpose.

    ``transient`` defaults to the class's value; pass ``transient=`` to decide it for
    this one failure.
    """

    transient: bool = False

    def __init__(self, *args: object, transient: bool | None = None) -> None:
        super().__init__(*args)
        if transient is not None:
            self.transient = transient


def is_transient(exc: BaseException) -> bool:
    """Whether retrying what raised ``exc`` may help: the instance's ``transient``."""
    return getattr(exc, "transient", False) is True


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
        self.reason = message  # what is wrong, without where (for a caller adding its own)
        where = ": ".join(part for part in (source, field) if part)
        if value is not None and not isinstance(value, dict | list) and repr(value) not in message:
            message = f"{message} (value: {value!r})"
        super().__init__(f"{where}: {message}" if where else message)


class NotFoundError(RightsizeError, LookupError):
    """A named thing is not in the knowledge base."""


class ConflictError(RightsizeError):
    """A write that conflicts with what is stored (stale version, duplicate)."""


class StorageError(RightsizeError):
    """The knowledge base backend failed; by default a retry may help (busy, unreachable).

    Backends raise it with ``transient=False`` when the same write can never succeed
    (a broken constraint, a corrupt file, a full disk).
    """

    transient = True
