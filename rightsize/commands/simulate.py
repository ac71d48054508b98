"""``rightsize simulate``: replay a trace under scheduling policies and run-time estimates."""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.table import Table

from knowledge_base.errors import RightsizeError
from rightsize.output import console, emit, fail
from rightsize.progress import progress

if TYPE_CHECKING:  # the simulator (numba, matplotlib, the agents) loads when a run starts
    from simulations.replay import Estimate, Policy, Schedule
    from tools.actuators.simulated import ClusterPolicy

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
    agents: bool = typer.Option(
        False,
        "--agents",
        help="Also run the production agents in the loop on a window of the trace and "
        "compare them with the plain policy on the same jobs",
    ),
    agents_jobs: int = typer.Option(
        300, "--agents-jobs", help="With --agents: how many jobs the window holds"
    ),
    agents_history: int = typer.Option(
        3000,
        "--agents-history",
        help="With --agents: the jobs before the window, the center's history when it opens",
    ),
    event_log: Path | None = typer.Option(
        None,
        "--event-log",
        help="With --agents: append every event the bus carried to this JSONL log "
        "(for rightsize replay)",
    ),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
) -> None:
    """Replay a whole trace; one run per policy x estimate (or, with --agents, a window of
    it with and without the agents)."""
    for name, value, allowed in [("policy", p, POLICIES) for p in policy] + [
        ("estimate", e, ESTIMATES) for e in estimate
    ]:
        if value not in allowed:
            fail(RightsizeError(f"--{name}: {value!r} is not one of {', '.join(allowed)}"), as_json)
    if agents:
        _simulate_with_agents(
            trace, policy, estimate, procs, agents_jobs, agents_history, report, event_log, as_json
        )
        return
    from simulations.estimates import model_estimates
    from simulations.replay import replay
    from simulations.report import write_report
    from simulations.workload import load_swf

    try:
        with progress(f"replaying {trace.name}", quiet=as_json):
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


def _simulate_with_agents(
    trace: Path,
    policy: list[str],
    estimate: list[str],
    procs: int | None,
    jobs: int,
    history: int,
    report: Path | None,
    event_log: Path | None,
    as_json: bool,
) -> None:
    for flag, values, alone in (
        ("--policy", policy, ("fcfs", "easy")),
        ("--estimate", estimate, ("user",)),
    ):
        if len(values) != 1 or values[0] not in alone:
            fail(
                RightsizeError(
                    f"{flag}: with --agents give one of {', '.join(alone)} "
                    f"(the agents replace the estimate; got {' '.join(values)})"
                ),
                as_json,
            )
    if report is not None:
        fail(RightsizeError("--report: not available with --agents"), as_json)
    if event_log is not None and event_log.exists():
        fail(RightsizeError(f"--event-log: {event_log} exists; give a new file"), as_json)
    from simulations.agents_loop import compare_with_agents
    from simulations.workload import load_swf

    chosen: ClusterPolicy = "easy" if policy[0] == "easy" else "fcfs"
    try:
        workload = load_swf(trace, procs=procs)
        with (
            tempfile.TemporaryDirectory(prefix="rightsize-agents-") as home,
            progress(f"agents in the loop on {trace.name}", quiet=as_json),
        ):
            comparison = asyncio.run(
                compare_with_agents(
                    workload,
                    policy=chosen,
                    jobs=jobs,
                    history_jobs=history,
                    home=Path(home),
                    event_log=event_log,
                )
            )
    except RightsizeError as error:
        fail(error, as_json)

    def render() -> None:
        c = comparison
        table = Table(
            title=f"{c.trace}: jobs {c.history_jobs + 1}-{c.history_jobs + c.window_jobs} "
            f"({c.window_jobs:,}) on the simulated cluster, {c.policy}, "
            f"{c.history_jobs:,} earlier jobs as history"
        )
        for column in ("requests by", "mean wait", "p90 wait", "mean bsld", "killed"):
            table.add_column(column, justify="right")
        table.add_column("resubmitted", justify="right")
        table.add_column("request/run", justify="right")
        for name, r in (("users", c.plain), ("agents", c.agents)):
            table.add_row(
                name,
                f"{r.mean_wait_s / 3600:.2f} h",
                f"{r.p90_wait_s / 3600:.2f} h",
                f"{r.mean_bsld:.2f}",
                f"{r.killed:,}",
                f"{r.resubmissions:,}",
                f"{c.request_over_run['user' if r is c.plain else 'agents']:.2f}",
            )
        console.print(table)
        console.print(
            f"estimators: {c.estimators}; plans: {c.plans}; "
            f"no plan fit (ran as the user asked): {c.unplanned}; "
            f"agents run took {c.agents.seconds:.0f} s"
        )

    emit(comparison, as_json, render)
