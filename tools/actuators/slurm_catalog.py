"""A live SLURM cluster as a catalog system: the actuator asks, the importer reads.

The batch-system commands run here, through ``SlurmCommands`` (the one seam to SLURM's
client commands); ``knowledge_base.importers.slurm`` only parses what they answered, so
the knowledge base never runs a command. SLURM 23.02+ answers ``scontrol show ...
--json``; older releases (Debian 12 ships 22.05) reject ``--json`` on scontrol and list
only nodes in ``sinfo --json``, so JSON is asked first and ``--oneliner`` text after.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from knowledge_base.catalog import System
from knowledge_base.errors import RightsizeError
from knowledge_base.importers.slurm import (
    parse_nodes_json,
    parse_partitions_json,
    parse_partitions_text,
    system_from_slurm,
)
from tools.actuators.slurm_commands import SlurmCommandError, SlurmCommands

__all__ = ["CommandRunner", "controller_answers", "import_slurm_system", "slurm_config"]


class CommandRunner(Protocol):
    """``SlurmCommands`` in production. It raises a ``RightsizeError`` when a command
    fails; a transient one (the controller did not answer) is passed on, any other means
    "not supported here" and the older form of the command is tried."""

    def run(self, args: Sequence[str], stdin: str | None = None) -> str: ...


def import_slurm_system(name: str, center: str, commands: CommandRunner | None = None) -> System:
    """Ask the live cluster (JSON where the release supports it, else text) and read its
    answers as the catalog system ``name``."""
    commands = commands or SlurmCommands()
    try:
        partitions = parse_partitions_json(
            commands.run(["scontrol", "show", "partition", "--json"]),
            "scontrol show partition --json",
        )
    except RightsizeError as exc:
        if exc.transient:
            raise
        partitions = parse_partitions_text(
            commands.run(["scontrol", "show", "partition", "--oneliner"]),
            "scontrol show partition --oneliner",
        )
    try:
        nodes = parse_nodes_json(
            commands.run(["scontrol", "show", "node", "--json"]), "scontrol show node --json"
        )
    except RightsizeError as exc:
        if exc.transient:
            raise
        nodes = parse_nodes_json(commands.run(["sinfo", "--json"]), "sinfo --json")
    return system_from_slurm(name, center, partitions, nodes, "live SLURM")


def controller_answers(commands: SlurmCommands | None = None) -> bool:
    """Whether a SLURM controller answers this machine's client commands (``sinfo``)."""
    try:
        (commands or SlurmCommands(timeout_s=5)).run(["sinfo", "--noheader", "--summarize"])
    except SlurmCommandError:
        return False
    return True


def slurm_config(commands: SlurmCommands | None = None) -> str:
    """``scontrol show config``: the controller's settings, as text."""
    return (commands or SlurmCommands(timeout_s=10)).run(["scontrol", "show", "config"])
