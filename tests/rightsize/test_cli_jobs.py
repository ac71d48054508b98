"""``rightsize submit / status / watch / cancel / jobs`` through the embedded center.

The embedded center runs every agent in the command's process on the simulated cluster
(on the wall clock, unless RIGHTSIZE_SIMULATED_SPEEDUP says faster; a job runs 80% of
its walltime: the cluster's own model); ``tests/agents/test_ledger.py`` covers the
ledger API they call, and the e2e test runs them on the real local SLURM.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from rightsize.cli import app

runner = CliRunner()

JOB = """\
name: tiny
user: alice
workload:
  kind: generic
  application: sleep
  nodes: 1
  cores: 1
  walltime_s: {walltime_s}
goals:
  systems: [pitzer]
"""


@pytest.fixture(autouse=True)
def _isolated_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RIGHTSIZE_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("RIGHTSIZE_EXECUTOR", "simulated")
    monkeypatch.setenv("RIGHTSIZE_POLL_INTERVAL_S", "0.2")
    for name in ("KB_URL", "MONGO_URL", "KAFKA_BOOTSTRAP", "LLM_MODEL"):
        monkeypatch.delenv(f"RIGHTSIZE_{name}", raising=False)


def workload(tmp_path: Path, walltime_s: int) -> str:
    path = tmp_path / f"job-{walltime_s}.yaml"
    path.write_text(JOB.format(walltime_s=walltime_s))
    return str(path)


def run(*args: str, code: int = 0) -> Any:
    result = runner.invoke(app, list(args))
    assert result.exit_code == code, result.output
    return json.loads(result.stdout) if "--json" in args else result.stdout


def test_submit_wait_runs_the_plan_to_its_end_and_status_and_jobs_read_the_ledger(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RIGHTSIZE_SIMULATED_SPEEDUP", "10")  # its 48 s in under 5 s
    done = run("submit", workload(tmp_path, 5), "--wait", "--json", "--timeout-s", "120")

    assert done["state"] == "completed"
    assert done["plan_id"].startswith("tiny-") and done["option_id"].startswith("opt-")
    [job] = done["jobs"]
    assert (job["state"], job["native_state"], job["exit_code"]) == ("completed", "COMPLETED", 0)
    # the simulated cluster's own model: a job runs 80% of its walltime (1 min)
    assert job["elapsed_s"] == pytest.approx(48, abs=2)

    plans = run("status", "--json")["plans"]
    assert [(p["plan_id"], p["state"], p["segment"], p["segments"]) for p in plans] == [
        (done["plan_id"], "completed", 1, 1)
    ]
    assert run("status", done["plan_id"], "--json")["plans"][0]["jobs"][0]["job_id"] == "1"
    jobs = run("jobs", "--json")["jobs"]
    assert [(j["plan_id"], j["job_id"], j["state"]) for j in jobs] == [
        (done["plan_id"], "1", "completed")
    ]
    again = run("cancel", done["plan_id"], "--json")
    assert again["already_final"] and again["status"] == "completed"
    assert "completed" in run("watch", done["plan_id"])  # over already: one line, exit 0


def test_cancel_asks_the_scheduler_which_ends_the_plan_and_its_job(tmp_path: Path) -> None:
    sent = run("submit", workload(tmp_path, 600), "--json")
    assert sent["state"] in ("submitted", "running") and len(sent["jobs"]) == 1

    cancelled = run("cancel", sent["plan_id"], "--reason", "wrong deck", "--json")

    assert cancelled["status"] == "cancelled" and cancelled["requested"]
    [plan] = run("status", sent["plan_id"], "--json")["plans"]
    assert plan["reason"] == "wrong deck (by alice)" and plan["cancelled_by"] == "alice"
    assert [j["state"] for j in plan["jobs"]] == ["cancelled"]


def test_bad_input_names_the_option_or_the_plan(tmp_path: Path) -> None:
    out = run("submit", workload(tmp_path, 5), "--option", "99", "--json", code=2)
    assert out["field"] == "--option" and "99" in out["error"]
    out = run("status", "no-such-plan", "--json", code=2)
    assert out["field"] == "PLAN_ID" and "no-such-plan" in out["error"]
    assert run("status", "--json") == {"plans": []}  # nothing was stored on the way


def test_a_refused_submission_withdraws_its_draft_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The ledger's check refuses the option (here: told to, as it would if the catalog
    changed between the plan and the submission; ``tests/agents/test_ledger.py`` has
    the real refusals). Before, the draft ``submit`` had stored stayed a draft for ever
    in ``status``; now it ends cancelled with the reason, and the error names it."""
    import agents.ledger
    from tools.planning.confirm import Refusal

    def refuse(*args: object, **kwargs: object) -> Refusal:
        return Refusal("option_id", "no longer fits: walltime exceeds batch's limit")

    monkeypatch.setattr(agents.ledger, "confirm", refuse)

    out = run("submit", workload(tmp_path, 5), "--json", code=2)

    assert out["kind"] == "SubmissionRefused" and "no longer fits" in out["error"]
    [plan] = run("status", "--json")["plans"]
    assert plan["plan_id"] in out["error"] and "withdrawn" in out["error"]
    assert plan["state"] == "cancelled" and plan["jobs"] == []
    assert plan["reason"].startswith("not submitted: option_id: no longer fits")


