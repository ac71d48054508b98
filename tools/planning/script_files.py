"""Writing a plan's scripts (sbatch, Tapis requests) into a folder the user named.

A workload's name is the user's text: ``a/b`` or ``../name`` must neither crash nor
write outside the folder. ``file_stem`` keeps letters, digits, ``.``, ``_`` and ``-``
(anything else separates words joined by ``_``; a word's outer dots go, so no ``..``
and no hidden file), and ``write_files`` writes every file
beside its target and renames it in place, so a failure leaves no half-written script.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from pathlib import Path

from knowledge_base.errors import InvalidInputError

__all__ = ["file_stem", "write_files"]

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
MAX_STEM_CHARS = 100


def file_stem(name: str) -> str:
    """``name`` as one safe file name (no separators, not hidden, never empty)."""
    parts = (part.strip("._") for part in _UNSAFE.split(name))
    stem = "_".join(part for part in parts if part)
    return stem[:MAX_STEM_CHARS] or "job"


def write_files(
    directory: Path, name: str, texts: Sequence[str], suffix: str, *, field: str
) -> list[Path]:
    """Write ``texts`` as ``DIR/STEM-00SUFFIX``, ``-01`` ...; ``field`` names the option."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InvalidInputError(
            f"cannot make the folder: {exc.strerror}", field=field, value=str(directory)
        ) from exc
    root = directory.resolve()
    stem = file_stem(name)
    paths = [root / f"{stem}-{index:02d}{suffix}" for index in range(len(texts))]
    if any(path.parent != root for path in paths):  # file_stem makes this impossible
        raise InvalidInputError("would write outside the folder", field=field, value=name)
    written: list[Path] = []
    try:
        for path, text in zip(paths, texts, strict=True):
            partial = path.with_name(f".{path.name}.partial")
            partial.write_text(text, encoding="utf-8")
            os.replace(partial, path)
            written.append(path)
    except OSError as exc:
        for path in [*written, *(p.with_name(f".{p.name}.partial") for p in paths)]:
            path.unlink(missing_ok=True)
        raise InvalidInputError(
            f"cannot write the scripts: {exc.strerror}", field=field, value=str(directory)
        ) from exc
    return paths
