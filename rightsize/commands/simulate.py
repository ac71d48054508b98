"""``rightsize simulate``: replay a trace under scheduling policies and run-time estimates."""

from __future__ import annotations

import asyncio
import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich import box
from rich.table import Table

from knowledge_base.errors import RightsizeError
from rightsize.output import console, emit, fail
from rightsize.progress import progress

if TYPE_CHECKING:  # the simulator (numba, matplotlib, the agents) loads when a run starts
    from simulations.estimates import RuntimeDistributions
    from simulations.replay import Estimate, Order, Policy, Schedule
    from simulations.workload import Workload
    from tools.actuators.simulated import ClusterPolicy

POLICIES: tuple[str, ...] = ("fcfs", "easy", "conservative", "rightsize")
ESTIMATES: tuple[Estimate, ...] = ("user", "last2", "model", "exact")
ORDERS: tuple[Order, ...] = ("fcfs", "sjbf", "saf", "xf")
POLICY_BY_NAME: dict[str, Policy] = {"fcfs": "fcfs", "easy": "easy", "conservative": "conservative"}
ESTIMATE_BY_NAME: dict[str, Estimate] = {e: e for e in ESTIMATES}
ORDER_BY_NAME: dict[str, Order] = {o: o for o in ORDERS}


def simulate_command(
    trace: Path = typer.Option(..., "--trace", help="SWF trace (.swf or .swf.gz)"),
    policy: list[str] = typer.Option(
        ["easy"],
        "--policy",
        help="fcfs, easy, conservative or rightsize (EASY with low-quantile history estimates, "
        "the queue and its backfills in largest-expansion-factor order: docs/simulations.md); "
        "repeat to compare",
    ),
    estimate: list[str] = typer.Option(
        ["user"],
        "--estimate",
        help="user, last2, model or exact (an oracle: every run time known, a bound); "
        "repeat to compare",
    ),
    backfill_order: list[str] = typer.Option(
        ["fcfs"],
        "--backfill-order",
        help="The order EASY tries backfill candidates in: fcfs (queue order), sjbf "
        "(shortest estimate first; EASY++ is --estimate last2 --backfill-order sjbf), "
        "saf (smallest estimate x processors first) or xf (largest (wait + estimate) / "
        "estimate first); repeat to compare",
    ),
    schedule_out: Path | None = typer.Option(
        None,
        "--schedule-out",
        help="Write every job's job_id,submit_s,start_s,end_s,procs,run_s,requested_s,killed "
        "to this CSV (several runs: one file each, the run's name before the suffix)",
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
    extend_in_place: bool = typer.Option(
        False,
        "--extend-in-place",
        help="With --agents: the Scheduler raises a running job's limit toward its user's "
        "request near its end instead of letting it be killed and resubmitted",
    ),
    rightsize_order: bool = typer.Option(
        False,
        "--rightsize-order",
        help="With --agents: the agents' queue runs in the rightsize order (largest "
        "predicted expansion factor first, a job past the starvation bound first), as the "
        "priorities agents/ordering.py sets on SLURM",
    ),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
) -> None:
    """Replay a whole trace; one run per policy x estimate (x backfill order, for EASY;
    rightsize once), or, with --agents, a window of it with and without the agents."""
    checks: list[tuple[str, str, tuple[str, ...]]] = [
        *(("policy", p, POLICIES) for p in policy),
        *(("estimate", e, ESTIMATES) for e in estimate),
        *(("backfill-order", o, ORDERS) for o in backfill_order),
    ]
    for name, value, allowed in checks:
        if value not in allowed:
            fail(RightsizeError(f"--{name}: {value!r} is not one of {', '.join(allowed)}"), as_json)
    if agents:
        if schedule_out is not None:
            fail(RightsizeError("--schedule-out: not available with --agents"), as_json)
        _simulate_with_agents(
            trace,
            policy,
            estimate,
            procs,
            agents_jobs,
            agents_history,
            report,
            event_log,
            as_json,
            extend_in_place,
            rightsize_order,
        )
        return
    if extend_in_place:
        fail(RightsizeError("--extend-in-place: only with --agents"), as_json)
    if rightsize_order:
        fail(RightsizeError("--rightsize-order: only with --agents"), as_json)
    if schedule_out is not None:
        _check_writable(schedule_out, as_json)
    from simulations.report import coincidence_note, write_report
    from simulations.workload import load_swf

    try:
        with progress(f"replaying {trace.name}", quiet=as_json):
            workload = load_swf(trace, procs=procs)
            schedules = _replays(trace, workload, policy, estimate, backfill_order)
    except RightsizeError as error:
        fail(error, as_json)
    if schedule_out is not None:
        written = _write_schedules(schedules, schedule_out, as_json)
        if not as_json:
            console.print(f"schedule: {', '.join(str(p) for p in written)}")
    if report is not None:
        page = write_report(schedules, report)
        if not as_json:
            console.print(f"report: {page}")
    results = [s.result for s in schedules]
    note = coincidence_note(schedules)

    def render() -> None:
        table = Table(
            title=f"{workload.name}: {workload.jobs:,} jobs replayed, "
            f"{sum(workload.dropped.values()):,} dropped "
            f"({dict(workload.dropped) or 'none'}), {workload.machine_procs} procs",
            box=box.SIMPLE_HEAD,
            pad_edge=False,
        )
        # Eight short columns fit 80 characters; --json has every figure (p90 wait, jobs/s).
        for column in (
            "policy",
            "estimate",
            "order",
            "wait h",
            "bsld",
            "p99 bsld",
            "util",
            "killed",
        ):
            table.add_column(column, justify="right", no_wrap=True)
        for r in results:
            table.add_row(
                r.policy,
                f"{r.estimate}*" if r.oracle else r.estimate,
                r.order + ("+c" if r.corrected else ""),
                f"{r.mean_wait_s / 3600:.2f}",
                f"{r.mean_bsld:.2f}",
                f"{r.p99_bsld:.0f}",
                f"{r.utilization:.3f}",
                f"{r.killed:,}",
            )
        console.print(table)
        if any(r.oracle for r in results):
            console.print(
                "* oracle: knows every job's run time, which no scheduler does; a bound "
                "for the others, not a policy"
            )
        if note:
            console.print(f"note: {note}")

    if len(results) == 1:
        emit(results[0], as_json, render)
    else:
        emit({"runs": [r.model_dump(mode="json") for r in results]}, as_json, render)


def _replays(
    trace: Path,
    workload: Workload,
    policy: list[str],
    estimate: list[str],
    orders: list[str],
) -> list[Schedule]:
    """One run per policy x estimate (x backfill order, for EASY); ``rightsize`` once."""
    from simulations.estimates import history_distributions
    from simulations.replay import replay
    from simulations.rightsize_policy import replay_rightsize

    needs_history = "model" in estimate or "rightsize" in policy
    distributions: RuntimeDistributions | None = (
        history_distributions(trace, workload) if needs_history else None
    )
    schedules: list[Schedule] = []
    for p in policy:
        if p == "rightsize":
            assert distributions is not None
            schedules.append(replay_rightsize(workload, distributions))
            continue
        for e in estimate:
            for o in orders if p == "easy" else ["fcfs"]:
                schedules.append(
                    replay(
                        workload,
                        policy=POLICY_BY_NAME[p],
                        estimate=ESTIMATE_BY_NAME[e],
                        model_estimates_s=None if distributions is None else distributions.p50_s,
                        order=ORDER_BY_NAME[o],
                    )
                )
    return schedules


def _check_writable(path: Path, as_json: bool) -> None:
    """Fail before any replay if the schedule file cannot be written."""
    parent = path.parent
    if path.is_dir():
        fail(RightsizeError(f"--schedule-out: {path} is a directory; give a file"), as_json)
    if not parent.is_dir():
        fail(RightsizeError(f"--schedule-out: folder {parent} does not exist"), as_json)
    if not os.access(parent, os.W_OK | os.X_OK) or (path.exists() and not os.access(path, os.W_OK)):
        fail(
            RightsizeError(f"--schedule-out: {path} cannot be written (permission denied)"), as_json
        )


def _write_schedules(schedules: list[Schedule], path: Path, as_json: bool) -> list[Path]:
    """One run: ``path``; several: ``path`` with each run's name before the suffix."""
    from simulations.report import schedule_label, write_schedule_csv

    targets = (
        [path]
        if len(schedules) == 1
        else [path.with_name(f"{path.stem}.{schedule_label(s)}{path.suffix}") for s in schedules]
    )
    try:
        return [write_schedule_csv(s, t) for s, t in zip(schedules, targets, strict=True)]
    except OSError as error:
        fail(RightsizeError(f"--schedule-out: {path} cannot be written ({error})"), as_json)


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
    extend_in_place: bool,
    rightsize_order: bool = False,
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
                    extend_in_place=extend_in_place,
                    rightsize_order=rightsize_order,
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
        for column in ("run", "mean wait", "p99 wait", "max wait", "mean bsld", "p99 bsld"):
            table.add_column(column, justify="right")
        for column in ("util", "killed", "resubmitted", "request/run"):
            table.add_column(column, justify="right")
        agents_name = "agents + extension" if c.extend_in_place else "agents"
        if c.ordering is not None:
            agents_name += ", rightsize order"
        rows = [("EASY-user" if c.policy == "easy" else "FCFS-user", c.plain, "user")]
        if c.easy_pp is not None:
            rows.append(("EASY++", c.easy_pp, ""))
        rows.append((agents_name, c.agents, "agents"))
        for name, r, requests in rows:
            table.add_row(
                name,
                f"{r.mean_wait_s / 3600:.2f} h",
                f"{r.p99_wait_s / 3600:.2f} h",
                f"{r.max_wait_s / 3600:.2f} h",
                f"{r.mean_bsld:.2f}",
                f"{r.p99_bsld:.1f}",
                f"{r.utilization:.3f}",
                f"{r.killed:,}",
                f"{r.resubmissions:,}",
                f"{c.request_over_run[requests]:.2f}" if requests else "-",
            )
        console.print(table)
        console.print(
            f"estimators: {c.estimators}; plans: {c.plans}; "
            f"no plan fit (ran as the user asked): {c.unplanned}; "
            f"agents run took {c.agents.seconds:.0f} s"
        )

    emit(comparison, as_json, render)
