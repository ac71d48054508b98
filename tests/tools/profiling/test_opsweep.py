"""``opsweep.merge_step_lines``: whole-step timings of one item from several sessions."""

from __future__ import annotations

import pytest

from tools.profiling.opsweep import merge_step_lines


def _line(samples: list[list[float]], load: float) -> dict[str, object]:
    return {
        "samples_s": samples,
        "least_s": min(min(r) for r in samples),
        "step_s": 0.0,
        "loadavg_1m": load,
        "rnn_ops": 3,
    }


def test_sessions_merge_into_the_least_of_all_runs_and_the_median_of_run_medians() -> None:
    first = {"a": _line([[0.030, 0.031], [0.029, 0.040]], 20.0), "b": _line([[1.0]], 5.0)}
    second = {"a": _line([[0.026, 0.050], [0.033, 0.034]], 8.0)}
    merged = merge_step_lines(first, second)
    a = merged["a"]
    assert a["least_s"] == 0.026
    # run medians 0.0305, 0.0345, 0.038, 0.0335: their median
    assert a["step_s"] == pytest.approx(0.034)
    assert a["loads_1m"] == [20.0, 8.0] and a["sessions"] == 2 and len(a["samples_s"]) == 4
    assert a["rnn_ops"] == 3
    assert merged["b"]["least_s"] == 1.0 and merged["b"]["sessions"] == 1
    assert first["a"]["least_s"] == 0.029  # the inputs are left as they were
