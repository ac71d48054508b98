"""The event envelope every agent publishes and consumes, and the registry of event types.

An event on the wire is one JSON object::

    {"id": "<uuid>", "type": "estimate.ready", "time": "2026-01-01T00:00:00Z",
     "source": "resource-estimation", "correlation_id": "plan-42",
     "causation_id": "<uuid of the event that caused this one>", "schema_version": 1,
     "payload": {...}}

The message key is ``correlation_id`` (a plan or job id), so one plan's or job's events
land on one partition and stay in order. Each event type maps to exactly one payload
model in ``EVENT_TYPES``; decoding looks the type up there and validates the payload
against it, so a handler never sees an unknown type or a half-valid payload. What cannot
be decoded raises a ``MalformedEventError`` naming the field and the value:

    MalformedEventError (InvalidInputError)   bytes that are not an event at all
    +-- UnknownEventTypeError                 ``type`` is not in the registry
    +-- EventSchemaError                      a header or payload field is invalid

Other issues add event types with ``@register_event("name")`` on a ``Payload`` subclass.
"""

from __future__ import annotations

import base64
import builtins
import json
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, ClassVar, Literal, Self, TypeVar

from pydantic import (
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    SerializeAsAny,
    ValidationError,
    ValidationInfo,
    field_validator,
)

from knowledge_base.errors import InvalidInputError
from knowledge_base.records import (
    CascadeSegment,
    Interval,
    JobRecord,
    JobState,
    Plan,
    PlanOption,
    PlanStatus,
    ResourceEstimate,
)
from knowledge_base.workload import WorkloadSpec

__all__ = [
    "EVENT_TYPES",
    "DeadLettered",
    "Envelope",
    "EstimateReady",
    "EstimateRequested",
    "EstimatorDecision",
    "EstimatorPromoted",
    "EstimatorRetrainRequested",
    "EventSchemaError",
    "JobAnnotated",
    "JobFinished",
    "JobProgress",
    "JobStateChanged",
    "JobSubmitted",
    "MalformedEventError",
    "Payload",
    "PingRequested",
    "PlanApproved",
    "PlanBuildRequested",
    "PlanCancelRequested",
    "PlanDecision",
    "PlanFinished",
    "PlanOptionsReady",
    "PlanReady",
    "PlanReplanDecided",
    "PlanReplanRequested",
    "PlanRequested",
    "Ponged",
    "ProfileCompleted",
    "ProfileRequested",
    "ScheduleDecision",
    "UnknownEventTypeError",
    "decode_event",
    "event_id_for",
    "register_event",
]

# Namespace for derived event ids (uuid5): the same inputs always give the same id, which
# is what lets a consumer drop a re-published copy of an event.
EVENT_ID_NAMESPACE = uuid.UUID("6f1c0d1e-8a55-4b7e-9a52-7c2b1f0e3d4a")


class MalformedEventError(InvalidInputError):
    """Bytes that cannot be decoded into an ``Envelope`` (not JSON, not an object...)."""


class UnknownEventTypeError(MalformedEventError):
    """The envelope's ``type`` has no payload model in ``EVENT_TYPES``."""


class EventSchemaError(MalformedEventError):
    """A header or payload field breaks the schema of its event type."""


