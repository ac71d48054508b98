"""The snapshot file: what it accepts and the errors that name the field."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from knowledge_base.errors import InvalidInputError
from tools.waits.snapshot import load_wait_snapshot, parse_wait_snapshot


def _snapshot(**changes: Any) -> dict[str, Any]:
    document: dict[str, Any] = {
        "taken_at": 1000,
        "total_procs": 10,
        "running": [
            {
                "job_id": "r1",
                "user": "a",
                "procs": 8,
                "submit_s": 0,
                "start_s": 100,
                "requested_s": 3600,
                "queue": "batch",
            }
        ],
        "pending": [
            {"job_id": "p1", "user": "b", "procs": 5, "submit_s": 500, "requested_s": 1800}
        ],
    }
    document.update(changes)
    return document


def test_a_valid_snapshot_reads_with_queue_optional() -> None:
    snapshot = parse_wait_snapshot(_snapshot())
    assert snapshot.pending[0].queue is None
    assert snapshot.running[0].queue == "batch"


def test_an_unknown_field_is_named() -> None:
    with pytest.raises(InvalidInputError) as caught:
        parse_wait_snapshot(_snapshot(colour="blue"))
    assert caught.value.field == "colour"


def test_a_negative_time_is_named_with_its_value() -> None:
    document = _snapshot()
    document["pending"][0]["submit_s"] = -5
    with pytest.raises(InvalidInputError) as caught:
        parse_wait_snapshot(document)
    assert caught.value.field == "pending.0.submit_s"
    assert caught.value.value == -5


def test_a_job_both_running_and_pending_is_refused() -> None:
    document = _snapshot()
    document["pending"][0]["job_id"] = "r1"
    with pytest.raises(InvalidInputError, match="r1.*also running"):
        parse_wait_snapshot(document)


def test_a_job_submitted_after_the_snapshot_is_refused() -> None:
    document = _snapshot()
    document["pending"][0]["submit_s"] = 2000
    with pytest.raises(InvalidInputError, match="after taken_at"):
        parse_wait_snapshot(document)


def test_a_file_that_is_not_json_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "s.json"
    path.write_text("{nope")
    with pytest.raises(InvalidInputError) as caught:
        load_wait_snapshot(path)
    assert caught.value.source == str(path)
    path.write_text(json.dumps(_snapshot(pending=[])))
    assert load_wait_snapshot(path).pending == []


def test_a_job_listed_twice_or_started_after_the_snapshot_is_refused() -> None:
    document = _snapshot()
    document["pending"].append(dict(document["pending"][0]))
    with pytest.raises(InvalidInputError, match="pending.1.job_id 'p1' is listed twice"):
        parse_wait_snapshot(document)
    document = _snapshot()
    document["running"][0]["start_s"] = 5000
    with pytest.raises(InvalidInputError, match="running.0.start_s"):
        parse_wait_snapshot(document)
