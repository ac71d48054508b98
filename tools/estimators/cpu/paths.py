"""Where the DNN profiling data lives (kept free of heavy imports: the planner reads it)."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["DATASET_NAME", "default_dataset_path"]

DATASET_NAME = "cpu_sweep.jsonl"


def default_dataset_path() -> Path:
    """The sweep dataset: ``RIGHTSIZE_DNN_PROFILES``, else the repository's committed file."""
    override = os.environ.get("RIGHTSIZE_DNN_PROFILES")
    if override:
        path = Path(override).expanduser()
        return path / DATASET_NAME if path.is_dir() else path
    return Path(__file__).resolve().parents[3] / "data" / "dnn_profiles" / DATASET_NAME
