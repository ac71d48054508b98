"""The ``rightsize`` command line.

Commands load on demand: ``rightsize --help`` imports no command module, and a command
imports only its own (``COMMANDS`` names each one's module and short help). Start-up
stays under a second however heavy a command's libraries are (torch, xgboost,
langgraph load inside the functions that use them; ``benchmarks/startup.py``).
"""

from __future__ import annotations

import importlib
import logging
from typing import Any, NamedTuple

import typer
from typer._click import Command, Context, HelpFormatter  # typer's own copy of click
from typer.core import TyperGroup
from typer.main import get_command_from_info, get_group_from_info
from typer.models import CommandInfo, TyperInfo

from rightsize import __version__

__all__ = ["COMMANDS", "app", "main"]


class LazyCommand(NamedTuple):
    """Where a command lives (``module:attribute``: a function or a ``typer.Typer``)."""

    target: str
    help: str
    context_settings: dict[str, Any] | None = None


COMMANDS: dict[str, LazyCommand] = {
    "plan": LazyCommand(
        "rightsize.commands.plan:plan_command",
        "Plan a workload: every option, policy-checked, priced and queue-aware.",
    ),
    "estimate": LazyCommand(
        "rightsize.commands.estimate:estimate_command",
        "Estimate time per iteration, peak memory and walltime of your own model file.",
        {"allow_extra_args": True, "ignore_unknown_options": False},
    ),
    "history": LazyCommand(
        "rightsize.commands.history_import:app",
        "The knowledge base's job history: import a center's past (sacct).",
    ),
    "measurements": LazyCommand(
        "rightsize.commands.measurements:app",
        "Measurements the estimators learn from: import a center's GPU step times.",
    ),
    "history-bench": LazyCommand(
        "rightsize.commands.history:history_bench",
        "Replay a trace; score the user's request, last-2 and the model.",
    ),
    "simulate": LazyCommand(
        "rightsize.commands.simulate:simulate_command",
        "Replay a trace under scheduling policies and run-time estimates.",
    ),
    "replay": LazyCommand(
        "rightsize.commands.replay:replay_command",
        "Replay one agent on a recorded event log: same actions or a diff.",
    ),
    "catalog": LazyCommand(
        "rightsize.commands.catalog:app",
        "The center catalog: systems, partitions, node types, charges.",
    ),
    "center": LazyCommand("rightsize.commands.center:app", "Run Rightsize's agents."),
    "demo": LazyCommand("rightsize.commands.demo:app", "Demonstrations on the local cluster."),
    "profile": LazyCommand(
        "rightsize.commands.estimate:profile_app",
        "Profile DNN training (sweeps) and train the DNN estimators.",
    ),
    "synth": LazyCommand(
        "rightsize.commands.synth:app",
        "Synthetic job traces fitted on a real SWF trace (sequence, copula or TVAE).",
    ),
    "mcp": LazyCommand(
        "rightsize.commands.mcp:app", "The MCP server (stdio or streamable HTTP); its users."
    ),
    "submit": LazyCommand(
        "rightsize.commands.jobs:submit_command",
        "Plan a workload and submit the option chosen, exactly (--wait: until it ends).",
    ),
    "status": LazyCommand(
        "rightsize.commands.jobs:status_command", "Plans as the ledger holds them (or one)."
    ),
    "watch": LazyCommand(
        "rightsize.commands.jobs:watch_command",
        "Follow a plan live: state, segment k of n, progress, elapsed against walltime.",
    ),
    "cancel": LazyCommand(
        "rightsize.commands.jobs:cancel_command",
        "Cancel a plan: the Scheduler cancels its jobs and submits no more.",
    ),
    "jobs": LazyCommand(
        "rightsize.commands.jobs:jobs_command", "Every job the ledger holds, per plan."
    ),
    "queue": LazyCommand(
        "rightsize.commands.queue:app",
        "Queue waits: when pending jobs will start (p10-p90), learned from history.",
    ),
}


def load_command(name: str, entry: LazyCommand) -> Command:
    """Import one command's module and build its click command."""
    module_name, _, attribute = entry.target.partition(":")
    target = getattr(importlib.import_module(module_name), attribute)
    if isinstance(target, typer.Typer):
        info = TyperInfo(target, name=name, help=entry.help)
        return get_group_from_info(
            info, pretty_exceptions_short=False, rich_markup_mode=None, suggest_commands=True
        )
    command = get_command_from_info(
        CommandInfo(name=name, callback=target, context_settings=entry.context_settings),
        pretty_exceptions_short=False,
        rich_markup_mode=None,
    )
    return command


class LazyGroup(TyperGroup):
    """The root group: lists commands from ``COMMANDS``, imports one only when it runs."""

    def list_commands(self, ctx: Context) -> list[str]:
        return [*super().list_commands(ctx), *(n for n in COMMANDS if n not in self.commands)]

    def get_command(self, ctx: Context, cmd_name: str) -> Command | None:
        if cmd_name not in self.commands and cmd_name in COMMANDS:
            self.commands[cmd_name] = load_command(cmd_name, COMMANDS[cmd_name])
        return super().get_command(ctx, cmd_name)

    def format_commands(self, ctx: Context, formatter: HelpFormatter) -> None:
        # The short help comes from the table: listing commands imports none of them.
        rows = [
            (name, COMMANDS[name].help if name in COMMANDS else self.commands[name].short_help)
            for name in self.list_commands(ctx)
        ]
        with formatter.section("Commands"):
            formatter.write_dl([(name, text or "") for name, text in rows])


# Plain (click) help: flags read as flags (rich help shows ``--json <bool>``), and it
# fits 80 columns.
app = typer.Typer(
    name="rightsize",
    cls=LazyGroup,
    help="Right-sized, policy-compliant, queue-aware batch jobs for shared HPC centers.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


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
