"""HARP's selection rule, the safety factor, and split-conformal intervals."""

from __future__ import annotations

import numpy as np

from tools.estimators.cpu.calibration import calibrate, safety_factor
from tools.estimators.cpu.metrics import score
from tools.estimators.cpu.selection import harp_select


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
    assert calibration.widen_high_log is not None and calibration.widen_high_log > 0
    assert calibration.coverage_before is not None
    widened = calibration.apply(too_narrow[1000:])
    covered = np.mean((truth[1000:] >= widened[:, 0]) & (truth[1000:] <= widened[:, 2]))
    assert 0.75 <= covered <= 0.85


def test_each_tail_is_calibrated_so_a_biased_p90_under_predicts_ten_percent() -> None:
    rng = np.random.default_rng(1)
    truth = rng.normal(0, 1, 4000)
    biased_high = np.column_stack([np.full(4000, 0.5), np.full(4000, 1.0), np.full(4000, 1.5)])
    calibration = calibrate(biased_high[:2000], truth[:2000])
    calibrated = calibration.apply(biased_high[2000:])
    assert 0.08 <= np.mean(truth[2000:] > calibrated[:, 2]) <= 0.12
    assert 0.08 <= np.mean(truth[2000:] < calibrated[:, 0]) <= 0.12


def test_a_calibration_saved_before_per_tail_moves_still_applies_one_widening() -> None:
    from tools.estimators.cpu.calibration import Calibration

    old = Calibration.model_validate({"widen_log": 0.5, "safety_factor": 1.2, "rows": 10})
    out = old.apply(np.array([[0.0, 1.0, 2.0]]))
    np.testing.assert_allclose(out, [[-0.5, 1.0, 2.5]])


def test_scores_report_mape_under_rate_and_coverage() -> None:
    s = score([1.1, 0.9], [1.0, 1.0], [0.8, 0.8], [1.2, 0.85])
    assert round(s.mape, 6) == 10.0 and s.under_rate == 0.5 and s.coverage == 0.5


def test_over_prediction_errors_within_the_noise_are_a_tie_decided_by_the_p50() -> None:
    rng = np.random.default_rng(2)
    actual = np.ones(300)
    noise = rng.normal(0, 0.1, 300)
    a = 1.3 + noise
    b = 1.3 + noise + rng.normal(0, 0.05, 300)  # the same excess, give or take noise
    a[:30] = b[:30] = 0.9  # both under-predict the same 30 rows
    central = {"a": np.full(300, 1.2), "b": np.full(300, 1.02)}  # b's p50 is closer
    ranked = harp_select({"a": a, "b": b}, actual, central=central)
    assert ranked[0].name == "b" and all(r.tied_with_best for r in ranked)
    assert ranked[0].central_mape_pct is not None and ranked[0].central_mape_pct < 3
    # Without the p50s, HARP's order by over-prediction error stands.
    plain = harp_select({"a": a, "b": b}, actual)
    assert plain[0].over_error_pct <= plain[1].over_error_pct


def test_a_clear_over_prediction_difference_is_not_overruled_by_the_p50() -> None:
    actual = np.ones(300)
    lean, padded = np.full(300, 1.1), np.full(300, 1.6)
    central = {"lean": np.full(300, 1.3), "padded": np.ones(300)}
    ranked = harp_select({"lean": lean, "padded": padded}, actual, central=central)
    assert [r.name for r in ranked] == ["lean", "padded"]
    assert not ranked[1].tied_with_best
