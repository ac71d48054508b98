"""``rightsize queue``: when pending jobs will start, with p10-p90, and the replay that proves it.

    rightsize queue predict SNAPSHOT.json [--history FILE.swf] [--json]
    rightsize queue predict --live [--system NAME] [--json]
    rightsize queue bench --trace FILE --at T1,T2,... [--json]

Both use one predictor (``tools.waits.predictor.WaitPredictor``): given the same
snapshot and the history up to its instant, ``predict`` and ``bench`` give the same starts.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.table import Table

from knowledge_base.errors import InvalidInputError, RightsizeError
from rightsize.output import console, emit, fail

if TYPE_CHECKING:
    from tools.waits.snapshot import WaitPredictions

__all__ = ["app"]

app = typer.Typer(no_args_is_help=True, help="Queue waits: predicted starts with p10-p90.")


def _hours(seconds: float) -> str:
    return f"{seconds / 3600.0:.2f}"


def _render(result: WaitPredictions, taken_at: float) -> None:
    table = Table(title=f"predicted starts ({len(result.predictions)} pending jobs)")
    for column in ("job", "wait p50 h", "p10 h", "p90 h", "start s"):
        table.add_column(column, justify="left" if column == "job" else "right")
    for row in result.predictions:
        table.add_row(
            row.job_id,
            _hours(row.start_s - taken_at),
            _hours(row.p10_s - taken_at),
            _hours(row.p90_s - taken_at),
            f"{row.start_s:.0f}",
        )
    console.print(table)
    console.print(f"basis: {result.basis}")


@app.command("predict")
def predict_command(
    snapshot_path: Path | None = typer.Argument(
        None, metavar="SNAPSHOT.json", help="The queue: taken_at, total_procs, running, pending"
    ),
    history: Path | None = typer.Option(
        None, "--history", help="The center's past as an SWF trace (.swf or .swf.gz)"
    ),
    system: str | None = typer.Option(
        None,
        "--system",
        help="Learn from this system's job history in the knowledge base (Unix seconds); "
        "with --live: the catalog system the SLURM cluster is",
    ),
    live: bool = typer.Option(
        False, "--live", help="Read the real SLURM queue (squeue --json) and accounting"
    ),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
) -> None:
    """Predict every pending job's start with a p10-p90 interval."""
    from tools.waits.jobs import JobTable, load_history
    from tools.waits.predictor import WaitPredictor
    from tools.waits.snapshot import load_wait_snapshot

    try:
        if live == (snapshot_path is not None):
            raise InvalidInputError(
                "give a SNAPSHOT.json or --live, exactly one", field="SNAPSHOT.json"
            )
        if live:
            snapshot, table = _live(system)
        else:
            assert snapshot_path is not None
            snapshot = load_wait_snapshot(snapshot_path)
            if history is not None:
                table = load_history(history)
            elif system is not None:
                table = _kb_history(system, snapshot)
            else:
                table = JobTable.build([], snapshot.total_procs, "none")
        result = WaitPredictor(table).predict(snapshot)
    except RightsizeError as error:
        fail(error, as_json)
    emit(result, as_json, lambda: _render(result, snapshot.taken_at))


def _kb_history(system_name: str, snapshot: WaitSnapshot) -> JobTable:
    """The system's finished jobs the knowledge base holds, submitted before the snapshot."""
    import asyncio
    from datetime import UTC, datetime

    from knowledge_base.store import JobQuery
    from rightsize.settings import Settings
    from rightsize.wiring import knowledge_base
    from tools.waits.live import history_from_records

    async def read() -> JobTable:
        async with knowledge_base(Settings()) as kb:
            (await kb.get_catalog()).system(system_name)  # NotFoundError names it
            records = await kb.query_jobs(
                JobQuery(
                    system=system_name,
                    submitted_before=datetime.fromtimestamp(snapshot.taken_at, UTC),
                    newest_first=True,
                    limit=1_000_000,
                )
            )
        return history_from_records(records, snapshot.total_procs)

    return asyncio.run(read())


def _live(system_name: str | None) -> tuple[WaitSnapshot, JobTable]:
    import asyncio

    from rightsize.settings import Settings
    from rightsize.wiring import knowledge_base
    from tools.actuators.slurm import SlurmExecutor
    from tools.waits.live import live_queue

    async def read() -> tuple[WaitSnapshot, JobTable]:
        system = None
        if system_name is not None:
            async with knowledge_base(Settings()) as kb:
                system = (await kb.get_catalog()).system(system_name)
        return await live_queue(SlurmExecutor(system))

    return asyncio.run(read())


@app.command("bench")
def bench_command(
    trace: Path = typer.Option(..., "--trace", help="An SWF trace, .swf or .swf.gz"),
    at: str = typer.Option(
        ..., "--at", help="Instants on the trace's clock, comma-separated seconds"
    ),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
) -> None:
    """Replay a trace online: at each instant, the snapshot and its predicted starts."""
    from tools.waits.jobs import load_history
    from tools.waits.predictor import WaitPredictor
    from tools.waits.replay import bench_snapshots

    try:
        instants = _instants(at)
        table = load_history(trace)
        snapshots = bench_snapshots(table, instants, WaitPredictor(table))
    except RightsizeError as error:
        fail(error, as_json)
    payload = {"snapshots": [s.model_dump(mode="json") for s in snapshots]}

    def render() -> None:
        for snapshot in snapshots:
            console.print(f"t={snapshot.taken_at:.0f}: {len(snapshot.predictions)} pending jobs")

    emit(payload, as_json, render)


def _instants(text: str) -> list[float]:
    out = []
    for part in text.split(","):
        try:
            value = float(part)
        except ValueError as exc:
            raise InvalidInputError("is not a number of seconds", field="--at", value=part) from exc
        if value < 0:
            raise InvalidInputError(
                "is negative; instants are seconds >= 0", field="--at", value=part
            )
        out.append(value)
    return out


if TYPE_CHECKING:
    from tools.waits.jobs import JobTable
    from tools.waits.snapshot import WaitSnapshot
