"""``rightsize plan`` through the real console script's app, on a temporary SQLite file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rightsize.cli import app

runner = CliRunner()
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
PLAN_KEYS = {
    "system", "partition", "nodes", "cores_per_node", "gpus_per_node", "memory_mb",
    "walltime_s", "segments", "cost", "cost_unit", "cost_usd", "expected_wait_s",
    "expected_finish_s", "estimator",
}  # fmt: skip


@pytest.fixture(autouse=True)
def _isolated_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RIGHTSIZE_HOME", str(tmp_path / "home"))
    for name in ("KB_URL", "MONGO_URL", "USD_PER_SU", "USD_PER_CORE_HOUR", "USD_PER_GPU_HOUR"):
        monkeypatch.delenv(f"RIGHTSIZE_{name}", raising=False)


def _plan(*args: str) -> dict[str, object]:
    result = runner.invoke(app, ["plan", *args, "--json"])
    assert result.exit_code == 0, result.output
    data: dict[str, object] = json.loads(result.stdout)
    return data


def test_json_has_the_keys_other_programs_read() -> None:
    data = _plan(str(EXAMPLES / "resnet50.yaml"))
    assert {"recommended", "feasible", "infeasible"} <= set(data)
    recommended = data["recommended"]
    assert isinstance(recommended, dict)
    assert set(recommended) >= PLAN_KEYS
    assert recommended["cost_usd"] is None  # no dollar rate configured: no dollars
    feasible = data["feasible"]
    assert isinstance(feasible, list) and feasible[0] == recommended
    infeasible = data["infeasible"]
    assert isinstance(infeasible, list)
    assert all({"system", "partition", "reason"} <= set(i) for i in infeasible)


def test_the_seed_001_queue_turns_the_choice_to_the_idle_cpu_nodes() -> None:
    data = _plan(
        str(EXAMPLES / "resnet50.yaml"),
        "--queue-snapshot",
        str(EXAMPLES / "pitzer-queue.json"),
    )
    recommended, fastest = data["recommended"], data["fastest"]
    assert isinstance(recommended, dict) and isinstance(fastest, dict)
    assert recommended["gpus_per_node"] == 0 and recommended["expected_wait_s"] == 0
    assert fastest["gpus_per_node"] > 0 and fastest["expected_wait_s"] > 20 * 3600


def test_dollar_assumptions_come_from_settings_and_are_labelled(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("RIGHTSIZE_USD_PER_CORE_HOUR", "0.002")
    monkeypatch.setenv("RIGHTSIZE_USD_PER_GPU_HOUR", "0.1")
    recommended = _plan(str(EXAMPLES / "resnet50.yaml"))["recommended"]
    assert isinstance(recommended, dict)
    assert recommended["cost_usd"] is not None
    assert "assumed $0.002/core-hour" in recommended["cost_usd_basis"]


def test_the_table_names_the_recommendation_and_the_estimator() -> None:
    result = runner.invoke(
        app, ["plan", str(EXAMPLES / "resnet50.yaml"), "--objective", "cheapest", "--top", "3"]
    )
    assert result.exit_code == 0, result.output
    assert "recommended" in result.stdout
    assert "objective cheapest" in result.stdout
    assert "analytic fallback (untrained)" in result.stdout


def test_an_impossible_request_exits_1_with_reasons(tmp_path: Path) -> None:
    # batch 1400 over 4 V100s is ~35 GB per GPU: just past Pitzer's largest (32 GB)
    text = (EXAMPLES / "resnet50.yaml").read_text().replace("[32, 64]", "[1400]")
    workload = tmp_path / "huge.yaml"
    workload.write_text(text + "  gpu_only: true\n")
    result = runner.invoke(app, ["plan", str(workload), "--json"])
    assert result.exit_code == 1
    data = json.loads(result.stdout)
    assert data["recommended"] is None and data["feasible"] == []
    closest = data["infeasible"][0]
    assert closest["constraint"] == "gpu_memory"
    assert 0 < closest["shortfall"] < 0.5
    assert "32 GB" in closest["reason"]


def test_a_bad_workload_file_exits_2_naming_the_field(tmp_path: Path) -> None:
    workload = tmp_path / "bad.yaml"
    workload.write_text((EXAMPLES / "resnet50.yaml").read_text().replace("epochs: 50", "epochs: 0"))
    result = runner.invoke(app, ["plan", str(workload)])
    assert result.exit_code == 2
    assert "workload.epochs" in result.stderr


def test_scripts_for_the_recommended_plan_are_written_on_request(tmp_path: Path) -> None:
    result = runner.invoke(
        app,
        [
            "plan", str(EXAMPLES / "generic.yaml"), "--sbatch", str(tmp_path / "sbatch"),
            "--tapis", str(tmp_path / "tapis"), "--json",
        ],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    [script] = sorted((tmp_path / "sbatch").iterdir())
    text = script.read_text()
    assert text.startswith("#!/bin/bash\n#SBATCH --job-name=") and "#SBATCH --partition=" in text
    [body] = sorted((tmp_path / "tapis").iterdir())
    assert json.loads(body.read_text())["parameterSet"]["appArgs"]


@pytest.mark.slurm
def test_live_queue_reads_the_local_slurm_and_plans_on_it(
    slurm_cluster: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RIGHTSIZE_EXECUTOR", "slurm")
    imported = runner.invoke(app, ["catalog", "import", "slurm", "--name", "local", "--json"])
    assert imported.exit_code == 0, imported.output
    workload = tmp_path / "local.yaml"
    workload.write_text(
        "name: live\nuser: tester\nworkload:\n  kind: generic\n  application: hostname\n"
        "  walltime_s: 2 min\n  memory_mb: 100 MB\ngoals:\n  systems: [local]\n"
    )
    data = _plan(str(workload), "--live-queue")
    recommended = data["recommended"]
    assert isinstance(recommended, dict)
    assert recommended["partition"] == "batch"
    assert recommended["availability"] is not None  # pools from sinfo --json
    assert recommended["expected_wait_s"] is not None
