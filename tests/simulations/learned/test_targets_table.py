"""Issue #21's targets per trace: fidelity rows and the scheduler line of one trace meet."""

from __future__ import annotations

import pytest

from knowledge_base.errors import InvalidInputError
from simulations.learned.scheduler_table import TraceSchedulers
from simulations.learned.targets_table import combine, target_lines, trace_key
from simulations.synth.trace_table import TraceRow


def _row(trace: str, bsld_rel: float, hour_tv: float, model: str = "sequence") -> TraceRow:
    figures = dict.fromkeys(
        [
            "fit_s",
            "sample_s",
            "kept_share",
            "load_factor",
            "ks_max",
            "corr_max_abs_diff",
            "real_bsld",
            "bsld",
            "weekday_tv",
            "gap_acf_diff",
            "hourly_acf_diff",
            "session_jobs_ks",
            "real_session_jobs",
            "session_jobs",
            "sequence_similarity",
            "real_found_ratio",
            "found_ratio",
            "real_day_corr",
            "day_corr",
            "real_week_cv",
            "week_cv",
        ],
        1.0,
    )
    return TraceRow(
        trace=trace,
        model=model,
        seed=0,
        jobs=28_467,
        ks_max_column="procs",
        bsld_rel=bsld_rel,
        hour_tv=hour_tv,
        constraints_passed=True,
        passed=True,
        **figures,  # type: ignore[arg-type]
    )


def _line(trace: str, synthetic: list[float]) -> TraceSchedulers:
    return TraceSchedulers(
        trace=trace,
        heuristics={"SJF": 44.07},
        real=[41.75, 40.68, 42.00],
        synthetic=synthetic,
        real_kept_start=0,
        synthetic_kept_start=1,
    )


def test_a_cut_trace_and_its_scheduler_line_share_a_key() -> None:
    assert trace_key("KTH-SP2-1996-2.1-cln.swf.gz") == "KTH-SP2-1996-2.1-cln"
    assert trace_key("KTH-SP2-1996-2.1-cln-first20000.swf") == "KTH-SP2-1996-2.1-cln"


def test_each_trace_says_which_targets_hold() -> None:
    fidelity = [
        _row("KTH-SP2-1996-2.1-cln.swf.gz", 0.05, 0.002),
        _row("KTH-SP2-1996-2.1-cln.swf.gz", 0.09, 0.004),
        _row("KTH-SP2-1996-2.1-cln.swf.gz", 0.50, 0.3, model="copula"),  # not the sequence
        _row("HPC2N-2002-2.2-cln.swf.gz", 0.19, 0.027),
        _row("HPC2N-2002-2.2-cln.swf.gz", -0.21, 0.06),
    ]
    schedulers = [
        _line("KTH-SP2-1996-2.1-cln.swf.gz", [40.94, 40.71, 44.07]),
        _line("HPC2N-2002-2.2-cln.swf.gz", [50.0, 48.0, 47.0]),
    ]
    kth, hpc = combine(fidelity, schedulers)
    assert kth.bsld_relative == [0.05, 0.09] and kth.fidelity_passed and kth.passed
    assert hpc.bsld_relative == [0.19, -0.21] and not hpc.fidelity_passed
    assert not hpc.schedulers.passed and not hpc.passed
    lines = target_lines([kth, hpc])
    assert lines[1].startswith("KTH-SP2-1996-2.1-cln") and lines[1].endswith("met")
    assert "+5%..+9%" in lines[1] and "0.004" in lines[1] and "-1.9%" in lines[1]
    assert lines[2].endswith("miss bsld,hour,PPO")
    assert lines[-1].startswith("# targets")


def test_a_trace_missing_either_half_is_named() -> None:
    with pytest.raises(InvalidInputError) as caught:
        combine(
            [_row("KTH-SP2-1996-2.1-cln.swf.gz", 0.05, 0.002)],
            [_line("SDSC-SP2-1998-4.2-cln.swf.gz", [40.0, 41.0, 42.0])],
        )
    assert caught.value.field == "trace"
    assert "KTH-SP2-1996-2.1-cln" in str(caught.value) and "SDSC-SP2" in str(caught.value)
