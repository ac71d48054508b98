"""``rightsize submit / status / watch / cancel / jobs``: the plan ledger from the shell.

    rightsize submit PLAN.yaml [--option N|ID] [--wait]   plan it, submit the option chosen
    rightsize status [PLAN_ID]                            plans (or one) from the ledger
    rightsize watch PLAN_ID                               state, segment k of n, progress,
                                                          elapsed against walltime, live
    rightsize cancel PLAN_ID [--reason TEXT]              the Scheduler cancels its jobs
    rightsize jobs [--user NAME]                          every job the ledger holds

The same ledger as MCP (``agents.ledger``): ``submit`` runs exactly the option chosen
(``--option``: its index in ``rightsize plan --json``'s ``feasible``, 0 the recommended,
or its ``option_id``), ``cancel`` is a request the Scheduler honours. With
``RIGHTSIZE_KAFKA_BOOTSTRAP`` set they talk to the running center; without it they run
the embedded center (every agent in this process, the local SLURM if it answers, else
the simulated cluster) for as long as they need it: ``submit`` until the job is handed
to the batch system (``--wait``: until the plan ends), ``watch`` until the plan ends
(its Scheduler re-watches the jobs in flight), ``cancel`` until the Scheduler confirms.
The simulated cluster lives in its process: a plan on it is followed with ``submit
--wait``. Every command takes ``--json``; errors exit 2 naming the field and value.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from knowledge_base.errors import InvalidInputError, NotFoundError, RightsizeError
from knowledge_base.records import Plan, PlanStatus, SegmentState
from knowledge_base.store import KnowledgeBase
from rightsize.observability.waits import PendingStart, rule_start
from rightsize.output import console, emit, fail
from rightsize.settings import Settings
from tools.actuators.base import Executor
from tools.planning.cost import DollarRates
from tools.planning.workload_files import load_workload

if TYPE_CHECKING:  # the agents load when a command needs them
    from agents.bus.base import Bus
    from agents.ledger import PlanView

__all__ = [
    "cancel_command",
    "jobs_command",
    "status_command",
    "submit_command",
    "watch_command",
]


@dataclass
class Desk:
    """What a command talks to: the ledger, the bus the agents hear, their executors."""

    kb: KnowledgeBase
    bus: Bus
    executors: dict[str, Executor]
    embedded: bool


@contextlib.asynccontextmanager
async def desk(settings: Settings, *, agents: bool) -> AsyncIterator[Desk]:
    """The running center over Kafka, or (``agents``) the embedded center in-process."""
    from agents.center import AGENT_NAMES, open_bus
    from rightsize.wiring import knowledge_base

    if settings.kafka_bootstrap or not agents:
        async with knowledge_base(settings) as kb:
            bus = open_bus(settings.kafka_bootstrap, client_id="rightsize-cli")
            await bus.start()
            try:
                yield Desk(kb=kb, bus=bus, executors={}, embedded=False)
            finally:
                await bus.stop()
        return
    from rightsize.commands.center import running_center

    async with running_center(settings, AGENT_NAMES) as center:
        yield Desk(kb=center.kb, bus=center.bus, executors=center.executors, embedded=True)


def _rates(settings: Settings) -> DollarRates:
    return DollarRates(
        usd_per_su=settings.usd_per_su,
        usd_per_core_hour=settings.usd_per_core_hour,
        usd_per_gpu_hour=settings.usd_per_gpu_hour,
    )


async def _view(plan: Plan, executors: dict[str, Executor]) -> PlanView:
    """The plan's view, with what the batch system says of its current job if it can."""
    from agents.ledger import view
    from tools.actuators.monitor import parse_progress

    executor = executors.get(plan.option.system) if plan.option else None
    statuses = {}
    progress = None
    if executor is not None:
        jobs = [s.job_id for s in plan.segments if s.job_id]
        for job_id in jobs:
            with contextlib.suppress(RightsizeError):
                statuses[job_id] = await executor.status(job_id)
        if jobs:
            with contextlib.suppress(RightsizeError):
                progress = parse_progress(await executor.output_tail(jobs[-1]))
    now = executor.now() if executor is not None else None
    return view(plan, statuses=statuses, progress=progress, now=now)