class Payload(BaseModel):
    """Base of every event payload; ``event_type`` and ``schema_version`` are set on register."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    event_type: ClassVar[str] = ""
    schema_version: ClassVar[int] = 1


EVENT_TYPES: dict[str, type[Payload]] = {}
"""The one registry: event type name -> payload model."""

P = TypeVar("P", bound=Payload)


def register_event(name: str, *, schema_version: int = 1) -> Callable[[type[P]], type[P]]:
    """Class decorator: make ``cls`` the payload model of event type ``name``."""

    def decorate(cls: type[P]) -> type[P]:
        existing = EVENT_TYPES.get(name)
        if existing is not None and existing is not cls:
            raise ValueError(
                f"event type {name!r} is already registered to {existing.__qualname__}"
            )
        cls.event_type = name
        cls.schema_version = schema_version
        EVENT_TYPES[name] = cls
        return cls

    return decorate


def event_id_for(*parts: object) -> uuid.UUID:
    """A deterministic event id derived from ``parts`` (e.g. agent, cause id, index)."""
    return uuid.uuid5(EVENT_ID_NAMESPACE, "\x1f".join(str(p) for p in parts))


class Envelope(BaseModel):
    """One event: who said what, when, about which plan or job, and because of what."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: uuid.UUID = Field(default_factory=uuid.uuid4)
    type: str = Field(min_length=1)
    time: AwareDatetime = Field(default_factory=lambda: datetime.now(UTC))
    source: str = Field(min_length=1, description="Name of the agent (or tool) that published it")
    correlation_id: str = Field(min_length=1, description="Plan or job id; the message key")
    causation_id: uuid.UUID | None = Field(
        default=None, description="Id of the event this one answers, if any"
    )
    schema_version: int = Field(default=1, ge=1)
    payload: SerializeAsAny[Payload]

    @field_validator("time")
    @classmethod
    def _utc(cls, value: datetime) -> datetime:
        return value.astimezone(UTC)

    @field_validator("type")
    @classmethod
    def _known_type(cls, value: str) -> str:
        if value not in EVENT_TYPES:
            raise UnknownEventTypeError(
                f"unknown event type {value!r}; known: {', '.join(sorted(EVENT_TYPES))}",
                field="type",
                value=value,
            )
        return value

    @field_validator("schema_version")
    @classmethod
    def _known_version(cls, value: int, info: ValidationInfo) -> int:
        model = EVENT_TYPES.get(info.data.get("type", ""))
        if model is not None and value != model.schema_version:
            raise EventSchemaError(
                f"{model.event_type} schema_version {value} is not supported "
                f"(this build reads version {model.schema_version})",
                field="schema_version",
                value=value,
            )
        return value

    @field_validator("payload", mode="before")
    @classmethod
    def _typed_payload(cls, value: Any, info: ValidationInfo) -> Any:
        model = EVENT_TYPES.get(info.data.get("type", ""))
        if model is None:  # the type itself failed validation; that error is reported
            return value
        if isinstance(value, model):
            return value
        if isinstance(value, Payload):
            raise ValueError(
                f"payload is a {type(value).__name__}, but {model.event_type} carries "
                f"{model.__name__}"
            )
        return model.model_validate(value)

    @classmethod
    def of(
        cls,
        payload: Payload,
        *,
        source: str,
        correlation_id: str,
        causation_id: uuid.UUID | None = None,
        id: uuid.UUID | None = None,
        time: datetime | None = None,
    ) -> Self:
        """Wrap ``payload`` in an envelope of its registered type and schema version."""
        if not payload.event_type:
            raise ValueError(f"{type(payload).__name__} is not a registered event payload")
        return cls(
            id=id or uuid.uuid4(),
            type=payload.event_type,
            time=time or datetime.now(UTC),
            source=source,
            correlation_id=correlation_id,
            causation_id=causation_id,
            schema_version=payload.schema_version,
            payload=payload,
        )

    @property
    def key(self) -> str:
        """The message key on the bus."""
        return self.correlation_id

    def to_bytes(self) -> bytes:
        return self.model_dump_json().encode()

    def payload_as(self, model: builtins.type[P]) -> P:  # ``type`` is a field here
        """The payload as ``model``; raises EventSchemaError if the event carries another."""
        if not isinstance(self.payload, model):
            raise EventSchemaError(
                f"expected a {model.event_type} event, got {self.type}",
                field="type",
                value=self.type,
            )
        return self.payload


def decode_event(data: bytes | str) -> Envelope:
    """Bytes from the wire -> a validated Envelope, or a MalformedEventError naming why."""
    try:
        return Envelope.model_validate_json(data)
    except ValidationError as exc:
        pass_through = _find_our_error(exc)
        if pass_through is not None:
            raise pass_through from None
        raise _explain(exc, data) from None


def _find_our_error(exc: ValidationError) -> MalformedEventError | None:
    for error in exc.errors(include_url=False):
        cause = (error.get("ctx") or {}).get("error")
        if isinstance(cause, MalformedEventError):
            return cause
    return None


def _explain(exc: ValidationError, data: bytes | str) -> MalformedEventError:
    first = exc.errors(include_url=False)[0]
    if first["type"] == "json_invalid":
        sample = data[:80] if isinstance(data, str) else data[:80].decode("utf-8", "replace")
        return MalformedEventError(
            f"not JSON ({first['msg']}): {sample!r}", field="<message>", value=sample
        )
    if first["type"] == "model_type" and not first["loc"]:
        return MalformedEventError(
            f"an event must be a JSON object, got {first['input']!r:.80}",
            field="<message>",
            value=first["input"],
        )
    field = ".".join(str(part) for part in first["loc"]) or "<message>"
    event_type = _peek_type(data)
    where = f"{event_type} event" if event_type else "event"
    more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
    if first["type"] == "missing":
        return EventSchemaError(f"{where}: field required{more}", field=field, value=None)
    return EventSchemaError(
        f"{where}: {first['msg']}; got {first['input']!r:.120}{more}",
        field=field,
        value=first["input"],
    )


