"""What share of a step's traced work the per-operator CPU model priced, and how."""

from __future__ import annotations


def test_a_share_never_exceeds_one_whatever_the_rounding() -> None:
    """A U-Net on a calibrated host once answered with a traceback: a part's sum, in
    another order than the whole's, came to 1.0000000000000002 of it."""
    import numpy as np

    from tools.estimators.cpu.coverage import _shares

    rng = np.random.default_rng(0)
    for _ in range(200):
        n = int(rng.integers(2, 200))
        weights = rng.random(n) * 10.0 ** float(rng.integers(-3, 12))
        weights[-1] = 0.0
        classes = np.array(["learned"] * (n - 1) + ["analytic"])
        shares = _shares(weights, classes)
        assert all(0.0 <= s <= 1.0 for s in shares.values())
        assert shares["learned"] > 1 - 1e-12
