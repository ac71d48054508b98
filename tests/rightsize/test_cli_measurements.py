"""``rightsize measurements import gpu``: a center's GPU measurements into the knowledge
base, as Model Promotion reads them (issue #16, online learning)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from knowledge_base.errors import InvalidInputError
from knowledge_base.seed import load_seed_catalog
from knowledge_base.sqlite import SQLiteKnowledgeBase
from rightsize.cli import app
from tools.estimators.gpu.correction import GPU_STEP_FAMILY, rows_from_records
from tools.estimators.gpu.measured_import import records_from_gpu_measure
from tools.estimators.gpu.specs import catalog_gpus

runner = CliRunner()
REPO = Path(__file__).resolve().parents[2]
H100 = "NVIDIA H100 PCIe 80GB"


def _row(key: str, **fields: object) -> dict[str, object]:
    base: dict[str, object] = {
        "key": key, "status": "ok", "source": "named", "name": "mlp", "class_name": "",
        "params": {}, "batch_size": 256, "optimizer": "sgd", "precision": "fp32",
        "step_ms": {"p10": 1.9, "p50": 2.1, "p90": 2.4},
    }  # fmt: skip
    return {**base, **fields}


def _measured(folder: Path) -> Path:
    """A gpu_measure output: gpu_steps.jsonl and provenance.json."""
    folder.mkdir(parents=True, exist_ok=True)
    rows = [
        _row("named:mlp[]:b256:sgd:fp32"),
        _row("named:mlp[]:b2048:adam:fp32", batch_size=2048, optimizer="adam"),
        _row(
            "file:small_cnn:b64",
            source="file",
            name="examples/models/small_cnn.py",
            class_name="SmallCNN",
            batch_size=64,
        ),
        _row("named:mlp[]:b256:sgd:amp_bf16", precision="amp_bf16"),
        _row("sweep:mlp[depth=2]:b16:sgd:fp32", source="sweep", params={"depth": 2}),
        {"key": "named:vgg16[]:b4096:sgd:fp32", "status": "out_of_memory", "error": "..."},
    ]
    (folder / "gpu_steps.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    provenance = {"gpu": "NVIDIA H100 80GB HBM3", "measured_at": "2026-11-26T15:20:34+00:00"}
    (folder / "provenance.json").write_text(json.dumps(provenance))
    return folder / "gpu_steps.jsonl"


def test_fp32_rows_of_zoo_models_and_files_become_gpu_step_measurements(tmp_path: Path) -> None:
    found = records_from_gpu_measure(_measured(tmp_path / "m"), H100, root=REPO)
    assert [r.model for r in found.records][:2] == ["mlp", "mlp"]
    assert found.records[2].config["batch_size"] == 64
    assert all(r.family == GPU_STEP_FAMILY for r in found.records)
    assert [r.iteration_s for r in found.records] == pytest.approx([0.0021] * 3)
    assert found.records[0].hardware["measured_gpu"] == "NVIDIA H100 80GB HBM3"
    assert found.records[0].hardware["gpu_model"] == H100
    assert found.left_out == {
        "mixed precision (the per-operator model prices FP32)": 1,
        "a zoo-space draw (no workload names a family's parameters)": 1,
        "not measured (out_of_memory)": 1,
    }
    # newest last, as Model Promotion holds them out; the same file gives the same ids
    times = [r.created_at for r in found.records]
    assert times == sorted(times)
    again = records_from_gpu_measure(tmp_path / "m" / "gpu_steps.jsonl", H100, root=REPO)
    assert [r.id for r in again.records] == [r.id for r in found.records]
    # Model Promotion can price every one of them again
    rows, left_out = rows_from_records(found.records, catalog_gpus(load_seed_catalog()))
    assert len(rows) == 3 and not left_out
    assert all(r.operators > 0 and r.gpu_model == H100 for r in rows)


def test_a_file_without_its_provenance_or_with_a_broken_line_is_refused(tmp_path: Path) -> None:
    steps = _measured(tmp_path / "m")
    (tmp_path / "m" / "provenance.json").unlink()
    with pytest.raises(InvalidInputError, match="no provenance.json beside it"):
        records_from_gpu_measure(steps, H100)
    steps = _measured(tmp_path / "n")
    steps.write_text(steps.read_text() + "{not json\n")
    with pytest.raises(InvalidInputError, match="line 7 is not a gpu_measure row"):
        records_from_gpu_measure(steps, H100)


def test_the_command_stores_them_once_and_refuses_an_unknown_gpu(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RIGHTSIZE_HOME", str(tmp_path / "home"))
    for name in ("KB_URL", "MONGO_URL"):
        monkeypatch.delenv(f"RIGHTSIZE_{name}", raising=False)
    steps = _measured(tmp_path / "m")
    base = ["measurements", "import", "gpu", str(steps), "--root", str(REPO)]
    for _ in range(2):  # a second import replaces, never adds
        result = runner.invoke(app, [*base, "--gpu-model", H100, "--json"])
        assert result.exit_code == 0, result.output
        assert json.loads(result.stdout)["stored"] == 3

    async def stored() -> int:
        kb = SQLiteKnowledgeBase(tmp_path / "home" / "rightsize.db")
        try:
            return len(await kb.query_profiles(family=GPU_STEP_FAMILY))
        finally:
            await kb.close()

    assert asyncio.run(stored()) == 3
    refused = runner.invoke(app, [*base, "--gpu-model", "H100"])
    assert refused.exit_code == 2
    assert "--gpu-model" in refused.output and H100 in refused.output
    # A listed alias is the catalog's GPU; a datasheet GPU no partition has is refused.
    alias = runner.invoke(app, [*base, "--gpu-model", "h100 pcie", "--json"])
    assert alias.exit_code == 0 and json.loads(alias.stdout)["gpu_model"] == H100
    elsewhere = runner.invoke(app, [*base, "--gpu-model", "T4"])
    assert elsewhere.exit_code == 2 and "not a GPU of the catalog" in elsewhere.output
