"""The ``rightsize`` command line."""

from __future__ import annotations

import logging

import typer

from rightsize import __version__
from rightsize.commands import (
    catalog,
    center,
    demo,
    estimate,
    history,
    jobs,
    plan,
    replay,
    simulate,
    synth,
)
from rightsize.commands import mcp as mcp_command

app = typer.Typer(
    name="rightsize",
    help="Right-sized, policy-compliant, queue-aware batch jobs for shared HPC centers.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
app.add_typer(catalog.app, name="catalog")
app.command("plan")(plan.plan_command)
app.command("history-bench")(history.history_bench)
app.add_typer(center.app, name="center")
app.add_typer(demo.app, name="demo")
estimate.register(app)
app.command("simulate")(simulate.simulate_command)
app.command("replay")(replay.replay_command)
app.add_typer(synth.app, name="synth")
app.add_typer(mcp_command.app, name="mcp")
app.command("submit")(jobs.submit_command)
app.command("status")(jobs.status_command)
app.command("watch")(jobs.watch_command)
app.command("cancel")(jobs.cancel_command)
app.command("jobs")(jobs.jobs_command)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"rightsize {__version__}")
        raise typer.Exit()


@app.callback()
def root(
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Log progress to stderr."),
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version."
    ),
) -> None:
    logging.basicConfig(
        level=logging.INFO if verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )


def main() -> None:
    app()
