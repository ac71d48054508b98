"""Printing results: rich tables for people, ``--json`` for programs, errors on stderr."""

from __future__ import annotations

import io
import json
import sys
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

import typer
from pydantic import BaseModel
from rich.console import Console
from rich.table import Table

from knowledge_base.errors import InvalidInputError, RightsizeError

__all__ = ["console", "emit", "fail", "fit_columns"]

console = Console()
err_console = Console(stderr=True)


def fit_columns(
    table: Table, width: int, wrap_first: Sequence[str], *, wrap_cells: Sequence[str] = ()
) -> int:
    """Set ``table``'s column widths (its rows added) so it fits ``width`` characters where
    it can, by wrapping the columns named in ``wrap_first``, in that order, at spaces:
    their headers, and the cells of those also named in ``wrap_cells`` (other cells stay
    on one line). No word is split, so an id or a figure is never cut at a narrow
    terminal's edge (rich would fold the widest cells mid-word). Returns the characters
    it is still too wide by (0: it fits)."""
    columns = table.columns
    cells = [[str(column.header), *(str(cell) for cell in column._cells)] for column in columns]
    natural = [max(len(cell) for cell in column) for column in cells]
    words = [
        max(
            max((len(w) for w in column[0].split()), default=1),
            *(
                max((len(w) for w in cell.split()), default=1)
                if str(header) in wrap_cells
                else len(cell)
                for cell in column[1:]
            ),
        )
        for header, column in zip((c.header for c in columns), cells, strict=True)
    ]
    for column, size in zip(columns, natural, strict=True):
        column.width, column.no_wrap, column.overflow = size, False, "fold"
    probe = Console(width=10**4, file=io.StringIO(), color_system=None)
    probe.print(table)
    printed = probe.file.getvalue().splitlines()  # type: ignore[attr-defined]
    overhead = max((len(line.rstrip()) for line in printed), default=0) - sum(natural)
    excess = sum(natural) + overhead - width
    headers = [str(column.header) for column in columns]
    # Two passes: each column first to half its width at most, then to its longest word,
    # so one column does not take all the wrapping.
    halves = [max(w, (n + 1) // 2) for w, n in zip(words, natural, strict=True)]
    for least in (halves, words):
        for name in wrap_first:
            if excess <= 0 or name not in headers:
                continue
            i = headers.index(name)
            width_now = columns[i].width or natural[i]
            narrower = max(least[i], width_now - excess)
            if narrower < width_now:
                excess -= width_now - narrower
                columns[i].width = narrower
    return max(0, excess)


def emit(
    data: BaseModel | dict[str, Any] | list[Any], as_json: bool, render: Callable[[], None]
) -> None:
    """Print ``data`` as JSON when asked, else call ``render`` for the human view."""
    if as_json:
        payload = data.model_dump(mode="json") if isinstance(data, BaseModel) else data
        sys.stdout.write(json.dumps(payload, indent=2, default=str) + "\n")
    else:
        render()


def fail(error: RightsizeError, as_json: bool = False) -> NoReturn:
    """Report an error (naming field and value where known) and exit 2."""
    if as_json:
        body: dict[str, Any] = {"error": str(error), "kind": type(error).__name__}
        if isinstance(error, InvalidInputError):
            body.update(source=error.source, field=error.field)
        sys.stdout.write(json.dumps(body, default=str) + "\n")
    # one line, never folded by rich: a field, a value or an id stays whole to copy
    err_console.print(f"[bold red]error:[/] {error}", highlight=False, markup=True, soft_wrap=True)
    raise typer.Exit(code=2)
