"""The envelope, the event-type registry and the errors for what cannot be decoded."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta, timezone

import pytest

from agents.events import (
    EVENT_TYPES,
    EstimatorRetrainRequested,
    EventSchemaError,
    JobStateChanged,
    MalformedEventError,
    Payload,
    PingRequested,
    PlanRequested,
    Ponged,
    UnknownEventTypeError,
    decode_event,
    event_id_for,
    register_event,
)
from agents.events import Envelope as Env
from agents.topics import ALL_TOPICS, TOPIC_BY_EVENT_TYPE, topic_for
from knowledge_base.errors import InvalidInputError
from knowledge_base.records import JobState
from knowledge_base.workload import WorkloadSpec


def wire(event: Env) -> dict[str, object]:
    loaded: dict[str, object] = json.loads(event.to_bytes())
    return loaded


def test_an_envelope_survives_the_wire_with_its_typed_payload() -> None:
    spec = WorkloadSpec.model_validate(
        {
            "name": "lammps-run",
            "user": "ana",
            "workload": {"kind": "generic", "application": "lammps", "walltime_s": "2 h"},
        }
    )
    cause = uuid.uuid4()
    event = Env.of(
        PlanRequested(plan_id="plan-1", spec=spec),
        source="intelligence-plane",
        correlation_id="plan-1",
        causation_id=cause,
    )
    back = decode_event(event.to_bytes())
    assert back == event
    assert isinstance(back.payload, PlanRequested)
    assert back.payload.spec.workload.walltime_s == 7200  # type: ignore[union-attr]
    assert (back.type, back.schema_version, back.key) == ("plan.requested", 1, "plan-1")
    assert back.causation_id == cause


def test_times_are_stored_in_utc_and_naive_times_are_refused() -> None:
    plus_two = datetime(2026, 1, 1, 12, 0, tzinfo=timezone(timedelta(hours=2)))
    event = Env.of(PingRequested(seq=0), source="t", correlation_id="c", time=plus_two)
    assert event.time == datetime(2026, 1, 1, 10, 0, tzinfo=UTC)
    assert event.time.tzinfo == UTC

    naive = wire(event) | {"time": "2026-01-01T10:00:00"}
    with pytest.raises(EventSchemaError) as caught:
        decode_event(json.dumps(naive))
    assert caught.value.field == "time"


@pytest.mark.parametrize(
    ("data", "error", "field", "value"),
    [
        (b"{nope", MalformedEventError, "<message>", "{nope"),
        (b"[1, 2]", MalformedEventError, "<message>", [1, 2]),
        (b'"just a string"', MalformedEventError, "<message>", "just a string"),
    ],
    ids=["not-json", "array", "string"],
)
def test_bytes_that_are_not_an_event_object_raise_malformed(
    data: bytes, error: type[Exception], field: str, value: object
) -> None:
    with pytest.raises(error) as caught:
        decode_event(data)
    assert isinstance(caught.value, InvalidInputError)
    assert caught.value.field == field
    assert caught.value.value == value


def test_an_unknown_type_names_the_type_and_what_is_known() -> None:
    raw = wire(Env.of(PingRequested(seq=1), source="t", correlation_id="c"))
    raw["type"] = "job.teleported"
    with pytest.raises(UnknownEventTypeError) as caught:
        decode_event(json.dumps(raw))
    assert (caught.value.field, caught.value.value) == ("type", "job.teleported")
    assert "job.teleported" in str(caught.value)
    assert "job.finished" in str(caught.value)


@pytest.mark.parametrize(
    ("change", "field", "value"),
    [
        ({"payload": {"seq": -3}}, "payload.seq", -3),
        ({"payload": {"seq": 1, "colour": "red"}}, "payload.colour", "red"),
        ({"payload": {}}, "payload.seq", None),
        ({"source": ""}, "source", ""),
        ({"id": "not-a-uuid"}, "id", "not-a-uuid"),
        ({"schema_version": 9}, "schema_version", 9),
    ],
    ids=["payload-range", "payload-extra", "payload-missing", "empty-source", "bad-id", "version"],
)
def test_a_schema_violation_names_the_field_and_the_value(
    change: dict[str, object], field: str, value: object
) -> None:
    raw = wire(Env.of(PingRequested(seq=1), source="t", correlation_id="c")) | change
    with pytest.raises(EventSchemaError) as caught:
        decode_event(json.dumps(raw))
    assert (caught.value.field, caught.value.value) == (field, value)
    assert field in str(caught.value)


def test_a_missing_header_field_is_named() -> None:
    raw = wire(Env.of(PingRequested(seq=1), source="t", correlation_id="c"))
    del raw["correlation_id"]
    with pytest.raises(EventSchemaError, match="correlation_id: .*field required"):
        decode_event(json.dumps(raw))


def test_a_payload_of_another_type_is_refused() -> None:
    with pytest.raises(ValueError, match="diagnostic.ping carries PingRequested"):
        Env(
            type="diagnostic.ping", source="t", correlation_id="c", payload=Ponged(seq=1, agent="a")
        )


def test_payload_as_returns_the_typed_payload_or_names_the_mismatch() -> None:
    event = Env.of(
        JobStateChanged(system="expanse", job_id="42", state=JobState.RUNNING),
        source="scheduler",
        correlation_id="job-42",
    )
    assert event.payload_as(JobStateChanged).state is JobState.RUNNING
    with pytest.raises(EventSchemaError, match="expected a diagnostic.ping event, got job"):
        event.payload_as(PingRequested)


def test_one_name_cannot_be_registered_to_two_payload_models() -> None:
    with pytest.raises(ValueError, match="already registered to PingRequested"):

        @register_event("diagnostic.ping")
        class Impostor(Payload):
            seq: int

    assert EVENT_TYPES["diagnostic.ping"] is PingRequested


def test_derived_event_ids_are_deterministic_and_distinct_per_part() -> None:
    cause = uuid.uuid4()
    assert event_id_for("relay", cause, 0) == event_id_for("relay", cause, 0)
    assert event_id_for("relay", cause, 0) != event_id_for("relay", cause, 1)
    assert event_id_for("relay", cause, 0) != event_id_for("other", cause, 0)


def test_every_event_type_has_a_topic_and_every_topic_is_listed() -> None:
    assert set(TOPIC_BY_EVENT_TYPE) == set(EVENT_TYPES)
    assert set(TOPIC_BY_EVENT_TYPE.values()) <= set(ALL_TOPICS)
    assert topic_for("estimator.retrain_requested") == "rightsize.estimators"
    assert EstimatorRetrainRequested.event_type == "estimator.retrain_requested"
    with pytest.raises(KeyError, match="no.such"):
        topic_for("no.such")
