"""Output for people fits 80 columns (issue #19 item 7): plan's table, its "+N" explained,
and estimate over many options as one best row per system."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from rightsize.cli import app
from rightsize.commands.estimate import COMPACT_OVER_ROWS, _render_compact
from rightsize.output import console

runner = CliRunner()
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.fixture(autouse=True)
def _isolated_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RIGHTSIZE_HOME", str(tmp_path / "home"))
    for name in ("KB_URL", "MONGO_URL", "USD_PER_SU", "USD_PER_CORE_HOUR", "USD_PER_GPU_HOUR"):
        monkeypatch.delenv(f"RIGHTSIZE_{name}", raising=False)


def test_plan_fits_80_columns_and_explains_plus_n() -> None:
    result = runner.invoke(app, ["plan", str(EXAMPLES / "resnet50.yaml"), "--top", "5"])
    assert result.exit_code == 0, result.output
    assert max(len(line) for line in result.stdout.splitlines()) <= 80
    assert " +2" in result.stdout  # partitions that share one plan
    assert "+N: N more partitions give the same plan" in result.stdout
    assert "recommended (by earliest_finish)" in result.stdout


def _row(hardware: str, batch: int, run_s: float, fits: bool = True) -> dict[str, object]:
    """One option as ``rightsize estimate --json`` lists it (the answer object)."""
    system, partition = hardware.split("/")
    return {
        "system": system,
        "partition": partition,
        "nodes": 1,
        "gpus_per_node": 0,
        "batch_size": batch,
        "iteration_time_s": {"p10": 0.01, "p50": 0.02, "p90": 0.03},
        "peak_memory_mb": {"p10": 900.0, "p50": 1000.0, "p90": 1100.0},
        "run_s": {"p10": run_s * 0.8, "p50": run_s, "p90": run_s * 1.2},
        "fits": fits,
        "estimator": "analytic",
        "note": "",
    }


def test_many_options_show_the_best_per_system_in_80_columns() -> None:
    rows = [_row(f"pitzer/condo-osumed-gpu-quad-partition-{i}", 64, 3600.0 + i) for i in range(10)]
    rows += [_row(f"frontera/rtx-{i}", 32, 1800.0 + i, fits=i > 0) for i in range(5)]
    rows.append(_row("frontera/small", 16, 60.0, fits=False))  # fastest, but does not fit
    assert len(rows) > COMPACT_OVER_ROWS
    with console.capture() as captured:
        _render_compact(rows, [])
    text = captured.get()
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= 80
    body = " ".join(text.split())
    # The partition whole (never folded at the edge); figures wrap at spaces only.
    assert "pitzer condo-osumed-gpu-quad-partition-0 64 1.00" in body and "10 of" in body
    assert "frontera rtx-1 32 0.50" in body and "4 of 6" in body
    assert "small" not in body and "--details" in body
