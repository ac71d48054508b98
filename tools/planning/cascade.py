"""Checkpointed cascades: a run longer than a partition allows, as a chain of short jobs.

A workload that checkpoints can run past a partition's walltime limit as a series of
jobs, each resuming from the last checkpoint (seed 001: a series of short jobs, for
example through debug queues). Each segment pays a restart overhead (queue start,
loading the checkpoint, writing the next one) on top of its share of the work. The
split is even, in whole seconds, so the segments' work adds up to exactly the run and
every segment's walltime (work + overhead, rounded up to the minute) fits the limit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["Segment", "cascade_length", "split_run"]


@dataclass(frozen=True, slots=True)
class Segment:
    """One job of a chain: the work it does and the walltime it asks for."""

    work_s: int
    walltime_s: int


def _minutes(seconds: int) -> int:
    return math.ceil(seconds / 60) * 60


def cascade_length(run_s: int, *, max_walltime_s: int, overhead_s: int) -> int | None:
    """How many jobs ``split_run`` would make, without making them (the count can be huge).

    1 when the run fits; None when a segment leaves no time for work after the overhead.
    """
    if run_s <= 0:
        raise ValueError(f"run_s must be positive, got {run_s}")
    if run_s <= max_walltime_s:
        return 1
    usable_s = max_walltime_s - overhead_s
    if usable_s <= 0:
        return None
    return math.ceil(run_s / usable_s)


def split_run(
    run_s: int, *, max_walltime_s: int, overhead_s: int, min_walltime_s: int = 60
) -> list[Segment] | None:
    """Segments whose work sums to ``run_s`` and whose walltimes fit ``max_walltime_s``.

    One segment (no overhead) when the run fits; None when a segment of at most
    ``max_walltime_s`` leaves no time for work after the overhead.
    """
    count = cascade_length(run_s, max_walltime_s=max_walltime_s, overhead_s=overhead_s)
    floor_s = max(min_walltime_s, 60)
    if count is None:
        return None
    if count == 1:
        return [Segment(run_s, min(max(_minutes(run_s), floor_s), max_walltime_s))]
    base, extra = divmod(run_s, count)
    segments = []
    for index in range(count):
        work = base + (1 if index < extra else 0)
        walltime = min(max(_minutes(work + overhead_s), floor_s), max_walltime_s)
        segments.append(Segment(work, walltime))
    return segments
