"""``rightsize history-bench`` through the real console script's app."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from rightsize.cli import app

runner = CliRunner()
KTH = "KTH-SP2-1996-2.1-cln.swf.gz"
GOOD = "{i} {submit} 0 {run} 4 -1 -1 4 3600 -1 1 {user} 1 -1 -1 -1 -1 -1"


def test_json_has_the_keys_other_programs_read(shared_data: Path) -> None:
    result = runner.invoke(
        app,
        [
            "history-bench",
            "--trace",
            str(shared_data / "traces" / KTH),
            "--json",
            "--limit",
            "1500",
        ],
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["jobs"] > 1000
    assert data["jobs_read"] == 1500
    assert data["seconds"] > 0
    for name in ("user_request", "last2", "model_p50", "model_safe"):
        figures = data["predictors"][name]
        assert set(figures) == {"accuracy", "median_ape", "under_rate"}
        assert 0 < figures["accuracy"] <= 1
        assert 0 <= figures["under_rate"] <= 1


def test_people_get_a_table_naming_every_predictor(shared_data: Path) -> None:
    result = runner.invoke(
        app, ["history-bench", "--trace", str(shared_data / "traces" / KTH), "--limit", "300"]
    )
    assert result.exit_code == 0, result.output
    for label in ("user request", "last-2 (EASY++)", "model p50", "model safe"):
        assert label in result.stdout


def test_skipped_lines_are_counted_and_the_rest_is_scored(tmp_path: Path) -> None:
    lines = [GOOD.format(i=i, submit=i * 100, run=50 + i % 7, user=i % 4) for i in range(1, 80)]
    lines[10] = "11 1000 0 bad 4"
    lines[20] = lines[20].replace(" 0 ", " -9 ", 1)
    trace = tmp_path / "small.swf"
    trace.write_text("; MaxProcs: 16\n" + "\n".join(lines) + "\n")
    result = runner.invoke(app, ["history-bench", "--trace", str(trace), "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["jobs_read"] == 77
    assert data["lines_skipped"] == 2
    assert data["skipped_by_reason"] == {"wrong_field_count": 1, "negative_time": 1}
    assert data["jobs"] == 77


def test_a_missing_trace_is_an_error_naming_the_path(tmp_path: Path) -> None:
    missing = tmp_path / "none.swf"
    result = runner.invoke(app, ["history-bench", "--trace", str(missing), "--json"])
    assert result.exit_code == 2
    body = json.loads(result.stdout)
    assert body["kind"] == "InvalidInputError"
    assert body["field"] == "path"
    assert "not found" in body["error"]
