"""``rightsize profile calibrate``: zoo steps timed on this host, the per-operator CPU
model's step law refitted, and ``rightsize estimate --hardware local`` answering with it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rightsize.cli import app
from tools.estimators.cpu.host_calibration import calibrated_dir
from tools.profiling.profiler import hardware_descriptors

runner = CliRunner()
REPO = Path(__file__).resolve().parents[2]
HELDOUT = REPO / "examples" / "models" / "heldout" / "mlp_mixer.py"


@pytest.fixture(autouse=True)
def _isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RIGHTSIZE_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("RIGHTSIZE_CPU_OPCOST", raising=False)
    for name in ("KB_URL", "MONGO_URL"):
        monkeypatch.delenv(f"RIGHTSIZE_{name}", raising=False)


def test_calibrate_times_steps_here_and_local_estimates_use_it(tmp_path: Path) -> None:
    result = runner.invoke(
        app, ["profile", "calibrate", "--threads", "1", "--limit", "8", "--json"]
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout[result.stdout.index("{") :])
    here = hardware_descriptors(1)
    folder = calibrated_dir(tmp_path / "home", str(here["cpu_model"]), str(here["cpu_isa"]))
    assert report["folder"] == str(folder) and report["steps"] == {"t1": 8}
    assert report["step_law"]["after"]["t1"] != report["step_law"]["before"]["t1"]
    lines = (folder / "steps.jsonl").read_text().splitlines()
    assert json.loads(lines[0])["kind"] == "provenance" and len(lines) == 9
    assert all(json.loads(line)["least_s"] > 0 for line in lines[1:])
    # Run again: the timed steps are read back, none timed twice.
    again = runner.invoke(app, ["profile", "calibrate", "--threads", "1", "--limit", "8", "--json"])
    assert again.exit_code == 0, again.output
    assert len((folder / "steps.jsonl").read_text().splitlines()) == 9
    # The local estimate at 1 thread answers from it (whichever CPU this is).
    args = ["estimate", "--model-file", str(HELDOUT), "--model-class", "MLPMixer"]
    args += ["--batch-size", "8", "--epochs", "1", "--samples", "100", "--threads", "1"]
    estimate = runner.invoke(app, [*args, "--json"])
    assert estimate.exit_code == 0, estimate.output
    (row,) = json.loads(estimate.stdout)["estimates"]
    assert row["estimator"].startswith(report["estimator"])
    assert "calibrated on this host (8 zoo steps timed here" in row["note"]


def test_calibrate_refuses_a_thread_count_the_model_has_no_step_law_for() -> None:
    result = runner.invoke(app, ["profile", "calibrate", "--threads", "3"])
    assert result.exit_code == 2
    assert "--threads" in result.output and "3" in result.output


def test_estimate_calibrate_calibrates_a_host_without_one_first(tmp_path: Path) -> None:
    args = ["estimate", "--model-file", str(HELDOUT), "--model-class", "MLPMixer"]
    args += ["--batch-size", "8", "--epochs", "1", "--samples", "100", "--threads", "1"]
    before = runner.invoke(app, [*args, "--json"])
    assert before.exit_code == 0, before.output
    here = hardware_descriptors(1)
    folder = calibrated_dir(tmp_path / "home", str(here["cpu_model"]), str(here["cpu_isa"]))
    assert not folder.exists()

    result = runner.invoke(app, [*args, "--calibrate", "--calibrate-limit", "8", "--json"])
    assert result.exit_code == 0, result.output
    (row,) = json.loads(result.stdout)["estimates"]
    assert "calibrated on this host (8 zoo steps timed here" in row["note"]
    assert len((folder / "steps.jsonl").read_text().splitlines()) == 9
    # Calibrated already at this thread count: nothing is timed again.
    again = runner.invoke(app, [*args, "--calibrate", "--calibrate-limit", "10", "--json"])
    assert again.exit_code == 0, again.output
    assert len((folder / "steps.jsonl").read_text().splitlines()) == 9
