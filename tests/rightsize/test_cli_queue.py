"""``rightsize queue predict`` and ``queue bench`` through the console script's app."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from rightsize.cli import app
from tools.waits.jobs import load_history

runner = CliRunner()
KTH = "KTH-SP2-1996-2.1-cln.swf.gz"


def _snapshot_file(tmp_path: Path, document: dict[str, Any]) -> Path:
    path = tmp_path / "snapshot.json"
    path.write_text(json.dumps(document))
    return path


def _document(**changes: Any) -> dict[str, Any]:
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
            }
        ],
        "pending": [
            {"job_id": "p1", "user": "b", "procs": 5, "submit_s": 500, "requested_s": 1800},
            {"job_id": "p2", "user": "c", "procs": 2, "submit_s": 900, "requested_s": 600},
        ],
    }
    document.update(changes)
    return document


def test_predict_and_bench_give_the_same_starts(shared_data: Path, tmp_path: Path) -> None:
    trace = shared_data / "traces" / KTH
    table = load_history(trace)
    t = float(round(table.submit_s.min() + 75 * 86400))
    # the busiest of a few nearby instants, so the queue is not empty
    t = max((t + k * 3600 for k in range(12)), key=lambda s: len(table.pending_index(s)))
    snapshot = table.snapshot_at(t)
    assert snapshot.pending
    path = _snapshot_file(tmp_path, snapshot.model_dump(mode="json"))
    predicted = runner.invoke(
        app, ["queue", "predict", str(path), "--history", str(trace), "--json"]
    )
    assert predicted.exit_code == 0, predicted.output
    benched = runner.invoke(
        app, ["queue", "bench", "--trace", str(trace), "--at", f"{t:.0f}", "--json"]
    )
    assert benched.exit_code == 0, benched.output
    one = json.loads(predicted.stdout)
    replay = json.loads(benched.stdout)
    assert set(one) == {"predictions"}
    assert set(one["predictions"][0]) == {"job_id", "start_s", "p10_s", "p90_s"}
    assert replay["snapshots"][0]["taken_at"] == t
    assert replay["snapshots"][0]["predictions"] == one["predictions"]
    assert [p["job_id"] for p in one["predictions"]] == [j.job_id for j in snapshot.pending]
    starts = np.array([p["start_s"] for p in one["predictions"]])
    assert (starts >= t).all()


def test_predict_without_history_simulates(tmp_path: Path) -> None:
    result = runner.invoke(
        app, ["queue", "predict", str(_snapshot_file(tmp_path, _document())), "--json"]
    )
    assert result.exit_code == 0, result.output
    rows = {p["job_id"]: p for p in json.loads(result.stdout)["predictions"]}
    assert rows["p2"]["start_s"] == 1000  # fits the two idle processors now
    assert rows["p1"]["start_s"] > 1000  # needs the running job's processors


def test_an_empty_queue_prints_an_empty_list(tmp_path: Path) -> None:
    path = _snapshot_file(tmp_path, _document(pending=[]))
    result = runner.invoke(app, ["queue", "predict", str(path), "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == {"predictions": []}


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"colour": "blue"}, "colour"),
        ({"taken_at": -1}, "taken_at"),
        (
            {"pending": [{"job_id": "r1", "procs": 1, "submit_s": 5, "requested_s": 60}]},
            "also running",
        ),
    ],
)
def test_bad_snapshots_exit_2_naming_the_field(
    tmp_path: Path, change: dict[str, Any], named: str
) -> None:
    result = runner.invoke(
        app, ["queue", "predict", str(_snapshot_file(tmp_path, _document(**change))), "--json"]
    )
    assert result.exit_code == 2
    body = json.loads(result.stdout)
    assert "predictions" not in body
    assert named in body["error"] or named == body["field"]


def test_a_history_that_is_not_swf_exits_2(tmp_path: Path) -> None:
    history = tmp_path / "history.swf"
    history.write_text(json.dumps(_document()))
    result = runner.invoke(
        app,
        [
            "queue",
            "predict",
            str(_snapshot_file(tmp_path, _document())),
            "--history",
            str(history),
            "--json",
        ],
    )
    assert result.exit_code == 2
    assert "no job line" in json.loads(result.stdout)["error"]


def test_bench_refuses_an_instant_that_is_not_a_number(shared_data: Path) -> None:
    result = runner.invoke(
        app,
        [
            "queue",
            "bench",
            "--trace",
            str(shared_data / "traces" / KTH),
            "--at",
            "10,soon",
            "--json",
        ],
    )
    assert result.exit_code == 2
    assert json.loads(result.stdout)["field"] == "--at"


def test_an_unknown_system_for_history_exits_2_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RIGHTSIZE_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("RIGHTSIZE_KB_URL", raising=False)
    path = _snapshot_file(tmp_path, _document())
    result = runner.invoke(app, ["queue", "predict", str(path), "--system", "nope", "--json"])
    assert result.exit_code == 2
    assert "nope" in json.loads(result.stdout)["error"]
    known = runner.invoke(app, ["queue", "predict", str(path), "--system", "pitzer", "--json"])
    assert known.exit_code == 0, known.output
    assert len(json.loads(known.stdout)["predictions"]) == 2
