"""The fidelity report: distances are zero for a trace against itself, and the report
directory gets the heatmaps and the JSON."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from simulations.synth.closed_loop import after_short_share
from simulations.synth.columns import read_trace
from simulations.synth.copula import CopulaModel
from simulations.synth.fidelity import FidelityReport, evaluate
from simulations.synth.generator import generate, write_trace
from simulations.synth.load import short_wait_ratio


def test_a_trace_against_itself_has_no_distance(sdsc_slice: Path) -> None:
    report = evaluate(sdsc_slice, sdsc_slice)
    assert all(c.ks == 0 and c.wasserstein == 0 for c in report.columns)
    assert report.correlation.max_abs_difference == 0
    assert report.scheduling.bsld_relative_difference == 0
    t = report.temporal
    assert t.hour_of_day_tv == t.day_of_week_tv == 0
    assert t.gap_autocorrelation_max_diff == t.hourly_autocorrelation_max_diff == 0
    assert t.sequence_similarity == 1
    assert t.real_work is not None and t.real_work == t.synthetic_work
    # How short-run jobs fare, read from the trace (SDSC-SP2's slice has them).
    trace = read_trace(sdsc_slice)
    real = report.scheduling.real
    assert real.short_wait_ratio == short_wait_ratio(trace.table, trace.machine_procs)
    assert real.after_short_share == after_short_share(trace.table, trace.machine_procs)
    assert real.short_wait_ratio is not None and real.after_short_share is not None
    assert real == report.scheduling.synthetic
    # The real log breaks the kill rule (jobs ran past their request), so it "fails".
    assert not report.constraints.passed
    assert not report.passed


def test_a_synthetic_slice_is_close_and_the_report_is_written(
    copula: CopulaModel, sdsc_slice: Path, sdsc_trace_jobs: int, tmp_path: Path
) -> None:
    synthetic = tmp_path / "synthetic.swf"
    write_trace(synthetic, generate(copula, sdsc_trace_jobs, seed=0), copula.metadata)
    report = evaluate(sdsc_slice, synthetic, report_dir=tmp_path / "report")
    assert [c.column for c in report.columns] == [
        "interarrival_s",
        "procs",
        "requested_time_s",
        "run_s",
        "status",
        "user",
    ]
    assert all(c.ks < 0.1 for c in report.columns)
    assert report.constraints.passed
    assert report.correlation.max_abs_difference < 0.2
    easy = report.scheduling
    assert easy.real.jobs == easy.synthetic.jobs == sdsc_trace_jobs
    assert easy.synthetic.mean_bsld >= 1
    names = {Path(f).name for f in report.files}
    assert names == {"correlation.png", "marginals.png", "temporal.png", "fidelity.json"}
    heatmap = tmp_path / "report" / "correlation.png"
    assert heatmap.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    again = FidelityReport.model_validate(
        json.loads((tmp_path / "report" / "fidelity.json").read_text())
    )
    assert again.checks == report.checks


@pytest.fixture(scope="module")
def sdsc_trace_jobs(sdsc_slice: Path) -> int:
    return len(read_trace(sdsc_slice).table)
