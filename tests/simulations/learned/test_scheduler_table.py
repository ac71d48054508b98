"""The cross-trace table of seed 003's question: one line per trace from its experiment."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from knowledge_base.errors import InvalidInputError
from simulations.learned.rl_experiment import Experiment, Row
from simulations.learned.scheduler_table import plot, summarize, table_lines


def _row(scheduler: str, trained_on: str, seed: int, bsld: float, kept: int | None) -> Row:
    return Row(
        scheduler=scheduler,
        trained_on=trained_on,
        seed=seed,
        training_seconds=1.0,
        held_out_bsld=bsld,
        per_sequence=[bsld],
        kept_epoch=kept,
    )


def _experiment(real: list[float], synthetic: list[float]) -> Experiment:
    rows = [_row(h, "-", -1, v, None) for h, v in (("SJF", 10.0), ("F1", 9.0), ("EASY++", 12))]
    rows += [_row("PPO", "real", k, v, 0 if v == 10.0 else 5) for k, v in enumerate(real)]
    rows += [
        _row("PPO", "synthetic sequence", k, v, 0 if v == 10.0 else 15)
        for k, v in enumerate(synthetic)
    ]
    return Experiment(trace="T.swf", description="# T", rows=rows)


def test_a_trace_comes_down_to_its_gaps() -> None:
    line = summarize(_experiment([10.0, 12.0, 8.0], [10.0, 15.0, 8.0]))
    assert (line.real, line.synthetic) == ([10.0, 12.0, 8.0], [10.0, 15.0, 8.0])
    assert line.heuristics == {"SJF": 10.0, "F1": 9.0, "EASY++": 12.0}
    assert (line.real_kept_start, line.synthetic_kept_start) == (1, 1)
    assert line.median_gap == pytest.approx(0.0)  # medians 10 and 10
    assert line.paired_gap == pytest.approx(math.exp(math.log(1.25) / 3) - 1)
    assert line.paired_low < line.paired_gap < line.paired_high
    assert line.passed


def test_the_table_marks_a_miss_and_the_plot_is_written(tmp_path: Path) -> None:
    good = summarize(_experiment([10.0, 12.0], [10.5, 12.5]))
    bad = summarize(_experiment([10.0, 12.0], [13.0, 15.0]))
    lines = table_lines([good, bad])
    assert not bad.passed and bad.median_gap == pytest.approx(14 / 11 - 1)
    assert lines[1].endswith("%)") and lines[2].endswith(" *")
    assert "+27.3%" in lines[2]
    plot([good, bad], tmp_path / "schedulers.png")
    assert (tmp_path / "schedulers.png").stat().st_size > 1000


def test_a_trace_without_pairs_is_named() -> None:
    only_real = _experiment([10.0], [])
    with pytest.raises(InvalidInputError) as e:
        summarize(only_real)
    assert (e.value.source, e.value.field, e.value.value) == ("T.swf", "seeds", [0])
