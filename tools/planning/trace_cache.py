"""Traces of users' model files kept on disk by content, so a second ``estimate`` of the
same file (in a new process) does not trace it again.

A key is the file's content digest with everything else the trace depends on (class,
input, batch size, what was traced) and the torch version; a file is ``KEY.pkl`` under
the chain's home (``HOME/traces``), written whole or not at all. These are this
program's own files: a file that does not load is traced again and replaced.
"""

from __future__ import annotations

import hashlib
import logging
import os
import pickle
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

__all__ = ["TraceCache", "file_digest"]

log = logging.getLogger(__name__)

T = TypeVar("T")
_FORMAT = 4  # bump when what is cached changes shape or a pickled class moves


def file_digest(path: Path) -> str:
    """The SHA-1 of a file's bytes (OSError where it cannot be read)."""
    return hashlib.sha1(path.read_bytes()).hexdigest()


class TraceCache:
    """``HOME/traces``: one pickle per traced thing, keyed by content (None: memory only)."""

    def __init__(self, folder: Path | None) -> None:
        self.folder = folder
        self._memory: dict[str, object] = {}

    def key(self, *parts: object) -> str:
        import torch

        text = repr((_FORMAT, torch.__version__, *parts))
        return hashlib.sha1(text.encode()).hexdigest()[:24]

    def get_or_make(self, key: str, make: Callable[[], T]) -> T:
        """The cached value of ``key``, else ``make()`` (kept, and written to disk)."""
        if key in self._memory:
            return self._memory[key]  # type: ignore[return-value]
        path = None if self.folder is None else self.folder / f"{key}.pkl"
        if path is not None and path.is_file():
            try:
                with path.open("rb") as stream:
                    value: T = pickle.load(stream)  # our own files
            except (OSError, pickle.UnpicklingError, EOFError, AttributeError, ImportError) as exc:
                log.warning("trace cache %s unreadable (%s): tracing again", path, exc)
            else:
                self._memory[key] = value
                return value
        value = make()
        self._memory[key] = value
        if path is not None:
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
                with tmp.open("wb") as stream:
                    pickle.dump(value, stream, protocol=pickle.HIGHEST_PROTOCOL)
                tmp.replace(path)
            except OSError as exc:  # a cache that cannot be written only costs time
                log.warning("trace cache %s not written: %s", path, exc)
        return value
