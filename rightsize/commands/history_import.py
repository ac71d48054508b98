"""``rightsize history import slurm``: a center's SLURM accounting into job history.

The knowledge base's job history is what the history estimator trains on; importing
the center's past from ``sacct`` is how a center teaches Rightsize its own jobs.
Idempotent: a second import of the same past adds nothing (``--json`` says
``"added": 0`` and counts the rest as ``"already_known"``).
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import typer

from knowledge_base.errors import InvalidInputError, RightsizeError
from rightsize.output import console, emit, fail
from rightsize.settings import Settings

__all__ = ["app"]

app = typer.Typer(no_args_is_help=True, help="The knowledge base's job history.")
import_app = typer.Typer(no_args_is_help=True, help="Import a center's past into job history.")
app.add_typer(import_app, name="import")


def _since(text: str | None) -> datetime | None:
    if text is None:
        return None
    try:
        found = datetime.fromisoformat(text)
    except ValueError as exc:
        raise InvalidInputError(
            "is not a date (ISO 8601: 2026-01-31 or 2026-01-31T08:00:00, UTC unless given)",
            field="--since",
            value=text,
        ) from exc
    return found if found.tzinfo is not None else found.replace(tzinfo=UTC)


@import_app.command("slurm")
def slurm_command(
    since: str | None = typer.Option(
        None, "--since", help="Only jobs since DATE (ISO 8601, UTC unless given); default: all"
    ),
    cluster: str | None = typer.Option(
        None, "--cluster", help="The accounting cluster (sacct --clusters); default: local"
    ),
    system: str | None = typer.Option(
        None, "--system", help="Catalog system to record the jobs under (default: local_system)"
    ),
    batch_size: int = typer.Option(
        1000, "--batch-size", min=1, help="Jobs per write (one transaction each)"
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the counts as JSON."),
) -> None:
    """Fill job history from SLURM accounting (sacct), in batches, idempotently."""
    from rightsize.wiring import knowledge_base
    from tools.actuators.slurm_commands import SlurmCommands
    from tools.actuators.slurm_history import HistoryImport, import_slurm_history

    settings = Settings()

    async def run() -> HistoryImport:
        start = _since(since)
        async with knowledge_base(settings) as kb:
            return await import_slurm_history(
                kb,
                SlurmCommands(timeout_s=300),
                system=system or settings.local_system,
                since=start,
                cluster=cluster,
                batch_size=batch_size,
            )

    try:
        result = asyncio.run(run())
    except RightsizeError as error:
        fail(error, as_json)

    def render() -> None:
        batches = f"{result.batches} batch{'es' if result.batches != 1 else ''}"
        console.print(
            f"sacct listed {result.listed} jobs, {result.finished} finished: "
            f"{result.added} added to {result.system}'s history, "
            f"{result.already_known} already known ({batches} of up to {result.batch_size})",
            highlight=False,
        )
        if result.without_max_rss:
            named = ", ".join(result.without_max_rss_ids)
            more = result.without_max_rss - len(result.without_max_rss_ids)
            console.print(
                f"{result.without_max_rss} finished jobs have no MaxRSS in accounting (kept "
                f"with no used memory, not zero): {named}{f' and {more} more' if more else ''}",
                highlight=False,
            )

    emit(result, as_json, render)
