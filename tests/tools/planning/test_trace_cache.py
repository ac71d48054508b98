"""Traces kept on disk by content: a file that no longer loads is traced again."""

from __future__ import annotations

import pickle
from pathlib import Path, PurePosixPath

from tools.planning.trace_cache import TraceCache


def test_a_kept_trace_is_read_without_making_it_again(tmp_path: Path) -> None:
    made: list[int] = []
    first = TraceCache(tmp_path)
    key = first.key("model.py", 32)
    assert first.get_or_make(key, lambda: made.append(1) or {"ops": 3}) == {"ops": 3}

    again = TraceCache(tmp_path)  # a new process
    assert again.get_or_make(key, lambda: made.append(1) or {"ops": 4}) == {"ops": 3}
    assert made == [1]


def test_a_trace_whose_class_moved_is_traced_again_and_replaced(tmp_path: Path) -> None:
    """A pickle naming a module that no longer exists (a class moved between versions)."""
    cache = TraceCache(tmp_path)
    key = cache.key("model.py", 32)
    stale = pickle.dumps(PurePosixPath("ops")).replace(b"pathlib", b"pathl1b")  # no such module
    (tmp_path / f"{key}.pkl").write_bytes(stale)

    assert cache.get_or_make(key, lambda: {"ops": 2}) == {"ops": 2}
    assert TraceCache(tmp_path).get_or_make(key, lambda: {"ops": 5}) == {"ops": 2}