def _peek_type(data: bytes | str) -> str | None:
    try:
        parsed = json.loads(data)
    except ValueError:
        return None
    found = parsed.get("type") if isinstance(parsed, dict) else None
    return found if isinstance(found, str) else None


# -- the starter set of event types ----------------------------------------------------


@register_event("plan.requested")
class PlanRequested(Payload):
    """Someone asked for a plan (MCP, CLI or another agent); the Intelligence Plane picks up."""

    plan_id: str = Field(min_length=1)
    spec: WorkloadSpec
    text: str = Field(
        default="",
        description="The request in the user's words ('cheapest, finish by Friday 9am'); the "
        "Intelligence Plane infers goals from it where spec.goals leaves them unset",
    )
    approval: Literal["auto", "user"] | None = Field(
        default=None, description="Choose automatically or wait for plan.decision; None: default"
    )
    confirmed: Plan | None = Field(
        default=None,
        description="The plan the user confirmed (MCP submit_plan, rightsize submit): the "
        "plane hands exactly it to the Scheduler, inferring and re-planning nothing before "
        "it runs; None: plan the request",
    )


@register_event("estimate.requested")
class EstimateRequested(Payload):
    """Estimate the workload on these options (all the estimator knows when empty)."""

    plan_id: str = Field(min_length=1)
    spec: WorkloadSpec
    options: list[PlanOption] = Field(default_factory=list)


@register_event("estimate.ready")
class EstimateReady(Payload):
    """Resource Estimation's answer: one estimate per option it could estimate."""

    plan_id: str = Field(min_length=1)
    estimates: list[ResourceEstimate]
    needs_profiling: bool = Field(
        default=False, description="No confident estimator: profiling was asked for first"
    )
    unavailable: list[str] = Field(
        default_factory=list,
        description="Estimators that should have answered but could not, and why (the "
        "estimates came from those after them)",
    )


@register_event("plan.ready")
class PlanReady(Payload):
    """Optimization chose (or proposes) a plan."""

    plan: Plan


@register_event("profile.requested")
class ProfileRequested(Payload):
    """Run downsized profiling jobs so the estimators can learn this workload."""

    plan_id: str | None = None
    spec: WorkloadSpec
    reason: str = Field(min_length=1)


@register_event("job.submitted")
class JobSubmitted(Payload):
    """The Scheduler submitted (a segment of) a plan through an actuator."""

    plan_id: str = Field(min_length=1)
    system: str = Field(min_length=1)
    job_id: str = Field(min_length=1)
    option: PlanOption
    segment_index: int = Field(default=0, ge=0)


@register_event("job.state_changed")
class JobStateChanged(Payload):
    """A watched job moved from one state to another."""

    system: str = Field(min_length=1)
    job_id: str = Field(min_length=1)
    plan_id: str | None = None
    previous: JobState | None = None
    state: JobState
    reason: str = ""


@register_event("job.progress")
class JobProgress(Payload):
    """A running job reported how far it has got (its last RIGHTSIZE_PROGRESS line)."""

    system: str = Field(min_length=1)
    job_id: str = Field(min_length=1)
    plan_id: str | None = None
    unit: str = Field(min_length=1, description="The job's own unit: epoch, step...")
    done: float = Field(ge=0)
    total: float | None = Field(default=None, gt=0)
    fraction: float | None = Field(default=None, ge=0, le=1)


@register_event("job.finished")
class JobFinished(Payload):
    """A job ended (any terminal state); its record goes to history and to Model Promotion."""

    job: JobRecord


@register_event("estimator.retrain_requested")
class EstimatorRetrainRequested(Payload):
    """Model Promotion measured too much live error and wants a new candidate trained."""

    target: str = Field(min_length=1, description="What the estimator predicts, e.g. runtime_s")
    reason: str = Field(min_length=1)
    live_error: float | None = Field(default=None, ge=0)
    jobs_since_training: int = Field(default=0, ge=0)


@register_event("diagnostic.ping")
class PingRequested(Payload):
    """Ask an agent to answer; also the load of the bus benchmark and runtime tests."""

    seq: int = Field(ge=0)
    note: str = ""


