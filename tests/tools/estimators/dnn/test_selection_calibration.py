"""HARP's selection rule, the safety factor, and split-conformal intervals."""

from __future__ import annotations

import numpy as np

from tools.estimators.dnn.calibration import calibrate, safety_factor
from tools.estimators.dnn.metrics import score
from tools.estimators.dnn.selection import harp_select


def test_fewest_under_predictions_wins_even_against_a_lower_mape() -> None:
    actual = np.array([1.0, 1.0, 1.0, 1.0])
    ranked = harp_select(
        {"tight": np.array([0.95, 0.97, 1.0, 1.0]), "cautious": np.array([1.2, 1.1, 1.3, 1.1])},
        actual,
        tie_rows=0,
    )
    assert [r.name for r in ranked] == ["cautious", "tight"]
    assert ranked[1].mape_pct < ranked[0].mape_pct


def test_equal_under_predictions_go_to_the_lower_over_prediction_error() -> None:
    actual = np.ones(3)
    ranked = harp_select(
        {"far": np.array([1.5, 1.5, 1.5]), "near": np.array([1.1, 1.1, 1.1])}, actual
    )
    assert ranked[0].name == "near"


def test_a_difference_of_a_few_under_predictions_is_a_tie_decided_by_over_error() -> None:
    actual = np.ones(100)
    lean = np.full(100, 1.05)
    lean[:12] = 0.9  # 12 under-predictions, small excess elsewhere
    padded = np.full(100, 1.5)
    padded[:10] = 0.9  # 10 under-predictions, large excess
    ranked = harp_select({"lean": lean, "padded": padded}, actual)
    assert ranked[0].name == "lean"
    assert harp_select({"lean": lean, "padded": padded}, actual, tie_rows=0)[0].name == "padded"


def test_shortfalls_within_a_tolerance_do_not_count() -> None:
    assert harp_select({"a": np.array([0.99])}, np.array([1.0]))[0].under_predictions == 1
    ranked = harp_select({"a": np.array([0.99])}, np.array([1.0]), tolerance=0.02)
    assert ranked[0].under_predictions == 0


def test_the_safety_factor_covers_most_under_predictions() -> None:
    p50 = np.ones(100)
    actual = np.linspace(0.5, 1.5, 100)
    factor = safety_factor(p50, actual)
    assert factor > 1
    under = actual > p50
    assert np.mean(actual[under] <= p50[under] * factor) >= 0.89


def test_conformal_calibration_reaches_the_intended_coverage() -> None:
    rng = np.random.default_rng(0)
    truth = rng.normal(0, 1, 2000)
    too_narrow = np.column_stack([np.full(2000, -0.2), np.zeros(2000), np.full(2000, 0.2)])
    calibration = calibrate(too_narrow[:1000], truth[:1000])
    assert calibration.widen_log > 0 and calibration.coverage_before is not None
    widened = calibration.apply(too_narrow[1000:])
    covered = np.mean((truth[1000:] >= widened[:, 0]) & (truth[1000:] <= widened[:, 2]))
    assert 0.75 <= covered <= 0.85


def test_scores_report_mape_under_rate_and_coverage() -> None:
    s = score([1.1, 0.9], [1.0, 1.0], [0.8, 0.8], [1.2, 0.85])
    assert round(s.mape, 6) == 10.0 and s.under_rate == 0.5 and s.coverage == 0.5
