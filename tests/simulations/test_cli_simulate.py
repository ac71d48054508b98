"""``rightsize simulate`` end to end on a real trace: JSON keys, report files, bad input."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from typer.testing import CliRunner

from rightsize.cli import app

runner = CliRunner()


def test_json_carries_the_keys_other_programs_read(shared_data: Path) -> None:
    trace = shared_data / "traces" / "KTH-SP2-1996-2.1-cln.swf.gz"
    result = runner.invoke(
        app,
        ["simulate", "--trace", str(trace), "--policy", "easy", "--estimate", "last2", "--json"],
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    for key in (
        "jobs",
        "dropped",
        "mean_wait_s",
        "mean_bsld",
        "utilization",
        "killed",
        "seconds",
        "jobs_per_s",
    ):
        assert key in data
    assert data["jobs"] + data["dropped"] == 28476  # every job of the trace accounted for
    assert 0 < data["utilization"] <= 1
    assert data["mean_bsld"] >= 1


def test_report_compares_the_policies_run(shared_data: Path, tmp_path: Path) -> None:
    trace = shared_data / "traces" / "KTH-SP2-1996-2.1-cln.swf.gz"
    result = runner.invoke(
        app,
        [
            "simulate",
            "--trace",
            str(trace),
            "--policy",
            "fcfs",
            "--policy",
            "easy",
            "--report",
            str(tmp_path),
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    runs = json.loads(result.stdout)["runs"]
    assert [r["policy"] for r in runs] == ["fcfs", "easy"]
    assert runs[1]["mean_bsld"] < runs[0]["mean_bsld"]  # backfilling helps on KTH
    for name in ("wait.png", "bsld.png", "utilization.png", "index.html"):
        assert (tmp_path / name).stat().st_size > 0
    assert "easy-user" in (tmp_path / "index.html").read_text()


def test_unknown_policy_and_headerless_trace_are_clear_errors(tmp_path: Path) -> None:
    trace = tmp_path / "bare.swf.gz"
    with gzip.open(trace, "wt") as handle:
        handle.write("1 0 5 100 4 -1 -1 4 200 -1 1 1 1 1 1 1 -1 -1\n")
    bad = runner.invoke(app, ["simulate", "--trace", str(trace), "--policy", "sjf"])
    assert bad.exit_code == 2
    assert "--policy: 'sjf'" in bad.stderr
    headerless = runner.invoke(app, ["simulate", "--trace", str(trace)])
    assert headerless.exit_code == 2
    assert "pass --procs" in headerless.stderr
    sized = runner.invoke(app, ["simulate", "--trace", str(trace), "--procs", "8", "--json"])
    assert sized.exit_code == 0
    assert json.loads(sized.stdout)["jobs"] == 1
