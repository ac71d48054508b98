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
    # --gpu through the planner's chain, --gpu-spec from the per-operator model directly
    assert [r["partition"] for r in rows] == ["NVIDIA A100 80GB", "Tesla V100-PCIE-32GB"]
    for row in rows:
        step = row["iteration_time_s"]
        assert row["system"] == "gpu" and row["gpus_per_node"] == 1
        assert 0 < step["p10"] <= step["p50"] <= step["p90"]
        assert row["estimator"].startswith("gpu-opcost-")


def test_gpu_spec_with_a_missing_field_names_it_and_exits_2(tmp_path: Path) -> None:
    spec = tmp_path / "bad.json"
    spec.write_text(json.dumps({k: v for k, v in V100.items() if k != "Mem_Bw"}))
    code, _, output = _estimate("--batch-size", "8", "--gpu-spec", str(spec))
    assert code == 2 and "Mem_Bw" in output


def test_unknown_gpu_name_lists_known_ones_and_exits_2() -> None:
    code, _, output = _estimate("--batch-size", "8", "--gpu", "Voodoo 5")
    assert code == 2 and "Voodoo 5" in output and "A100" in output


def test_gpu_memory_interval_has_its_upper_bound_above_the_point(tmp_path: Path) -> None:
    code, stdout, output = _estimate(
        "--batch-size", "64", "--gpu", "NVIDIA Tesla P100 (Pascal)", "--json"
    )
    assert code == 0, output
    (row,) = json.loads(stdout)["estimates"]
    memory = row["peak_memory_mb"]
    assert 0 < memory["p10"] < memory["p50"] < memory["p90"] and row["fits"] is True


def test_a_batch_past_the_gpu_memory_does_not_fit(tmp_path: Path) -> None:
    code, stdout, output = _estimate(
        "--batch-size", "131072", "--gpu", "NVIDIA A100 40GB", "--json"
    )
    assert code == 0, output
    (row,) = json.loads(stdout)["estimates"]
    assert row["fits"] is False and row["peak_memory_mb"]["p90"] > 40960


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
        (None, "h100", "H100 SXM 80GB HBM3"),  # not silently the PCIe one
        (None, "BROKEN", "example_batch(2)'s inputs of shape (2, 7)"),
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


def test_estimate_gpu_applies_the_promoted_correction_as_the_planner_does(
    tmp_path: Path,
) -> None:
    """Model Promotion's per-GPU correction: ``--gpu`` answers with it (saying the factor
    and the runs it rests on), the same step time as the planner's chain gives a 1-GPU
    option of that GPU; a GPU it has no run of gets the pooled factor."""
    import asyncio

    from knowledge_base.seed import load_seed_catalog
    from knowledge_base.sqlite import SQLiteKnowledgeBase
    from knowledge_base.workload import DNNTraining, Goals, WorkloadSpec
    from tests.tools.conftest import V100
    from tests.tools.conftest import promote_gpu_correction as promote
    from tools.planning.analytic import STARTUP_POINT_S
    from tools.planning.chain import EstimatorChain
    from tools.planning.service import plan_workload

    a100 = "NVIDIA A100 80GB"
    args = ["--batch-size", "64", "--epochs", "2", "--samples", "5000", "--json"]
    args += ["--gpu", V100, "--gpu", a100]
    code, stdout, output = _estimate(*args)
    assert code == 0, output
    plain = {r["partition"]: r for r in json.loads(stdout)["estimates"]}
    assert all("corr-cli" not in r["note"] for r in plain.values())
    spec = WorkloadSpec(
        name="cnn",
        user="alice",
        workload=DNNTraining(
            model=str(EXAMPLE), model_class="SmallCNN", dataset_samples=5000, epochs=2,
            batch_sizes=[64],
        ),
        goals=Goals(systems=["pitzer"], gpu_only=True),
    )  # fmt: skip

    async def promote_and_plan() -> float:
        async with SQLiteKnowledgeBase(tmp_path / "home" / "rightsize.db") as kb:
            await promote(kb, tmp_path, "corr-cli", {V100: 1.6})
            catalog = load_seed_catalog()
            selection = plan_workload(
                spec, catalog, await EstimatorChain(kb).estimators(spec, catalog)
            )
        [one] = [
            o for o in selection.ranked
            if o.option.nodes * (o.option.gpus_per_node or 0) == 1
            and o.option.node_type == "skylake-40core-dual-gpu"  # the first V100: --gpu's
            and o.option.partition == "gpuserial-40core"
        ]  # fmt: skip
        assert "corr-cli" in one.estimate.label and "x1.60" in one.estimate.label
        assert one.estimate.runtime_s is not None
        return (one.estimate.runtime_s.point - STARTUP_POINT_S) / (2 * -(-5000 // 64))

    planned_step_s = asyncio.run(promote_and_plan())
    code, stdout, output = _estimate(*args)
    assert code == 0, output
    rows = {r["partition"]: r for r in json.loads(stdout)["estimates"]}
    for gpu, factor in ((V100, 1.6), (a100, 1.25)):
        row, before = rows[gpu], plain[gpu]
        assert "corr-cli" in row["note"] and f"x{factor:.2f}" in row["note"], row["note"]
        assert row["iteration_time_s"]["p50"] == pytest.approx(
            before["iteration_time_s"]["p50"] * factor, rel=1e-3
        )
    assert rows[V100]["iteration_time_s"]["p50"] == pytest.approx(planned_step_s, rel=1e-3)
