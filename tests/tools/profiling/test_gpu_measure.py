"""The GPU measuring script (tools/profiling/gpu_measure.py), run here on the CPU."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from tools.profiling import gpu_measure
from tools.profiling.gpu_measure import Config, configurations, main, measure
from tools.profiling.zoo.registry import TrainingTask


def test_a_cpu_dry_run_times_the_step_and_leaves_memory_to_cuda() -> None:
    row = measure(Config("sweep", "mlp", 8, params={"depth": 2, "width": 128}), 3, 0.05, "cpu")
    assert row["status"] == "ok" and row["device"] == "cpu"
    assert 0 < row["step_ms"]["p10"] <= row["step_ms"]["p50"] <= row["step_ms"]["p90"]
    assert row["forward_backward_ms"]["p50"] > 0 and row["timed_steps"] >= 3
    assert row["max_memory_allocated_mib"] is None  # CUDA's counters only
    assert row["parameters"] > 0


def test_the_check_plan_measures_what_the_main_plan_did_not_besides_its_repeats() -> None:
    main_keys = {c.key() for c in configurations(120)}
    check = [c.key() for c in configurations(150, seed=1, plan="check")]
    repeats = check[:14]  # the README example and the model files again
    assert set(repeats) <= main_keys
    new = [k for k in check[14:] if not k.startswith("sweep:")]
    assert new and not set(new) & main_keys


def test_a_failing_configuration_is_a_row_and_the_run_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = gpu_measure.build_task

    def build(config: Config) -> TrainingTask:
        if config.batch_size == 64:
            raise ValueError("no such layer")
        return real(config)

    monkeypatch.setattr(gpu_measure, "build_task", build)
    args = ["--device", "cpu", "--out", str(tmp_path), "--skip", "2", "--limit", "2"]
    assert main([*args, "--iterations", "2", "--budget-s", "0.01"]) == 0
    lines = (tmp_path / "gpu_steps.jsonl").read_text().splitlines()
    failed, ok = (json.loads(line) for line in lines)
    assert failed["key"] == "file:examples/models/small_cnn.py[]:b64:sgd:fp32"
    assert failed["status"] == "failed" and "ValueError: no such layer" in failed["error"]
    assert ok["key"].endswith("small_cnn.py[]:b256:sgd:fp32") and ok["status"] == "ok"


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device is here")
def test_asking_for_cuda_without_one_measures_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--out", str(tmp_path)]) == 2
    assert "no CUDA device" in capsys.readouterr().err
    assert not (tmp_path / "gpu_steps.jsonl").exists()


def test_the_provenance_names_the_commit_git_gives_else_unknown(tmp_path: Path) -> None:
    """``--commit`` defaults to ``git rev-parse --short HEAD`` (no environment variable)."""
    import subprocess

    repo = Path(gpu_measure.__file__).resolve().parents[2]
    found = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=repo, capture_output=True, text=True
    )
    expected = found.stdout.strip() if found.returncode == 0 else "unknown"
    assert gpu_measure.current_commit(repo) == expected
    assert gpu_measure.current_commit(tmp_path) == "unknown"  # not a git repository