def _clock(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def _line(shown: PlanView) -> str:
    """One line: state, where, segment k of n, progress, elapsed / walltime."""
    parts = [f"{shown.plan_id}: {shown.state.value}"]
    if shown.system:
        parts.append(f"{shown.system}/{shown.partition}")
    if shown.segment is not None:
        parts.append(f"segment {shown.segment} of {shown.segments}")
    if shown.progress_line:
        done = f" ({shown.progress:.0%})" if shown.progress is not None else ""
        parts.append(f"{shown.progress_line}{done}")
    if shown.walltime_s is not None:
        parts.append(f"{_clock(shown.elapsed_s)} of {_clock(shown.walltime_s)}")
    return " | ".join(parts)


def _table(
    columns: tuple[str, ...], whole: tuple[str, ...], rows: list[list[str]], width: int | None
) -> Any:
    """A table whose ``whole`` columns (ids) and short ones (states, counts) are never
    cut or folded, so an id can be copied from it; the other columns share what is left
    of ``width`` (None: no limit) and end in an ellipsis where they must."""
    from rich.table import Table

    natural = [max([len(c), *(len(row[i]) for row in rows)]) for i, c in enumerate(columns)]
    fixed = [c in whole or w <= 12 for c, w in zip(columns, natural, strict=True)]
    gaps = 2 * (len(columns) - 1)
    left = (
        None
        if width is None
        else width - gaps - sum(w for w, f in zip(natural, fixed, strict=True) if f)
    )
    flexible = [w for w, f in zip(natural, fixed, strict=True) if not f]
    table = Table(box=None, pad_edge=False)
    for column, size, is_fixed in zip(columns, natural, fixed, strict=True):
        if is_fixed:
            table.add_column(column, no_wrap=True, min_width=size)
            continue
        cap = size
        if left is not None and sum(flexible) > left:  # shrink each by its share
            cap = max(len(column), min(size, left * size // sum(flexible)))
        table.add_column(column, no_wrap=True, overflow="ellipsis", width=cap)
    for row in rows:
        table.add_row(*row)
    return table


def _print_table(
    columns: tuple[str, ...], whole: tuple[str, ...], rows: list[list[str]], wide: bool
) -> None:
    """Within the terminal's width; ``--wide``: every column in full, however wide."""
    if not wide:
        console.print(_table(columns, whole, rows, console.width))
        return
    from rich.console import Console

    Console(width=100_000).print(_table(columns, whole, rows, None))


def _render_plans(
    views: list[PlanView], wide: bool = False, starts: dict[str, PendingStart] | None = None
) -> None:
    """``starts``: plan id -> its pending job's predicted start (a column when any)."""
    if not views:
        console.print("no plans")
        return
    from datetime import UTC, datetime

    starts = starts or {}
    now = datetime.now(UTC)
    rows = [
        [
            v.plan_id,
            v.state.value,
            f"{v.system}/{v.partition}" if v.system else "-",
            f"{v.segment}/{v.segments}" if v.segment else f"-/{v.segments}",
            str(len(v.jobs)),
            *([starts[v.plan_id].describe(now) if v.plan_id in starts else "-"] if starts else []),
            v.reason if wide else v.reason[:60],
        ]
        for v in views
    ]
    columns = ("plan", "state", "where", "segment", "jobs", *(("starts",) if starts else ()))
    _print_table((*columns, "reason"), ("plan",), rows, wide)


# -- submit ---------------------------------------------------------------------------------


def _chosen(selection: Any, option: str) -> Any:
    """The option ``--option`` names: an index into the ranked list, or an option id."""
    ranked = selection.ranked
    if not ranked:
        why = selection.infeasible[0].reason if selection.infeasible else "no options"
        raise InvalidInputError(
            f"no option fits (closest: {why}); `rightsize plan` lists why", field="--option"
        )
    if option.isdigit():
        index = int(option)
        if index >= len(ranked):
            raise InvalidInputError(
                f"only {len(ranked)} options fit (0 to {len(ranked) - 1})",
                field="--option",
                value=index,
            )
        return ranked[index]
    found = next((p for p in ranked if p.option_id == option), None)
    if found is None:
        raise InvalidInputError(
            f"not among the {len(ranked)} options that fit now "
            f"({', '.join(p.option_id for p in ranked[:4])}...)",
            field="--option",
            value=option,
        )
    return found


async def _submit(
    settings: Settings, path: Path, option: str, wait: bool, timeout_s: float
) -> dict[str, Any]:
    from agents.ledger import SubmissionRefused, submit_confirmed, wait_for, withdraw_draft
    from rightsize.wiring import chain_config, promoted_loader
    from tools.planning.confirm import Confirmation
    from tools.planning.service import gather_estimators, plan_workload, shared_chain

    spec = load_workload(path)
    async with desk(settings, agents=True) as d:
        catalog = await d.kb.get_catalog()
        # The chain `rightsize plan` and the center's agents answer with (these settings)
        chain = shared_chain(d.kb, config=chain_config(settings), promoted=promoted_loader)
        estimators = await gather_estimators(d.kb, spec, catalog, chain=chain)
        selection = plan_workload(spec, catalog, estimators, rates=_rates(settings))
        chosen = _chosen(selection, option)
        plan_id = f"{spec.name[:40]}-{uuid.uuid4().hex[:12]}"
        draft = chosen.to_record(spec, plan_id, reason="planned by rightsize submit")
        await d.kb.put_plan(draft)
        try:
            outcome = await submit_confirmed(
                d.kb,
                d.bus,
                plan_id,
                spec.user,
                Confirmation(option_id=chosen.option_id),
                rates=_rates(settings),
                chain=chain,
            )
        except RightsizeError as error:
            # This draft was made for this submission only: refused (or failed before
            # anything was sent), it ends here rather than stay a draft for ever.
            withdrawn = await withdraw_draft(d.kb, plan_id, f"not submitted: {error}")
            if withdrawn.status is not PlanStatus.CANCELLED:
                raise
            if isinstance(error, SubmissionRefused):
                raise SubmissionRefused(
                    error.field,
                    f"{str(error).removeprefix(error.field + ': ')} (plan {plan_id} is "
                    "withdrawn: cancelled, nothing was submitted)",
                ) from error
            raise
        if d.embedded or wait:
            # Embedded, the agents live as long as this command: stay until the batch
            # system has the job (or, with --wait, until the plan is over).
            def handed(p: Plan) -> bool:
                if wait:
                    return p.status.ended
                return p.status.ended or any(s.job_id for s in p.segments)

            plan = await wait_for(d.kb, plan_id, handed, timeout_s=timeout_s)
        else:
            plan = await d.kb.get_plan(plan_id)
        shown = await _view(plan, d.executors)
    return {
        "plan_id": plan_id,
        "state": shown.state.value,
        "option_id": outcome.option_id,
        "system": shown.system,
        "partition": shown.partition,
        "walltime_s": outcome.walltime_s,
        "cost": outcome.cost.model_dump() if outcome.cost else None,
        "reason": plan.reason,
        "jobs": [j.model_dump(mode="json") for j in shown.jobs],
        "note": _left_running(plan) if d.embedded and not wait else None,
    }


def _left_running(plan: Plan) -> str | None:
    """What ``submit`` without ``--wait`` leaves behind on the embedded center, said."""
    if plan.status.ended:
        return None
    return (
        f"the embedded center stopped with this command: the job stays with the batch "
        f"system, but plan {plan.id} moves on (its end, the next segment, a resubmission) "
        f"only while a center runs: `rightsize watch {plan.id}` or `rightsize center run`"
    )


def submit_command(
    workload: Path = typer.Argument(..., help="A WorkloadSpec YAML (as for `rightsize plan`)"),
    option: str = typer.Option(
        "0",
        "--option",
        help="Which option: its index in `rightsize plan --json` feasible (0: the "
        "recommended) or its option_id",
    ),
    wait: bool = typer.Option(False, "--wait", help="Stay until the plan is over"),
    timeout_s: float = typer.Option(
        86_400.0, "--timeout-s", min=1, help="Give up waiting after this long"
    ),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Plan a workload and submit the option chosen, exactly (to the center's agents)."""
    settings = Settings()
    try:
        result = asyncio.run(_submit(settings, workload, option, wait, timeout_s))
    except RightsizeError as error:
        fail(error, as_json)

    def render() -> None:
        jobs = (
            ", ".join(f"{j['job_id'] or '-'} ({j['state']})" for j in result["jobs"]) or "none yet"
        )
        console.print(
            f"{result['plan_id']}: {result['state']} on {result['system']}/"
            f"{result['partition']} (option {result['option_id']}, walltime "
            f"{_clock(result['walltime_s'])}); jobs: {jobs}",
            soft_wrap=True,
        )
        if result["reason"]:
            console.print(result["reason"], highlight=False)
        if result["note"]:
            console.print(f"note: {result['note']}", highlight=False)

    emit(result, as_json, render)
    if result["state"] in (PlanStatus.FAILED.value, PlanStatus.CANCELLED.value):
        raise typer.Exit(code=1)
    if wait and result["state"] not in _ENDED:
        print(
            f"rightsize submit: plan {result['plan_id']} is still {result['state']} after "
            f"--timeout-s {timeout_s:g}; follow it with `rightsize watch {result['plan_id']}`",
            file=sys.stderr,
        )
        raise typer.Exit(code=1)


_ENDED = {s.value for s in PlanStatus if s.ended}


# -- status / jobs --------------------------------------------------------------------------


async def _plans(settings: Settings, plan_id: str | None, user: str | None) -> list[PlanView]:
    return [view for view, _ in await _plans_with_starts(settings, plan_id, user)]


def _pending_start(plan: Plan, view: PlanView) -> PendingStart | None:
    """The predicted start of the plan's first job while it is pending: the plan's own
    wait with the rule's measured band (rightsize/observability/waits.py; the status
    page, beside the executors, shows the learned one)."""
    first = next((j for j in view.jobs if j.job_id is not None), None)
    if first is None or first.state is not SegmentState.PENDING:
        return None
    return rule_start(plan)


async def _plans_with_starts(
    settings: Settings, plan_id: str | None, user: str | None
) -> list[tuple[PlanView, PendingStart | None]]:
    from rightsize.wiring import knowledge_base

    async with knowledge_base(settings) as kb:
        if plan_id is not None:
            try:
                plans = [await kb.get_plan(plan_id)]
            except NotFoundError:
                raise InvalidInputError("no such plan", field="PLAN_ID", value=plan_id) from None
        else:
            plans = await kb.list_plans(user=user)
        shown = []
        for plan in plans:
            view = await _view(plan, {})
            shown.append((view, _pending_start(plan, view)))
        return shown


def status_command(
    plan_id: str | None = typer.Argument(None, help="One plan (default: every plan)"),
    user: str | None = typer.Option(None, "--user", help="Only this user's plans"),
    wide: bool = typer.Option(False, "--wide", help="Every column in full, past 80 columns."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Plans as the ledger holds them: state, where, segment k of n, jobs."""
    settings = Settings()
    try:
        shown = asyncio.run(_plans_with_starts(settings, plan_id, user))
    except RightsizeError as error:
        fail(error, as_json)
    views = [view for view, _ in shown]
    starts = {view.plan_id: start for view, start in shown if start is not None}
    data = {
        "plans": [
            {
                **v.model_dump(mode="json"),
                "pending_start": starts[v.plan_id].model_dump(mode="json")
                if v.plan_id in starts
                else None,
            }
            for v in views
        ]
    }
    emit(data, as_json, lambda: _render_plans(views, wide, starts))


def jobs_command(
    user: str | None = typer.Option(None, "--user", help="Only this user's jobs"),
    wide: bool = typer.Option(False, "--wide", help="Every column in full, past 80 columns."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Every job the ledger holds, newest plan first: plan, segment, state, walltime."""
    settings = Settings()
    try:
        views = asyncio.run(_plans(settings, None, user))
    except RightsizeError as error:
        fail(error, as_json)
    rows = [
        {
            "plan_id": v.plan_id,
            "user": v.user,
            "system": v.system,
            "partition": v.partition,
            **j.model_dump(mode="json"),
        }
        for v in views
        for j in v.jobs
    ]

    def render() -> None:
        if not rows:
            console.print("no jobs")
            return
        cells = [
            [
                str(r["job_id"] or "-"),  # an intent the batch system never took
                r["plan_id"],
                str(r["segment_index"]),
                r["state"],
                _clock(r["walltime_s"]),
            ]
            for r in rows
        ]
        columns = ("job", "plan", "segment", "state", "walltime")
        _print_table(columns, ("job", "plan"), cells, wide)

    emit({"jobs": rows}, as_json, render)


# -- watch / cancel ------------------------------------------------------------------------


async def _watch(
    settings: Settings, plan_id: str, interval_s: float, timeout_s: float, as_json: bool
) -> PlanView:
    async with desk(settings, agents=True) as d:
        try:
            plan = await d.kb.get_plan(plan_id)
        except NotFoundError:
            raise InvalidInputError("no such plan", field="PLAN_ID", value=plan_id) from None
        deadline = time.monotonic() + timeout_s
        last = ""
        while True:
            shown = await _view(plan, d.executors)
            line = _line(shown)
            if line != last:
                if as_json:
                    sys.stdout.write(shown.model_dump_json() + "\n")
                else:
                    console.print(line, highlight=False, soft_wrap=True)
                sys.stdout.flush()
                last = line
            if plan.status.ended or time.monotonic() >= deadline:
                return shown
            await asyncio.sleep(interval_s)
            plan = await d.kb.get_plan(plan_id)


def watch_command(
    plan_id: str = typer.Argument(..., help="The plan to follow"),
    interval_s: float = typer.Option(2.0, "--interval-s", min=0.1, help="Look this often"),
    timeout_s: float = typer.Option(
        86_400.0, "--timeout-s", min=1, help="Stop watching after this long"
    ),
    as_json: bool = typer.Option(False, "--json", help="One JSON view per change."),
) -> None:
    """Follow a plan live: state, segment k of n, progress, elapsed against walltime."""
    settings = Settings()
    try:
        shown = asyncio.run(_watch(settings, plan_id, interval_s, timeout_s, as_json))
    except RightsizeError as error:
        fail(error, as_json)
    if not as_json and shown.reason:
        console.print(shown.reason, highlight=False)
    if shown.state in (PlanStatus.FAILED, PlanStatus.CANCELLED):
        raise typer.Exit(code=1)


async def _cancel(settings: Settings, plan_id: str, reason: str, wait_s: float) -> dict[str, Any]:
    from agents.ledger import request_cancel

    async with desk(settings, agents=True) as d:
        try:
            plan = await d.kb.get_plan(plan_id)
        except NotFoundError:
            raise InvalidInputError("no such plan", field="PLAN_ID", value=plan_id) from None
        outcome = await request_cancel(d.kb, d.bus, plan.id, plan.user, reason, wait_s=wait_s)
        return outcome.model_dump(mode="json")


def cancel_command(
    plan_id: str = typer.Argument(..., help="The plan to cancel"),
    reason: str = typer.Option("cancelled by the user", "--reason", help="Kept with the plan"),
    wait_s: float = typer.Option(
        30.0, "--wait-s", min=0, help="Wait this long for the Scheduler to confirm"
    ),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Cancel a plan: the Scheduler cancels its queued or running jobs, submits no more."""
    settings = Settings()
    try:
        result = asyncio.run(_cancel(settings, plan_id, reason, wait_s))
    except RightsizeError as error:
        fail(error, as_json)
    emit(
        result,
        as_json,
        lambda: console.print(f"{plan_id}: {result['status']}: {result['message']}"),
    )