@register_event("diagnostic.pong")
class Ponged(Payload):
    """An agent's answer to ``diagnostic.ping``."""

    seq: int = Field(ge=0)
    agent: str = Field(min_length=1)
    note: str = ""


@register_event("event.dead_lettered")
class DeadLettered(Payload):
    """A message an agent could not handle: the original bytes, where it was, and why."""

    agent: str = Field(min_length=1)
    topic: str
    partition: int = Field(ge=0)
    offset: int = Field(ge=0)
    key: str | None = None
    original_b64: str = Field(description="The message value exactly as received, base64")
    original_event_id: uuid.UUID | None = Field(
        default=None, description="Set when the message was a valid envelope"
    )
    error_type: str = Field(min_length=1)
    error: str
    attempts: int = Field(default=1, ge=1)

    @property
    def original(self) -> bytes:
        return base64.b64decode(self.original_b64)


# -- the agents' own event types (issue #8) ---------------------------------------------
# Every decision an agent takes is an event with its reason, so a plan's whole story can
# be read back from the bus (or its JSONL record) and replayed.


@register_event("plan.build_requested")
class PlanBuildRequested(Payload):
    """The Intelligence Plane asks Optimization for plans built on these estimates."""

    plan_id: str = Field(min_length=1)
    spec: WorkloadSpec
    estimates: list[ResourceEstimate]


@register_event("plan.options_ready")
class PlanOptionsReady(Payload):
    """Optimization's answer: the recommended plan (None: nothing fits) and alternatives."""

    plan_id: str = Field(min_length=1)
    recommended: Plan | None
    alternatives: list[Plan] = Field(default_factory=list, description="Next best, in order")
    infeasible: list[str] = Field(default_factory=list, description="Closest first, with why")
    notes: list[str] = Field(default_factory=list)
    replan: bool = Field(default=False, description="An answer to plan.replan_requested")


@register_event("plan.decision")
class PlanDecision(Payload):
    """A person's answer to a plan awaiting approval (the CLI, MCP or a chat assistant)."""

    plan_id: str = Field(min_length=1)
    approved: bool
    choice: int = Field(
        default=0, ge=0, description="0: the recommended plan; i: the i-th alternative"
    )
    by: str = Field(default="user", min_length=1)
    reason: str = ""


@register_event("plan.approved")
class PlanApproved(Payload):
    """Run this plan: the Scheduler submits it (idempotently: the plan id is the key)."""

    plan: Plan
    purpose: Literal["workload", "profiling"] = "workload"


@register_event("plan.replan_requested")
class PlanReplanRequested(Payload):
    """The Scheduler saw a running plan diverge from its estimate; Optimization re-plans."""

    plan_id: str = Field(min_length=1)
    spec: WorkloadSpec
    estimates: list[ResourceEstimate] = Field(default_factory=list)
    reason: str = Field(min_length=1)
    remaining_fraction: float = Field(gt=0, le=1, description="Share of the work left")
    projected_run_s: float | None = Field(
        default=None, gt=0, description="The whole run at the observed pace"
    )
    job_id: str | None = None
    # What the Intelligence Plane needs to judge the job that diverged (optional: older
    # producers did not send them).
    segment_index: int | None = Field(default=None, ge=0, description="The job's segment")
    done_fraction: float | None = Field(
        default=None, ge=0, le=1, description="Share of the workload done at its last line"
    )
    job_elapsed_s: float | None = Field(default=None, ge=0, description="Since the job started")
    job_walltime_s: int | None = Field(default=None, ge=1, description="The job's own limit")
    checkpointable: bool | None = Field(
        default=None, description="Whether a new job resumes where this one is"
    )


@register_event("plan.replan_decided")
class PlanReplanDecided(Payload):
    """The Intelligence Plane's answer to a re-plan request; the Scheduler carries it out.

    ``keep``: nothing changes (the reason says why). ``extend``: from segment
    ``start_index`` on, jobs ask for ``option`` (partition, walltime, memory) in the
    ``segments`` given, at the next segment boundary; the running job is left alone.
    ``resubmit``: cancel the running job ``job_id`` now and submit segment
    ``start_index`` with ``option`` (from its checkpoint when the workload has one, from
    the start otherwise). ``stop``: cancel it and end the plan with the reason.
    Idempotent by (plan id, revision): a revision is applied once.
    """

    plan_id: str = Field(min_length=1)
    revision: int = Field(ge=1, description="1 for the plan's first re-plan, and so on")
    action: Literal["keep", "extend", "resubmit", "stop"]
    reason: str = Field(min_length=1)
    job_id: str | None = Field(default=None, description="The job whose progress diverged")
    option: PlanOption | None = Field(default=None, description="What the next jobs ask for")
    estimate: ResourceEstimate | None = Field(
        default=None, description="The whole workload re-estimated at the observed pace"
    )
    start_index: int | None = Field(default=None, ge=0, description="First segment revised")
    segments: list[CascadeSegment] = Field(
        default_factory=list, description="Walltimes of the segments from start_index on"
    )