def test_the_view_says_segment_k_of_n_progress_and_elapsed_against_walltime() -> None:
    """What ``rightsize watch`` prints, from the ledger and the executor's answers."""
    from datetime import UTC, datetime, timedelta

    from agents.ledger import view
    from knowledge_base.records import CascadeSegment, JobState, PlanStatus, SegmentState
    from rightsize.commands.jobs import _line
    from tests.agents.harness import dnn_spec, make_plan
    from tools.actuators.model import JobStatus
    from tools.actuators.monitor import Progress

    started = datetime(2026, 1, 1, tzinfo=UTC)
    plan = make_plan("p-view", dnn_spec(), segments=3)
    plan = plan.model_copy(
        update={
            "status": PlanStatus.RUNNING,
            "segments": [
                *plan.segments,
                CascadeSegment(index=0, walltime_s=60, job_id="7", state=SegmentState.COMPLETED),
                CascadeSegment(index=1, walltime_s=60, job_id="8", state=SegmentState.RUNNING),
            ],
        }
    )
    running = JobStatus(
        job_id="8", state=JobState.RUNNING, native_state="RUNNING", start_time=started
    )

    shown = view(
        plan,
        statuses={"8": running},
        progress=Progress("epoch", 20, 40),
        now=started + timedelta(seconds=95),
    )

    assert (shown.segment, shown.segments, len(shown.jobs)) == (2, 3, 2)
    assert (shown.progress, shown.progress_line) == (0.5, "epoch 20/40")
    assert (shown.elapsed_s, shown.walltime_s) == (95.0, 60)
    assert _line(shown) == (
        "p-view: running | testcluster/debug | segment 2 of 3 | epoch 20/40 (50%) | 1:35 of 1:00"
    )


def test_a_plan_the_executor_can_never_run_fails_with_its_reason_and_wait_exits_1(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An executor without GPUs (registered in place of the simulated cluster) refuses a
    GPU job: the plan ends failed with the executor's words, at once; before, the
    Scheduler only logged it and ``submit --wait`` waited for ever."""
    from rightsize import wiring
    from tools.actuators.simulated import SimulatedCluster

    def no_gpus(settings: object, system: object) -> SimulatedCluster:
        return SimulatedCluster(nodes=4, cores_per_node=48, memory_mb_per_node=400_000)

    monkeypatch.setitem(wiring.EXECUTORS, "simulated", no_gpus)
    path = tmp_path / "gpu.yaml"
    path.write_text(JOB.format(walltime_s=60).replace("  cores: 1\n", "  cores: 1\n  gpus: 1\n"))

    result = runner.invoke(app, ["submit", str(path), "--wait", "--timeout-s", "120"])

    assert result.exit_code == 1, result.output
    said = " ".join(result.stdout.split())
    assert ": failed on pitzer/" in said
    assert "can never run on this simulated cluster: GPUs per node 1 > 0" in said
    plans = run("status", "--json")["plans"]
    assert [p["state"] for p in plans] == ["failed"]
