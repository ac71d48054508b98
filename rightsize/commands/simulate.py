"""``rightsize simulate``: replay a trace under scheduling policies and run-time estimates."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.table import Table

from knowledge_base.errors import RightsizeError
from rightsize.output import console, emit, fail
from simulations.estimates import model_estimates
from simulations.replay import Estimate, Policy, Schedule, replay
from simulations.report import write_report
from simulations.workload import load_swf

POLICIES: tuple[Policy, ...] = ("fcfs", "easy", "conservative")
ESTIMATES: tuple[Estimate, ...] = ("user", "last2", "model")
POLICY_BY_NAME: dict[str, Policy] = {p: p for p in POLICIES}
ESTIMATE_BY_NAME: dict[str, Estimate] = {e: e for e in ESTIMATES}


def simulate_command(
    trace: Path = typer.Option(..., "--trace", help="SWF trace (.swf or .swf.gz)"),
    policy: list[str] = typer.Option(
        ["easy"], "--policy", help="fcfs, easy or conservative; repeat to compare"
    ),
    estimate: list[str] = typer.Option(
        ["user"], "--estimate", help="user, last2 or model; repeat to compare"
    ),
    procs: int | None = typer.Option(None, "--procs", help="Machine size (default: header)"),
    report: Path | None = typer.Option(None, "--report", help="Write PNG plots + index.html"),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
) -> None:
    """Replay a whole trace; one run per policy x estimate."""
    for name, value, allowed in [("policy", p, POLICIES) for p in policy] + [
        ("estimate", e, ESTIMATES) for e in estimate
    ]:
        if value not in allowed:
            fail(RightsizeError(f"--{name}: {value!r} is not one of {', '.join(allowed)}"), as_json)
    try:
        workload = load_swf(trace, procs=procs)
        predicted = model_estimates(trace, workload) if "model" in estimate else None
        schedules: list[Schedule] = [
            replay(
                workload,
                policy=POLICY_BY_NAME[p],
                estimate=ESTIMATE_BY_NAME[e],
                model_estimates_s=predicted,
            )
            for p in policy
            for e in estimate
        ]
    except RightsizeError as error:
        fail(error, as_json)
    if report is not None:
        page = write_report(schedules, report)
        if not as_json:
            console.print(f"report: {page}")
    results = [s.result for s in schedules]

    def render() -> None:
        table = Table(
            title=f"{workload.name}: {workload.jobs:,} jobs replayed, "
            f"{sum(workload.dropped.values()):,} dropped "
            f"({dict(workload.dropped) or 'none'}), {workload.machine_procs} procs"
        )
        for column in (
            "policy",
            "estimate",
            "mean wait",
            "p90 wait",
            "mean bsld",
            "utilization",
            "killed",
            "jobs/s",
        ):
            table.add_column(column, justify="right")
        for r in results:
            table.add_row(
                r.policy,
                r.estimate,
                f"{r.mean_wait_s / 3600:.2f} h",
                f"{r.p90_wait_s / 3600:.2f} h",
                f"{r.mean_bsld:.2f}",
                f"{r.utilization:.3f}",
                f"{r.killed:,}",
                f"{r.jobs_per_s:,.0f}",
            )
        console.print(table)

    if len(results) == 1:
        emit(results[0], as_json, render)
    else:
        emit({"runs": [r.model_dump(mode="json") for r in results]}, as_json, render)
