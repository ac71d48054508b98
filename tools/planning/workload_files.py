"""Reading a WorkloadSpec from a YAML or JSON file, with errors that point at the field.

``rightsize plan WORKLOAD.yaml`` starts here. The file is validated whole before anything
is estimated; a bad field is an ``InvalidInputError`` naming the file, the field's path
(``workload.batch_sizes[1]``) and the value it holds. A relative ``model: file.py`` is
read beside the workload file (else from the working directory), and so is a file a
DNN's ``command`` names (``python train.py``): jobs run in their plan's own folder, not
where the user typed the command, so ``train.py`` beside the workload file becomes its
absolute path.
"""

from __future__ import annotations

import difflib
import json
import shlex
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from knowledge_base.errors import InvalidInputError
from knowledge_base.workload import DNNTraining, WorkloadSpec

__all__ = ["load_workload", "parse_workload"]


def _path(location: tuple[int | str, ...]) -> str:
    text = ""
    for part in location:
        if isinstance(part, int):
            text += f"[{part}]"
        elif part in ("dnn_training", "generic"):
            continue  # the discriminated union's branch name is not a field of the file
        else:
            text += f".{part}" if text else str(part)
    return text


def parse_workload(document: Any, source: str) -> WorkloadSpec:
    """A WorkloadSpec from an already-parsed document."""
    if not isinstance(document, dict):
        raise InvalidInputError(
            f"expected a mapping at the top, got {type(document).__name__}", source=source
        )
    try:
        return WorkloadSpec.model_validate(document)
    except ValidationError as exc:
        typo = _misspelt(exc, source)
        if typo is not None:
            raise typo from exc
        first = exc.errors()[0]
        message = first["msg"].removeprefix("Value error, ")
        value = first.get("input")
        if first["type"] == "missing":
            value = None
        raise InvalidInputError(
            message, source=source, field=_path(tuple(first["loc"])) or None, value=value
        ) from exc


def _misspelt(exc: ValidationError, source: str = "") -> InvalidInputError | None:
    """An unknown key beside a required one it is close to (``epcohs`` for ``epochs``):
    one error that names both, rather than "epochs: Field required"."""
    errors = exc.errors()
    unknown = [e for e in errors if e["type"] == "extra_forbidden"]
    for error in unknown:
        parent = tuple(error["loc"][:-1])
        missing = [
            str(e["loc"][-1])
            for e in errors
            if e["type"] == "missing" and tuple(e["loc"][:-1]) == parent
        ]
        close = difflib.get_close_matches(str(error["loc"][-1]), missing, n=1, cutoff=0.6)
        if close:
            return InvalidInputError(
                f"unknown key {str(error['loc'][-1])!r}: did you mean {close[0]!r}? "
                f"({_path((*parent, close[0]))} is required)",
                source=source or None,
                field=_path(tuple(error["loc"])) or None,
                value=error.get("input"),
            )
    return None


def load_workload(path: Path) -> WorkloadSpec:
    """Read ``path`` (``.json`` as JSON, anything else as YAML) into a WorkloadSpec."""
    source = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise InvalidInputError(f"cannot read: {exc.strerror}", source=source) from exc
    try:
        document = json.loads(text) if path.suffix.lower() == ".json" else yaml.safe_load(text)
    except json.JSONDecodeError as exc:
        raise InvalidInputError(f"not JSON: {exc.msg} at line {exc.lineno}", source=source) from exc
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise InvalidInputError(f"not YAML{where}: {exc}", source=source) from exc
    return _command_beside(_model_beside(parse_workload(document, source), path), path)


def _model_beside(spec: WorkloadSpec, path: Path) -> WorkloadSpec:
    """A relative model file is read beside the workload file, as a user writes it."""
    workload = spec.workload
    if not isinstance(workload, DNNTraining) or not workload.model.endswith(".py"):
        return spec
    model = Path(workload.model).expanduser()
    if model.is_absolute():
        return spec
    beside = path.parent / model
    chosen = beside if beside.is_file() or not model.is_file() else model
    update = {"model": str(chosen.resolve())}
    return spec.model_copy(update={"workload": workload.model_copy(update=update)})


def _command_beside(spec: WorkloadSpec, path: Path) -> WorkloadSpec:
    """Files a DNN's command names beside the workload file, by absolute path.

    Only a plain command (words that need no shell quoting: no pipes, redirections or
    quotes) is rewritten; anything else is the user's shell text and left as written.
    """
    workload = spec.workload
    if not isinstance(workload, DNNTraining) or workload.command is None:
        return spec
    try:
        words = shlex.split(workload.command)
    except ValueError:
        return spec
    if not words or any(shlex.quote(word) != word for word in words):
        return spec
    changed = []
    for word in words:
        beside = path.parent / word
        if not word.startswith(("-", "/", "~")) and beside.is_file():
            word = shlex.quote(str(beside.resolve()))
        changed.append(word)
    command = " ".join(changed)
    if command == workload.command:
        return spec
    update = {"command": command}
    return spec.model_copy(update={"workload": workload.model_copy(update=update)})
