"""The per-operator CPU model's step law and optimizer updates, fitted (SciPy's least
squares): what training and host calibration run, kept apart from ``opcost`` so that an
estimate, which only applies the fitted coefficients, does not load SciPy."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from scipy.optimize import least_squares, nnls

__all__ = ["StepRow", "fit_step", "fit_updates"]


def fit_updates(items: Sequence[Mapping[str, Any]]) -> dict[str, list[float]]:
    """Per ``optimizer-tthreads``: [seconds, seconds per parameter] (least squares, >= 0)."""
    out: dict[str, list[float]] = {}
    for optimizer in ("sgd", "adam"):
        for threads in (1, 2):
            rows = [
                i
                for i in items
                if i.get("kind") == "update"
                and i["optimizer"] == optimizer
                and int(i["threads"]) == threads
            ]
            if not rows:
                continue
            a = np.array([[1.0, float(r["parameters"])] for r in rows])
            y = np.array([float(r["critical_s"]) for r in rows])
            # relative least squares: each update counts the same whatever its size
            coef, _ = nnls(a / y[:, None], np.ones_like(y))
            out[f"{optimizer}-t{threads}"] = [float(c) for c in coef]
    return out


# compute, other, eager operators, update, recurrent loops' operators, view operators,
# random numbers' seconds (analytic, not fitted), measured
StepRow = tuple[float, float, float, float, float, float, float, float]


def fit_step(
    rows: Sequence[StepRow], loss: str = "relative", constant: bool = False
) -> list[float]:
    """[a, o, b, c, r, f, v] of step = a x compute + o x other + b x eager operators + c x
    update + r x operators of recurrent loops + f + v x view operators, plus the random
    numbers' analytic seconds (non-negative least squares of the relative error; r is 0
    where no step has a recurrent loop, v where none dispatches a view: ``eager``); ``f``,
    seconds per step whatever its operators, only with ``constant``."""
    a = np.array(
        [
            [cs / y, os_ / y, n / y, u / y, k / y, (1.0 / y) if constant else 0.0, v / y]
            for cs, os_, n, u, k, v, _, y in rows
        ]
    )
    target = np.array([1.0 - rnd / y for *_, rnd, y in rows])
    coef, _ = nnls(a, target)
    if loss == "log":
        # least squares of log(estimate / measured), from the relative fit: the relative
        # error's optimum shrinks estimates where the fit is loose (it under-predicts),
        # the log error's median ratio is one
        used = np.any(a > 0, axis=0)  # r, f, v only where some step has them
        start = np.maximum(coef[used], 1e-9)
        sub = a[:, used]
        extra = 1.0 - target
        fit = least_squares(
            lambda c: np.log(np.maximum(sub @ c + extra, 1e-12)), start, bounds=(0.0, np.inf)
        )
        coef = np.zeros_like(coef)
        coef[used] = fit.x
    return [float(c) for c in coef]
