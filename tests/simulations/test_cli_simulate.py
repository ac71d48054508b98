"""``rightsize simulate`` end to end on a real trace: JSON keys, report files, bad input."""

from __future__ import annotations

import csv
import gzip
import json
from pathlib import Path

from typer.testing import CliRunner

from rightsize.cli import app
from simulations.report import SCHEDULE_COLUMNS

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
    assert "pass --procs" in " ".join(headerless.stderr.split())  # wrapped at any width
    sized = runner.invoke(app, ["simulate", "--trace", str(trace), "--procs", "8", "--json"])
    assert sized.exit_code == 0
    assert json.loads(sized.stdout)["jobs"] == 1


def _trace_head(shared_data: Path, out: Path, jobs: int) -> Path:
    """The first ``jobs`` jobs of KTH-SP2 with its header: a real trace, quick to replay."""
    source = shared_data / "traces" / "KTH-SP2-1996-2.1-cln.swf.gz"
    kept = 0
    with gzip.open(source, "rt") as reader, gzip.open(out, "wt") as writer:
        for line in reader:
            if not line.startswith(";"):
                kept += 1
                if kept > jobs:
                    break
            writer.write(line)
    return out


def test_schedule_out_never_ends_a_job_before_its_run_or_request_would(
    shared_data: Path, tmp_path: Path
) -> None:
    """Every policy, rightsize included: each job runs min(run, request), killed at its
    request and only there, after its submission; the file holds every replayed job."""
    trace = _trace_head(shared_data, tmp_path / "kth-head.swf.gz", 3000)
    out = tmp_path / "schedule.csv"
    result = runner.invoke(
        app,
        [
            "simulate",
            "--trace",
            str(trace),
            "--policy",
            "easy",
            "--policy",
            "rightsize",
            "--estimate",
            "user",
            "--estimate",
            "exact",
            "--backfill-order",
            "fcfs",
            "--backfill-order",
            "sjbf",
            "--schedule-out",
            str(out),
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    runs = json.loads(result.stdout)["runs"]
    assert [(r["policy"], r["estimate"], r["order"]) for r in runs] == [
        ("easy", "user", "fcfs"),
        ("easy", "user", "sjbf"),
        ("easy", "exact", "fcfs"),
        ("easy", "exact", "sjbf"),
        ("rightsize", "model", "xf"),
    ]
    assert [r["oracle"] for r in runs] == [False, False, True, True, False]
    files = sorted(tmp_path.glob("schedule.*.csv"))
    assert len(files) == 5
    for path in files:
        with path.open(newline="") as handle:
            rows = list(csv.DictReader(handle))
        assert tuple(rows[0]) == SCHEDULE_COLUMNS
        assert len(rows) == runs[0]["jobs"]
        for row in rows:
            start, end = int(row["start_s"]), int(row["end_s"])
            run, request = int(row["run_s"]), int(row["requested_s"])
            assert start >= int(row["submit_s"]), (path.name, row)
            assert end - start == min(run, request), (path.name, row)
            assert row["killed"] == ("1" if run > request else "0"), (path.name, row)


def test_schedule_out_and_order_errors_are_clear_and_write_nothing(
    shared_data: Path, tmp_path: Path
) -> None:
    trace = _trace_head(shared_data, tmp_path / "kth-head.swf.gz", 200)
    missing = runner.invoke(
        app,
        ["simulate", "--trace", str(trace), "--schedule-out", str(tmp_path / "no" / "s.csv")],
    )
    assert missing.exit_code == 2
    said = " ".join(missing.stderr.split())  # the message wraps where the tmp path ends
    assert "--schedule-out" in said and "does not exist" in said
    folder = runner.invoke(
        app, ["simulate", "--trace", str(trace), "--schedule-out", str(tmp_path)]
    )
    assert folder.exit_code == 2
    assert "is a directory" in " ".join(folder.stderr.split())  # wrapped as above
    order = runner.invoke(app, ["simulate", "--trace", str(trace), "--backfill-order", "ljf"])
    assert order.exit_code == 2
    assert "--backfill-order: 'ljf' is not one of fcfs, sjbf, saf, xf" in order.stderr
    assert not list(tmp_path.glob("*.csv"))


def test_a_trace_without_user_ids_says_user_and_last2_coincide(tmp_path: Path) -> None:
    trace = tmp_path / "anonymous.swf.gz"
    with gzip.open(trace, "wt") as handle:
        handle.write("; MaxProcs: 8\n")
        for job in range(1, 7):  # field 12, the user id, is -1: not recorded
            handle.write(
                f"{job} {job * 10} 5 {50 * job} 4 -1 -1 4 {120 * job} -1 1 -1 1 1 1 1 -1 -1\n"
            )
    args = ["simulate", "--trace", str(trace), "--estimate", "user", "--estimate", "last2"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "user and last2 coincide: the trace has no user ids" in " ".join(result.stdout.split())
    quiet = runner.invoke(app, [*args, "--json"])
    assert quiet.exit_code == 0
    assert len(json.loads(quiet.stdout)["runs"]) == 2  # stdout is the JSON alone
