"""The environment variables users set for data folders reach tools through the settings
(tools read none of them: tests/test_architecture.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from rightsize.settings import Settings
from rightsize.wiring import chain_config
from tools.estimators.cpu.paths import DATASET_NAME, default_dataset_path
from tools.estimators.gpu.kernels import default_neusight_root
from tools.estimators.gpu.trace_folders import TraceFolders


def test_the_dataset_and_neusight_folders_come_from_the_settings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("RIGHTSIZE_DNN_PROFILES", raising=False)
    monkeypatch.delenv("RIGHTSIZE_NEUSIGHT", raising=False)
    shipped = default_dataset_path(Settings().dnn_profiles)
    assert shipped.name == DATASET_NAME and shipped.parent.name == "dnn_profiles"
    assert default_neusight_root(Settings().neusight).name == "neusight"
    monkeypatch.setenv("RIGHTSIZE_DNN_PROFILES", str(tmp_path))  # a folder: its file
    monkeypatch.setenv("RIGHTSIZE_NEUSIGHT", str(tmp_path / "ns"))
    assert default_dataset_path(Settings().dnn_profiles) == tmp_path / DATASET_NAME
    assert default_neusight_root(Settings().neusight) == tmp_path / "ns"
    monkeypatch.setenv("RIGHTSIZE_DNN_PROFILES", str(tmp_path / "mine.jsonl"))  # a file
    assert default_dataset_path(Settings().dnn_profiles) == tmp_path / "mine.jsonl"
    assert default_dataset_path() == shipped  # nothing passed: the shipped file


def test_the_chain_keeps_gpu_traces_where_the_settings_say(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RIGHTSIZE_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("RIGHTSIZE_GPU_TRACES", raising=False)
    config = chain_config(Settings())
    assert config.gpu_traces == TraceFolders(tmp_path / "home" / "gpu_traces", shipped=True)
    monkeypatch.setenv("RIGHTSIZE_GPU_TRACES", "off")
    assert chain_config(Settings()).gpu_traces == TraceFolders()
    # another folder is another configuration: a chain of its own (shared_chain)
    assert config != chain_config(Settings())
