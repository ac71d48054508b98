"""Watching jobs: what changed since the last look, and how far a job says it has got.

Jobs report progress by printing a line the monitor can parse, for example from a
training loop::

    print(f"RIGHTSIZE_PROGRESS epoch={epoch}/{epochs}", flush=True)

Any unit works (``step=1200/50000``, ``sample=3.2e6/1e7``); the last such line wins.
``observe`` is pure: given what was seen before and what is seen now, it returns the
changes worth publishing. The Scheduler agent turns them into bus events.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from tools.actuators.model import JobStatus

__all__ = ["Observation", "Progress", "observe", "parse_progress"]

_PROGRESS = re.compile(
    r"RIGHTSIZE_PROGRESS\s+(?P<unit>[A-Za-z_][\w-]*)=(?P<done>\d+(?:\.\d+)?(?:e[+-]?\d+)?)"
    r"(?:/(?P<total>\d+(?:\.\d+)?(?:e[+-]?\d+)?))?",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class Progress:
    """How far a job is, in its own unit."""

    unit: str
    done: float
    total: float | None = None

    @property
    def fraction(self) -> float | None:
        if not self.total:
            return None
        return min(1.0, self.done / self.total)


def parse_progress(output: str) -> Progress | None:
    """The last progress line in ``output``, or None when the job printed none."""
    last = None
    for match in _PROGRESS.finditer(output):
        last = match
    if last is None:
        return None
    total = last.group("total")
    return Progress(
        unit=last.group("unit").lower(),
        done=float(last.group("done")),
        total=float(total) if total is not None else None,
    )


@dataclass(frozen=True)
class Observation:
    """Something worth telling the rest of the system about one job."""

    status: JobStatus
    previous_state: str | None
    state_changed: bool
    progress: Progress | None
    progress_changed: bool

    @property
    def finished(self) -> bool:
        return self.state_changed and self.status.finished


def observe(
    previous: JobStatus | None,
    current: JobStatus,
    previous_progress: Progress | None,
    current_progress: Progress | None,
) -> Observation | None:
    """What changed between two looks at a job; None when nothing did."""
    state_changed = previous is None or previous.state is not current.state
    progress_changed = current_progress is not None and current_progress != previous_progress
    if not state_changed and not progress_changed:
        return None
    return Observation(
        status=current,
        previous_state=previous.state.value if previous is not None else None,
        state_changed=state_changed,
        progress=current_progress,
        progress_changed=progress_changed,
    )
