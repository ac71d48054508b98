"""The black-box quantile booster: ordered quantiles that bracket the data."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tools.estimators.cpu.quantile import QuantileModel, fit_quantiles


def test_quantiles_are_ordered_bracket_the_truth_and_survive_a_round_trip(
    tmp_path: Path,
) -> None:
    rng = np.random.default_rng(0)
    x = rng.uniform(0, 1, (600, 2))
    y = 2 * x[:, 0] + rng.normal(0, 0.1, 600)
    model = fit_quantiles(x, y, ["a", "b"], rounds=60)
    q = model.predict(x)
    assert np.all(q[:, 0] <= q[:, 1]) and np.all(q[:, 1] <= q[:, 2])
    inside = np.mean((y >= q[:, 0]) & (y <= q[:, 2]))
    assert 0.6 < inside < 0.95
    model.save(tmp_path / "m.ubj.gz")
    again = QuantileModel.load(tmp_path / "m.ubj.gz")
    assert again.names == ["a", "b"]
    np.testing.assert_allclose(again.predict(x), q, rtol=1e-6)
