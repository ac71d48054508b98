"""Progress on stderr for commands that run for a while; silent under ``--json``.

    with progress("replaying 3 runs", total=3, quiet=as_json) as bar:
        for run in runs:
            ...
            bar.advance()

    for item in track(items, "fitting", quiet=as_json): ...

A bar (or, without a total, a spinner with the elapsed time) goes to stderr, so stdout
stays the command's answer; it is drawn only on a terminal and erased when done. With
``quiet`` (``--json``) nothing is drawn at all.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from typing import TypeVar

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)

__all__ = ["Steps", "progress", "track"]

T = TypeVar("T")


class Steps:
    """One running task: advance it, or change its description or total."""

    def __init__(self, bar: Progress | None, task: TaskID | None) -> None:
        self._bar, self._task = bar, task

    def advance(self, steps: float = 1) -> None:
        if self._bar is not None and self._task is not None:
            self._bar.advance(self._task, steps)

    def update(
        self,
        *,
        description: str | None = None,
        completed: float | None = None,
        total: float | None = None,
    ) -> None:
        if self._bar is not None and self._task is not None:
            self._bar.update(self._task, description=description, completed=completed, total=total)


@contextlib.contextmanager
def progress(
    description: str, *, total: float | None = None, quiet: bool = False
) -> Iterator[Steps]:
    """A bar for ``total`` steps (a spinner when the total is unknown) while the block runs."""
    if quiet:
        yield Steps(None, None)
        return
    columns = [SpinnerColumn(), TextColumn("{task.description}")]
    if total is not None:
        columns += [BarColumn(bar_width=24), MofNCompleteColumn()]
    columns.append(TimeElapsedColumn())
    with Progress(*columns, console=Console(stderr=True), transient=True) as bar:
        yield Steps(bar, bar.add_task(description, total=total))


def track(
    items: Iterable[T], description: str, *, total: int | None = None, quiet: bool = False
) -> Iterator[T]:
    """Yield ``items`` with a bar advancing once per item."""
    if total is None and hasattr(items, "__len__"):
        total = len(items)  # type: ignore[arg-type]
    with progress(description, total=total, quiet=quiet) as steps:
        for item in items:
            yield item
            steps.advance()
