"""Setting pending jobs' priorities: how a queue order reaches the batch system.

SLURM starts pending jobs by priority (its main scheduler and the backfill plugin both
walk the queue highest first), so an order is realized by giving each pending job a
priority: ``scontrol update JobId=ID Priority=N``. That needs SLURM operator rights
(``AdminLevel=Operator`` or the SlurmUser/root). A priority set so stays fixed: the
multifactor plugin no longer manages that job (``scontrol hold`` then ``release`` hands
it back), and 0 would hold the job, so priorities given here are >= 1.

Errors: ``PriorityNotSet`` with a ``reason``:

- ``rights``: SLURM refused (no operator rights): retrying cannot help;
- ``vanished``: the job is no longer pending (started, cancelled, finished, unknown):
  nothing to order any more;
- ``down``: the controller did not answer (``transient``): a retry may help;
- ``invalid``: the id or the priority is not one SLURM takes (checked before any call).
"""

from __future__ import annotations

import abc
import asyncio
import re
from typing import Literal

from tools.actuators.model import ActuatorError
from tools.actuators.slurm_commands import SlurmCommandError, SlurmCommands

__all__ = [
    "MAX_PRIORITY",
    "PriorityNotSet",
    "PriorityReason",
    "PrioritySetter",
    "SlurmPriorities",
]

MAX_PRIORITY = 4_294_967_293
"""The largest priority SLURM takes from ``scontrol update`` (uint32 less its
INFINITE and NO_VAL markers); 0 would hold the job, so priorities are >= 1."""

PriorityReason = Literal["rights", "vanished", "down", "invalid", "refused"]

_RIGHTS = re.compile(
    r"access/permission denied|not authorized|permission denied|invalid user id", re.IGNORECASE
)
_VANISHED = re.compile(
    r"invalid job id|job has already finished|already completed|job is no longer pending|"
    r"not pending|invalid job state",
    re.IGNORECASE,
)
# What ``scontrol update`` prints when the controller is down (measured on the local
# SLURM, slurm-wlm 22.05.8: the update path does not say "unable to contact").
_DOWN = re.compile(r"unexpected message received", re.IGNORECASE)


class PriorityNotSet(ActuatorError):
    """The batch system did not take a priority; ``reason`` says why, ``transient``
    whether the same call may succeed later."""

    def __init__(self, message: str, *, reason: PriorityReason, transient: bool = False) -> None:
        super().__init__(message, transient=transient)
        self.reason: PriorityReason = reason


class PrioritySetter(abc.ABC):
    """Sets one pending job's priority on a batch system (higher starts first)."""

    backend: str = "abstract"

    @abc.abstractmethod
    async def set_priority(self, job_id: str, priority: int) -> None:
        """Give pending ``job_id`` ``priority``; PriorityNotSet when it is not taken."""


class SlurmPriorities(PrioritySetter):
    """``scontrol update JobId=ID Priority=N`` through the one SLURM command seam."""

    backend = "slurm"

    def __init__(self, commands: SlurmCommands | None = None) -> None:
        self.commands = commands or SlurmCommands()

    async def set_priority(self, job_id: str, priority: int) -> None:
        if not job_id.isdigit():
            raise PriorityNotSet(f"job_id {job_id!r} is not a SLURM job id", reason="invalid")
        if not 1 <= priority <= MAX_PRIORITY:
            raise PriorityNotSet(
                f"priority {priority} for job {job_id} is outside 1..{MAX_PRIORITY}",
                reason="invalid",
            )
        try:
            await asyncio.to_thread(
                self.commands.run,
                ["scontrol", "update", f"JobId={job_id}", f"Priority={priority}"],
            )
        except SlurmCommandError as exc:
            raise _refusal(job_id, priority, exc) from exc


def _refusal(job_id: str, priority: int, exc: SlurmCommandError) -> PriorityNotSet:
    text = str(exc)
    what = f"SLURM did not set job {job_id}'s priority to {priority}: {text}"
    if exc.transient or _DOWN.search(text):
        return PriorityNotSet(what, reason="down", transient=True)
    if _RIGHTS.search(text):
        return PriorityNotSet(what + " (needs SLURM operator rights)", reason="rights")
    if _VANISHED.search(text):
        return PriorityNotSet(what, reason="vanished")
    return PriorityNotSet(what, reason="refused")
