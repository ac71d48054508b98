"""The one seam to SLURM's client commands (sbatch, squeue, sinfo, sacct, scontrol...).

Every SLURM call Rightsize makes, from the executor and from the catalog importer (which
is handed a runner, so the knowledge base never imports this layer), goes through
``SlurmCommands.run``: no shell, a timeout, and one error type that says whether a retry
can help. Point ``prefix`` at a wrapper (``ssh login-node``, a container exec) to run the
commands elsewhere; tests point it at a path that does not exist.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Mapping, Sequence

from tools.actuators.model import ActuatorError

__all__ = ["SlurmCommandError", "SlurmCommands"]

# What the client commands print when the controller (or slurmdbd) did not answer: the
# same command may succeed once it is back.
_TRANSIENT = re.compile(
    r"unable to contact slurm controller|socket timed out|connection refused|"
    r"temporarily unavailable|try again|slurm_persist_conn|communications connection failure|"
    r"slurmdbd.*(?:not responding|connection)",
    re.IGNORECASE,
)


class SlurmCommandError(ActuatorError):
    """A SLURM command failed or could not run; transient when it timed out or the
    controller did not answer."""


class SlurmCommands:
    """Runs SLURM client commands; point ``prefix`` elsewhere in tests."""

    def __init__(self, timeout_s: float = 30.0, prefix: Sequence[str] = ()) -> None:
        self.timeout_s = timeout_s
        self.prefix = list(prefix)

    def run(
        self, args: Sequence[str], stdin: str | None = None, env: Mapping[str, str] | None = None
    ) -> str:
        """stdout of ``args`` (never through a shell); SlurmCommandError when it fails.
        ``env`` adds variables (``SLURM_TIME_FORMAT``) to this process's environment."""
        command = [*self.prefix, *args]
        try:
            done = subprocess.run(
                command,
                input=stdin,
                env={**os.environ, **env} if env else None,
                capture_output=True,
                text=True,
                timeout=self.timeout_s,
                check=False,
            )
        except FileNotFoundError as exc:
            raise SlurmCommandError(f"{command[0]} not found: is SLURM installed?") from exc
        except subprocess.TimeoutExpired as exc:
            raise SlurmCommandError(
                f"{' '.join(command)} timed out after {self.timeout_s:.0f} s", transient=True
            ) from exc
        if done.returncode != 0:
            stderr = done.stderr.strip()
            raise SlurmCommandError(
                f"{' '.join(command)} exited {done.returncode}: {stderr}",
                transient=bool(_TRANSIENT.search(stderr)),
            )
        return done.stdout
