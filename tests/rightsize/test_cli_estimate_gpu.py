"""``rightsize estimate --gpu NAME / --gpu-spec FILE.json`` through the real app (issue #16)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rightsize.cli import app

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
