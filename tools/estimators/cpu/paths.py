"""Where the DNN profiling data lives (kept free of heavy imports: the planner reads it)."""

from __future__ import annotations

from pathlib import Path

__all__ = ["DATASET_NAME", "default_dataset_path"]

DATASET_NAME = "cpu_sweep.jsonl"


def default_dataset_path(override: Path | None = None) -> Path:
    """The sweep dataset: ``override`` (the settings' ``dnn_profiles``: a file, or a folder
    holding ``cpu_sweep.jsonl``), else the repository's committed file."""
    if override is not None:
        path = override.expanduser()
        return path / DATASET_NAME if path.is_dir() else path
    return Path(__file__).resolve().parents[3] / "data" / "dnn_profiles" / DATASET_NAME
