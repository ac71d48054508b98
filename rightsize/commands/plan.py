"""``rightsize plan``: a policy-valid, queue-aware, priced plan for a workload file.

    rightsize plan WORKLOAD.yaml [--objective fastest|cheapest|earliest_finish|balanced|deadline]
                   [--queue-snapshot FILE | --live-queue] [--json] [--top N]
                   [--sbatch DIR] [--tapis DIR]

Exit status: 0 with a plan, 1 when no option meets every limit and goal (the reasons are
printed, closest first), 2 on bad input.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich import box
from rich.table import Table

from knowledge_base.catalog import Catalog
from knowledge_base.errors import InvalidInputError, RightsizeError
from knowledge_base.store import KnowledgeBase
from knowledge_base.workload import Objective, WorkloadSpec
from rightsize.output import console, emit, fail, fit_columns
from rightsize.settings import Settings
from rightsize.wiring import chain_config, knowledge_base, open_executor, promoted_loader
from tools.planning.causes import reason_text, shared_causes
from tools.planning.cost import DollarRates
from tools.planning.estimation import Estimator
from tools.planning.queue import (
    QueueModel,
    QueueSnapshot,
    live_queue_and_waits,
    load_snapshots,
)
from tools.planning.render import sbatch_scripts, tapis_requests
from tools.planning.results import PlannedOption
from tools.planning.script_files import write_files
from tools.planning.selector import Selection
from tools.planning.workload_files import load_workload

if TYPE_CHECKING:  # the predictor loads only where a live queue is read
    from tools.waits.learned import LearnedWaits

__all__ = ["plan_command"]


def _hours(seconds: float | None) -> str:
    """A duration as a person reads it: under an hour in minutes (a 5-minute run is
    "5 min", not "0.0 h"), under a minute in seconds, else hours."""
    if seconds is None:
        return "?"
    if seconds == 0:
        return "0 h"
    if seconds < 60:
        return f"{seconds:.0f} s"
    if seconds < 3600:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def _clock(seconds: int) -> str:
    minutes = -(-seconds // 60)
    return f"{minutes // 60}:{minutes % 60:02d}"


def _amount(value: float) -> str:
    return f"{value:,.0f}" if value >= 100 else f"{value:,.3g}"


def _cost(plan: PlannedOption) -> str:
    if plan.cost is None:
        return "unpublished"
    unit = {"core-hour": "core-h"}.get(plan.cost.unit, plan.cost.unit)
    text = f"{_amount(plan.cost.amount)} {unit}"
    if plan.cost.gpu_hours:
        text += f" + {_amount(plan.cost.gpu_hours)} GPU-h"
    return text


def _run_range(plan: PlannedOption) -> str:
    low, high = plan.estimate.runtime_s.low, plan.run_high_s
    return f"{_hours(plan.expected_run_s)} ({_hours(low)}-{_hours(high)})"


def _usd(plan: PlannedOption) -> str:
    return "-" if plan.cost_usd is None else f"${plan.cost_usd:,.2f}"


async def _live_snapshot(
    settings: Settings, spec: WorkloadSpec, catalog: Catalog, kb: KnowledgeBase
) -> tuple[QueueSnapshot, dict[str, LearnedWaits]]:
    systems = spec.goals.systems or []
    if len(systems) != 1:
        raise InvalidInputError(
            "--live-queue reads one batch system (the configured executor's): name exactly "
            "one system in goals.systems",
            field="goals.systems",
            value=systems,
        )
    system = catalog.system(systems[0])
    # the learned waits where the knowledge base holds enough of this system's (docs/waits.md),
    # the predictor kept under HOME/waits for the next plan
    from tools.waits.learned import PredictorCache

    predictors = PredictorCache(folder=settings.home.expanduser() / "waits")
    executor = open_executor(settings, system)
    snapshot, learned = await live_queue_and_waits(executor, system.name, kb, predictors)
    return snapshot, {system.name: learned} if learned is not None else {}


async def _gather(
    settings: Settings, spec: WorkloadSpec, live_queue: bool
) -> tuple[Catalog, list[Estimator], list[QueueSnapshot], dict[str, LearnedWaits]]:
    async with knowledge_base(settings) as kb:
        catalog = await kb.get_catalog()
        from tools.planning.service import gather_estimators, shared_chain  # loads estimators

        chain = shared_chain(kb, config=chain_config(settings), promoted=promoted_loader)
        estimators = await gather_estimators(kb, spec, catalog, chain=chain)
        snapshots: list[QueueSnapshot] = []
        learned: dict[str, LearnedWaits] = {}
        if live_queue:
            snapshot, learned = await _live_snapshot(settings, spec, catalog, kb)
            snapshots.append(snapshot)
    return catalog, estimators, snapshots, learned


def _group(plans: Sequence[PlannedOption]) -> list[tuple[PlannedOption, list[str]]]:
    """Rows: plans identical but for the partition name share one (partitions on one pool)."""
    rows: list[tuple[PlannedOption, list[str]]] = []
    index: dict[tuple[object, ...], int] = {}
    for p in plans:
        key = (
            p.option.system,
            p.option.node_type,
            p.option.nodes,
            p.option.cores_per_node,
            p.option.gpus_per_node,
            p.option.batch_size,
            p.option.memory_mb,
            tuple(p.segment_walltimes_s),
            round(p.expected_run_s),
            None if p.expected_wait_s is None else round(p.expected_wait_s),
            _cost(p),
        )
        if key in index:
            rows[index[key]][1].append(p.option.partition)
        else:
            index[key] = len(rows)
            rows.append((p, []))
    return rows


def _describe(plan: PlannedOption) -> str:
    """One plan in a sentence: where, what it asks for, how long, when done, what it costs."""
    o = plan.option
    gpus = (
        f", {o.gpus_per_node} GPU{'s' if o.gpus_per_node > 1 else ''}/node"
        if o.gpus_per_node
        else ""
    )
    jobs = len(plan.segment_walltimes_s)
    chain = (
        f"{jobs} chained jobs of <= {_clock(o.walltime_s)}"
        if jobs > 1
        else f"walltime {_clock(o.walltime_s)}"
    )
    wait = (
        "wait unknown" if plan.expected_wait_s is None else f"wait {_hours(plan.expected_wait_s)}"
    )
    batch = f", batch {o.batch_size}" if o.batch_size else ""
    usd = f" ({_usd(plan)}, {plan.cost_usd_basis})" if plan.cost_usd is not None else ""
    return (
        f"{plan.where} - {o.nodes} node x {o.cores_per_node} cores{gpus}{batch}, "
        f"{o.memory_mb / 1024:.0f} GB/node, {chain}; run ~{_run_range(plan)}, {wait}, "
        f"finish ~{_hours(plan.expected_finish_s)}; cost {_cost(plan)}{usd}"
    )


def _shape(plan: PlannedOption) -> str:
    o = plan.option
    text = f"{o.nodes}x{o.cores_per_node}c"
    if o.gpus_per_node:
        text += f" {o.gpus_per_node}GPU"
    if o.batch_size:
        text += f" bs{o.batch_size}"
    return text


def _render(selection: Selection, top: int) -> None:
    console.print(
        f"[bold]{selection.workload}[/]: {len(selection.ranked)} feasible plans, "
        f"{len(selection.infeasible)} infeasible options; objective {selection.objective.value}",
        highlight=False,
    )
    if selection.recommended is not None:
        console.print(
            f"[bold green]recommended[/] (by {selection.objective.value}) "
            f"{_describe(selection.recommended)}",
            highlight=False,
        )
        rows = _group(selection.ranked)
        page = rows[:top]
        dollars = any(p.cost_usd is not None for p, _ in rows)
        # Without any known wait, finish = run: the two wait columns would only repeat it.
        waits = any(p.expected_wait_s is not None for p, _ in page)
        table = Table(
            title=f"best first, {len(page)} of {len(rows)} distinct plans",
            box=box.SIMPLE_HEAD,
            pad_edge=False,
        )
        columns = ["#", "system/partition", "shape", "run", "walltime"]
        columns += ["wait", "finish"] if waits else []
        headers = [*columns, "cost", *(["$"] if dollars else [])]
        body = []
        for number, (p, also) in enumerate(page, start=1):
            jobs = len(p.segment_walltimes_s)
            cells = [
                str(number),
                p.where + (f" +{len(also)}" if also else ""),
                _shape(p),
                _hours(p.expected_run_s),
                _clock(p.option.walltime_s) + (f" x{jobs}" if jobs > 1 else ""),
            ]
            if waits:
                cells += [_hours(p.expected_wait_s), _hours(p.expected_finish_s)]
            body.append([*cells, _cost(p), *([_usd(p)] if dollars else [])])
        for column in headers:
            table.add_column(column)
        for cells in body:
            table.add_row(*cells)
        wraps = ("shape", "cost", "$", "system/partition")
        fit_columns(table, console.width, wraps, wrap_cells=wraps)
        console.print(table)
        if any(also for _, also in page):
            console.print(
                "[dim]+N: N more partitions give the same plan (same nodes, limits and "
                "cost); --json lists each[/]",
                highlight=False,
            )
        if not waits:
            console.print(
                "[dim]wait unknown (no queue snapshot): finish = run; --queue-snapshot or "
                "--live-queue add it[/]",
                highlight=False,
            )
        for name, label in (
            ("fastest", "fastest run"),
            ("cheapest", "cheapest"),
            ("earliest_finish", "earliest finish"),
        ):
            best = selection.best.get(name)
            if best is not None:
                console.print(f"{label}: {_describe(best)}", highlight=False)
    else:
        console.print("[bold red]no plan[/]: nothing meets every limit and goal", highlight=False)
    # A cause every option gives is said once, first; the list then shows the others.
    causes = shared_causes(selection.infeasible, len(selection.ranked))
    for cause in causes:
        console.print(f"[bold]why[/]: {cause}", highlight=False)
    rest = [i for i in selection.infeasible if reason_text(i) not in causes]
    if rest:
        shown = rest[:top]
        label = "other reasons" if causes else "infeasible"
        console.print(f"{label}, closest first ({len(shown)} of {len(rest)}; --json for all):")
        for item in shown:
            where = f"{item.system}/{item.partition}"
            shape = f" bs{item.batch_size}" if item.batch_size else ""
            shape += f" {item.gpus_per_node}GPU" if item.gpus_per_node else ""
            console.print(f"  {where}{shape}: {reason_text(item)}", highlight=False)
    for note in selection.notes:
        console.print(f"[dim]note:[/] {note}", highlight=False)


def _write_scripts(
    selection: Selection,
    spec: WorkloadSpec,
    settings: Settings,
    sbatch: Path | None,
    tapis: Path | None,
) -> None:
    chosen = selection.recommended
    if chosen is None:
        return
    # File names come from the workload's name: write_files keeps them inside the folder.
    if sbatch is not None:
        overhead = settings.checkpoint_overhead_s  # as the Scheduler's, so the same job
        scripts = sbatch_scripts(chosen, spec, checkpoint_overhead_s=overhead)
        write_files(sbatch, spec.name, scripts, ".sbatch", field="--sbatch")
    if tapis is not None:
        bodies = tapis_requests(
            chosen,
            spec,
            exec_system_id=settings.tapis_system or chosen.option.system,
            app_id=settings.tapis_app_id,
            app_version=settings.tapis_app_version,
        )
        texts = [json.dumps(body, indent=2) + "\n" for body in bodies]
        write_files(tapis, spec.name, texts, ".json", field="--tapis")


def plan_command(
    workload: Path = typer.Argument(..., help="WorkloadSpec file (YAML or JSON)"),
    objective: Objective | None = typer.Option(
        None, "--objective", help="Overrides goals.objective", case_sensitive=False
    ),
    queue_snapshot: Path | None = typer.Option(
        None, "--queue-snapshot", help="Queue snapshot JSON (see docs/planning.md)"
    ),
    live_queue: bool = typer.Option(
        False, "--live-queue", help="Read the queue now from the configured executor"
    ),
    top: int = typer.Option(10, "--top", min=1, help="Rows to show in the table"),
    sbatch: Path | None = typer.Option(
        None, "--sbatch", help="Write the recommended plan's sbatch script(s) here"
    ),
    tapis: Path | None = typer.Option(
        None, "--tapis", help="Write the recommended plan's Tapis v3 job request(s) here"
    ),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of tables."),
) -> None:
    """Plan a workload: every option, policy-checked, priced and queue-aware."""
    settings = Settings()
    try:
        spec = load_workload(workload)
        if queue_snapshot is not None and live_queue:
            raise InvalidInputError(
                "give --queue-snapshot or --live-queue, not both", field="--live-queue"
            )
        catalog, estimators, snapshots, learned = asyncio.run(_gather(settings, spec, live_queue))
        if queue_snapshot is not None:
            snapshots = load_snapshots(queue_snapshot)
        queue = QueueModel(snapshots, catalog, learned=learned) if snapshots else None
        from tools.planning.service import plan_workload

        selection = plan_workload(
            spec,
            catalog,
            estimators,
            objective=objective,
            queue=queue,
            rates=DollarRates(
                usd_per_su=settings.usd_per_su,
                usd_per_core_hour=settings.usd_per_core_hour,
                usd_per_gpu_hour=settings.usd_per_gpu_hour,
            ),
        )
        _write_scripts(selection, spec, settings, sbatch, tapis)
    except RightsizeError as error:
        fail(error, as_json)
    emit(selection.report(), as_json, lambda: _render(selection, top))
    if selection.recommended is None:
        raise typer.Exit(code=1)