@register_event("plan.cancel_requested")
class PlanCancelRequested(Payload):
    """Cancel this plan (MCP ``cancel_plan``, ``rightsize cancel``); the Scheduler does it.

    The Scheduler owns the plan's ledger: it cancels the jobs still queued or running,
    ends the plan CANCELLED (``plan.finished``) and submits nothing more for it, not even
    a cascade segment whose predecessor ends after this request. Idempotent: a plan
    already over is left as it is.
    """

    plan_id: str = Field(min_length=1)
    reason: str = Field(default="cancelled by the user", min_length=1, max_length=500)
    by: str = Field(min_length=1, description="Who asked (the authenticated user)")


@register_event("plan.finished")
class PlanFinished(Payload):
    """A plan ended: completed, failed (with the explanation) or cancelled."""

    plan_id: str = Field(min_length=1)
    status: PlanStatus
    reason: str = ""
    job_ids: list[str] = Field(default_factory=list, description="Every job, in order")
    segments: int = Field(default=0, ge=0, description="Cascade segments that ran")
    purpose: Literal["workload", "profiling"] = "workload"


@register_event("schedule.decision")
class ScheduleDecision(Payload):
    """One Scheduler/Re-scheduler decision about a plan's jobs, and why."""

    plan_id: str = Field(min_length=1)
    action: Literal[
        "submit",
        "next_segment",
        "more_memory",
        "longer_walltime",
        "extend",
        "complete",
        "stop",
        "cancel",
        "replan",
        "revise",
        "resubmit",
    ]
    reason: str = Field(min_length=1)
    job_id: str | None = Field(default=None, description="The job the decision is about")
    new_job_id: str | None = Field(default=None, description="The job it submitted, if any")
    segment_index: int = Field(default=0, ge=0)
    attempt: int = Field(default=1, ge=1, description="Submissions of this segment so far")
    partition: str | None = None
    memory_mb: int | None = Field(default=None, ge=1)
    walltime_s: int | None = Field(default=None, ge=1)


@register_event("job.annotated")
class JobAnnotated(Payload):
    """Resource Estimation's prediction for a submitted job (kept with its history)."""

    system: str = Field(min_length=1)
    job_id: str = Field(min_length=1)
    plan_id: str | None = None
    estimator_id: str = Field(min_length=1)
    runtime_s: Interval
    memory_mb: Interval | None = None


@register_event("profile.completed")
class ProfileCompleted(Payload):
    """Profiling measured a workload (or failed to, with why); the profiles are in the KB."""

    plan_id: str | None = None
    model: str = Field(min_length=1)
    family: str = Field(min_length=1)
    profile_ids: list[str] = Field(default_factory=list)
    ok: bool = True
    reason: str = ""


@register_event("estimator.decision")
class EstimatorDecision(Payload):
    """Model Promotion's decision about a target's estimator, with the numbers behind it."""

    target: str = Field(min_length=1)
    decision: Literal["no_drift", "drift", "promoted", "rejected", "skipped"]
    reason: str = Field(min_length=1)
    estimator_id: str | None = Field(default=None, description="The promoted one at the time")
    candidate_id: str | None = None
    live_error: float | None = Field(default=None, ge=0)
    validation_error: float | None = Field(default=None, ge=0)
    candidate_error: float | None = Field(default=None, ge=0, description="On held-out jobs")
    incumbent_error: float | None = Field(default=None, ge=0, description="On the same jobs")
    jobs: int = Field(default=0, ge=0, description="Finished jobs the numbers come from")
    metric: str = Field(
        default="mape",
        description="What the errors measure: 'log' (mean |ln(predicted/actual)|) or 'mape'",
    )


@register_event("estimator.promoted")
class EstimatorPromoted(Payload):
    """A new estimator serves ``target``; agents load it on their next request."""

    estimator_id: str = Field(min_length=1)
    target: str = Field(min_length=1)
    replaced: str | None = None
    heldout_error: float | None = Field(default=None, ge=0)
