"""Printing results: rich tables for people, ``--json`` for programs, errors on stderr."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any, NoReturn

import typer
from pydantic import BaseModel
from rich.console import Console

from knowledge_base.errors import InvalidInputError, RightsizeError

__all__ = ["console", "emit", "fail"]

console = Console()
err_console = Console(stderr=True)


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
