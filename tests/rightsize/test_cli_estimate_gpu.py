"""``rightsize estimate --gpu NAME / --gpu-spec FILE.json`` through the real app (issue #16)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rightsize.cli import app
from tests.rightsize.test_cli_estimate import _registry

runner = CliRunner()
REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "models" / "small_cnn.py"
V100 = {
    "Device": "Tesla V100-PCIE-32GB", "Dev_Mem": 32, "Mem_Bw": 900, "Num_Sm": 80,
    "Core_Per_SM": 64, "Freq": 1370, "SingleFLOPs": 14029, "L2Cache": 6,
}  # fmt: skip


@pytest.fixture(autouse=True)
def _isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RIGHTSIZE_HOME", str(tmp_path / "home"))
    for name in ("KB_URL", "MONGO_URL"):
        monkeypatch.delenv(f"RIGHTSIZE_{name}", raising=False)


def _estimate(*args: str) -> tuple[int, str, str]:
    base = ["estimate", "--model-file", str(EXAMPLE), "--model-class", "SmallCNN"]
    result = runner.invoke(app, [*base, *args])
    return result.exit_code, result.stdout, result.output


def test_gpu_spec_and_catalog_gpu_answer_with_forward_backward(tmp_path: Path) -> None:
    spec = tmp_path / "v100.json"
    spec.write_text(json.dumps(V100))
    code, stdout, output = _estimate(
        "--batch-size", "32", "--gpu-spec", str(spec), "--gpu", "NVIDIA A100 80GB", "--json"
    )
    assert code == 0, output
    rows = json.loads(stdout)["estimates"]
    assert [r["hardware"] for r in rows] == ["Tesla V100-PCIE-32GB", "NVIDIA A100 80GB"]
    for row in rows:
        fb, step = row["forward_backward_s"], row["iteration_time_s"]
        assert 0 < fb["p10"] <= fb["p50"] <= fb["p90"] and fb["p50"] < step["p50"]
        assert row["estimator"].startswith("gpu-opcost-")


def test_gpu_spec_with_a_missing_field_names_it_and_exits_2(tmp_path: Path) -> None:
    spec = tmp_path / "bad.json"
    spec.write_text(json.dumps({k: v for k, v in V100.items() if k != "Mem_Bw"}))
    code, _, output = _estimate("--batch-size", "8", "--gpu-spec", str(spec))
    assert code == 2 and "Mem_Bw" in output


def test_unknown_gpu_name_lists_known_ones_and_exits_2() -> None:
    code, _, output = _estimate("--batch-size", "8", "--gpu", "Voodoo 5")
    assert code == 2 and "Voodoo 5" in output and "A100" in output


def test_entries_carry_white_box_gpu_memory_allocated_and_reserved(tmp_path: Path) -> None:
    code, stdout, output = _estimate(
        "--batch-size", "64", "--gpu", "NVIDIA Tesla P100 (Pascal)", "--json"
    )
    assert code == 0, output
    (row,) = json.loads(stdout)["estimates"]
    memory = row["gpu_memory_mib"]
    assert 0 < memory["allocated"] <= memory["reserved"] < memory["total"]
    assert memory["context"] == 800.0 and "pascal" in memory["context_basis"]
    assert row["peak_memory_mb"]["p50"] == memory["total"] and row["fits"] is True


def test_a_batch_past_the_gpu_memory_does_not_fit(tmp_path: Path) -> None:
    code, stdout, output = _estimate(
        "--batch-size", "131072", "--gpu", "NVIDIA A100 40GB", "--json"
    )
    assert code == 0, output
    (row,) = json.loads(stdout)["estimates"]
    assert row["fits"] is False and row["gpu_memory_mib"]["total"] > 40960


BROKEN = """
import torch
from torch import nn
class Broken(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(5, 3)
    def forward(self, x):
        return self.fc(x)
def example_batch(n):
    return torch.randn(n, 7), torch.randint(0, 3, (n,))
"""


@pytest.mark.parametrize(
    ("spec", "gpu", "words"),
    [
        ({k: v for k, v in V100.items() if k != "Num_Sm"}, None, "Num_Sm"),
        ({**V100, "SingleFLOPs": 0}, None, "SingleFLOPs"),
        ({**V100, "Freq": -1370}, None, "Freq"),
        (None, "Voodoo 5", "known:"),
        (None, "BROKEN", "operator"),
    ],
)
def test_bad_gpu_input_exits_2_names_the_field_and_writes_nothing(
    tmp_path: Path, spec: dict[str, object] | None, gpu: str | None, words: str
) -> None:
    args = ["--batch-size", "8", "--hardware", "pitzer"]
    base = ["estimate", "--model-file", str(EXAMPLE), "--model-class", "SmallCNN"]
    if spec is not None:
        path = tmp_path / "spec.json"
        path.write_text(json.dumps(spec))
        args += ["--gpu-spec", str(path)]
    elif gpu == "BROKEN":
        model = tmp_path / "broken.py"
        model.write_text(BROKEN)
        base = ["estimate", "--model-file", str(model), "--model-class", "Broken"]
        args += ["--gpu", "NVIDIA A100 80GB"]
    else:
        assert gpu is not None
        args += ["--gpu", gpu]
    result = runner.invoke(app, [*base, *args])
    assert result.exit_code == 2, result.output
    assert words in result.output
    assert _registry(tmp_path) == []
