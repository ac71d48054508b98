"""``rightsize replay``: feed one agent the events it consumed in a log; diff its actions."""

from __future__ import annotations

import asyncio
from pathlib import Path

import typer
from rich.table import Table

from knowledge_base.errors import InvalidInputError, RightsizeError
from rightsize.output import console, emit, fail

# agents.replay's AGENT_CLASSES, named here so --help loads no agent (a test checks they agree)
AGENT_NAMES = ("intelligence", "estimation", "optimization", "profiling", "scheduler", "promotion")


def _check_log(log: Path, as_json: bool) -> None:
    """Refuse a file with no event at all (not JSONL, or not an event log), saying why."""
    import logging

    from agents.eventlog import EventLogReader

    if not log.is_file():
        return  # replay_agent names a missing log
    reader = EventLogReader(log)
    quiet = logging.getLogger("agents.eventlog")
    level, quiet.level = quiet.level, logging.ERROR  # one error below, not a warning a line
    try:
        found = next(iter(reader), None)
    finally:
        quiet.setLevel(level)
    if found is not None:
        return
    if reader.errors:
        first = reader.errors[0]
        reason = str(first).removeprefix(f"{first.source}: ")
        fail(
            InvalidInputError(
                f"not an event log (JSONL of recorded events): no line is an event; "
                f"{len(reader.errors)} bad, the first at {reason}",
                source=str(log),
            ),
            as_json,
        )
    fail(InvalidInputError("the log holds no events", source=str(log)), as_json)


def replay_command(
    log: Path = typer.Argument(..., help="Event log (JSONL), e.g. from simulate --event-log"),
    agent: str = typer.Option(..., "--agent", help=f"One of {', '.join(AGENT_NAMES)}"),
    against: str | None = typer.Option(
        None,
        "--against",
        help="MODULE:CLASS of a new version of the agent to diff against the recorded actions",
    ),
    kb: Path | None = typer.Option(
        None,
        "--kb",
        help="SQLite knowledge base the run started from (copied, never written); "
        "default LOG.kb.db if present, else the seeded catalog",
    ),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
) -> None:
    """Replay one agent on a recorded event log: same actions (exit 0) or a diff (exit 1)."""
    from agents.replay import replay_agent
    from knowledge_base.seed import load_seed_catalog
    from simulations.agents_loop import start_state_path

    _check_log(log, as_json)
    start = kb
    if start is None and start_state_path(log).is_file():
        start = start_state_path(log)
    try:
        report = asyncio.run(
            replay_agent(
                log, agent, against=against, kb_path=start, default_catalog=load_seed_catalog
            )
        )
    except RightsizeError as error:
        fail(error, as_json)

    def render() -> None:
        verdict = "identical" if report.identical else "DIFFERENT"
        table = Table(
            title=f"{report.agent}{' vs ' + report.against if report.against else ''} on "
            f"{report.log}: {report.matched}/{report.compared} actions {verdict}"
        )
        for column in ("consumed event", "consumed", "same"):
            table.add_column(column, justify="right")
        for kind, tally in sorted(report.by_type.items()):
            table.add_row(kind, f"{tally.consumed:,}", f"{tally.matched:,}")
        console.print(table)
        for difference in report.differences[:5]:
            console.print(
                f"[bold]#{difference.line}[/] {difference.cause_type} "
                f"({difference.correlation_id})",
                highlight=False,
            )
            if difference.changes:
                for change in difference.changes:
                    console.print(f"  {change}", highlight=False, markup=False)
            else:
                console.print(
                    f"  then: {difference.recorded}\n  now:  {difference.replayed}",
                    highlight=False,
                    markup=False,
                )
        if report.skipped_lines:
            console.print(f"{report.skipped_lines} log lines were not valid entries (skipped)")

    emit(report, as_json, render)
    if not report.identical:
        raise typer.Exit(code=1)
