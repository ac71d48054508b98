"""``rightsize replay``: feed one agent the events it consumed in a log; diff its actions."""

from __future__ import annotations

import asyncio
from pathlib import Path

import typer
from rich.table import Table

from agents.replay import AGENT_CLASSES, replay_agent
from knowledge_base.errors import RightsizeError
from knowledge_base.seed import load_seed_catalog
from rightsize.output import console, emit, fail
from simulations.agents_loop import start_state_path


def replay_command(
    log: Path = typer.Argument(..., help="Event log (JSONL), e.g. from simulate --event-log"),
    agent: str = typer.Option(..., "--agent", help=f"One of {', '.join(AGENT_CLASSES)}"),
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
