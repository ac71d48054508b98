"""Refitting a bundle's memory hybrid alone, the time estimators and the other kinds kept.

The memory hybrid (``bundle``: trees correcting a linear base of the analytic memory
terms) takes no GNN inputs (``HYBRID_MEMORY_GNN``), so it can be refitted without
training a GNN: ``refit_memory`` fits its base and trees on the bundle's own training
split (the same seeded 80% of the configurations), then validates it as ``train_bundle``
does, in both regimes: on the other 20% (in family) and on every fold of the bundle's
``validation_folds`` (new families: each fold predicted by a base and trees fitted
without it), and writes the calibration and scores of ``peak_memory_mb`` / ``hybrid``
into the bundle's meta. The blackbox and whitebox memory estimators do not change, and
neither do their stored scores; the ranking's hybrid entry is recomputed from the new
predictions (its place among the others by HARP's two criteria, without the paired
tie test: the others' predictions are not kept in the bundle).

    python benchmarks/estimators.py --refit-memory data/dnn_profiles/models

When the dataset has grown since the bundle was trained (``grown``: rows of new families
appended, the time estimators not retrained), the memory hybrid is fitted on the grown
training split, the families no stored fold names are held out together as one more
fold (their memory validated as a new family's), and ``training_rows`` keeps the count
the time estimators were fitted on (their registry records say so); the bundle's domain
is left as it was, so rows of the new families are still answered in the new-family
regime, as a user's model file is.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from tools.estimators.cpu.bundle import (
    HYBRID_PARAMS,
    EstimatorBundle,
    Regime,
    base_logs,
    example_inputs,
    fit_linear_base,
    hybrid_input_names,
    hybrid_matrix,
    split_validation,
)
from tools.estimators.cpu.calibration import calibrate
from tools.estimators.cpu.dataset import Example, GraphStore
from tools.estimators.cpu.metrics import score
from tools.estimators.cpu.quantile import QuantileModel, fit_quantiles
from tools.estimators.cpu.selection import Ranked, harp_select

__all__ = ["MemoryHybrid", "fit_memory_hybrid", "refit_memory"]

log = logging.getLogger(__name__)

TARGET = "peak_memory_mb"


class MemoryHybrid:
    """A memory hybrid without GNN inputs: base weights (both targets' bases feed its
    inputs), trees and their input names."""

    def __init__(
        self, weights: dict[str, list[float]], model: QuantileModel, names: list[str]
    ) -> None:
        self.weights = weights
        self.model = model
        self.names = names

    def raw(self, examples: Sequence[Example], store: GraphStore) -> NDArray[np.float64]:
        """(rows, 3) uncalibrated log quantiles of peak memory."""
        items = example_inputs(examples, store)
        bases = base_logs(items, self.weights)
        x = hybrid_matrix(items, None, self.names, bases)
        return self.model.predict(x) + bases[TARGET][:, None]


def fit_memory_hybrid(
    fit: Sequence[Example],
    store: GraphStore,
    *,
    time_weights: Sequence[float] | None = None,
    xgb_rounds: int = 600,
) -> MemoryHybrid:
    """Base (non-negative least squares) and trees fitted on ``fit``; ``time_weights``:
    the time base to feed the trees (default: fitted on ``fit`` too)."""
    items = example_inputs(fit, store)
    weights = fit_linear_base(fit, items)
    if time_weights is not None:
        weights["iteration_s"] = list(time_weights)
    bases = base_logs(items, weights)
    names = hybrid_input_names(items[0], False, base=True)
    x = hybrid_matrix(items, None, names, bases)
    truth = np.log([e.peak_memory_mb for e in fit])
    model = fit_quantiles(
        x, truth - bases[TARGET], names, rounds=xgb_rounds, params=dict(HYBRID_PARAMS)
    )
    return MemoryHybrid(weights, model, names)


def _update(regime: Regime | Any, q: NDArray[np.float64], truth_log: NDArray[np.float64]) -> None:
    """Write the hybrid's calibration, scores and ranking entry for memory in ``regime``
    (a ``Regime`` or the ``BundleMeta``, which hold the same fields)."""
    calibration = calibrate(q, truth_log)
    calibrated = np.exp(calibration.apply(q))
    truth = np.exp(truth_log)
    regime.calibration.setdefault(TARGET, {})["hybrid"] = calibration
    regime.validation.setdefault(TARGET, {})["hybrid"] = score(
        calibrated[:, 1], truth, calibrated[:, 0], calibrated[:, 2]
    )
    entry = harp_select({"hybrid": calibrated[:, 2]}, truth, central={"hybrid": calibrated[:, 1]})[
        0
    ]
    others = [r for r in regime.ranking.get(TARGET, []) if r.name != "hybrid"]
    margin = max(1, int(0.02 * truth.size))
    fewest = min([entry.under_predictions, *(r.under_predictions for r in others)])

    def key(r: Ranked) -> tuple[bool, float]:
        return (r.under_predictions > fewest + margin, r.over_error_pct)

    ranking = sorted([entry, *others], key=key)
    regime.ranking[TARGET] = [
        r.model_copy(update={"tied_with_best": i == 0}) for i, r in enumerate(ranking)
    ]
    regime.selected[TARGET] = ranking[0].name


def refit_memory(
    bundle: EstimatorBundle,
    examples: Sequence[Example],
    store: GraphStore,
    *,
    seed: int = 0,
    validation_fraction: float = 0.2,
    xgb_rounds: int = 600,
    grown: bool = False,
) -> dict[str, float]:
    """Refit ``bundle``'s memory hybrid on ``examples`` (the data it was trained on, or
    with ``grown`` that data and more) and validate it; returns the new-family and
    in-family p50 MAPE, percent, and the new-family MAPE of each fold (``fold_<n>``)."""
    fit, validation = split_validation(examples, validation_fraction, seed)
    trained = bundle.meta.training_rows
    if trained and (len(fit) < trained if grown else len(fit) != trained):
        raise ValueError(
            f"training split of {len(fit)} rows, the bundle was fitted on "
            f"{trained}: not the data it was trained on"
            + ("" if grown else " (a dataset grown since: grown=True)")
        )
    if grown:
        named = {family for fold in bundle.meta.validation_folds for family in fold}
        added = sorted({e.family for e in examples} - named)
        if added:
            log.info("families no fold names, held out together: %s", added)
            bundle.meta.validation_folds = [*bundle.meta.validation_folds, added]
    stored_time = bundle.meta.hybrid_base.get("iteration_s")
    final = fit_memory_hybrid(fit, store, time_weights=stored_time, xgb_rounds=xgb_rounds)
    bundle.hybrid[TARGET] = final.model
    bundle.meta.hybrid_base[TARGET] = final.weights[TARGET]
    bundle.meta.hybrid_memory_names = final.names if final.names != bundle.meta.hybrid_names else []
    out: dict[str, float] = {}
    if bundle.meta.in_family is not None and validation:
        truth = np.log([e.peak_memory_mb for e in validation])
        _update(bundle.meta.in_family, final.raw(validation, store), truth)
        out["in_family_mape"] = bundle.meta.in_family.validation[TARGET]["hybrid"].mape
    raws: list[NDArray[np.float64]] = []
    held: list[Example] = []
    for number, fold in enumerate(bundle.meta.validation_folds):
        log.info(
            "memory hybrid, family fold %d/%d: %s",
            number + 1,
            len(bundle.meta.validation_folds),
            fold,
        )
        inside = [e for e in examples if e.family not in fold]
        outside = [e for e in examples if e.family in fold]
        if not outside or not inside:
            continue
        fold_fit = fit_memory_hybrid(inside, store, xgb_rounds=xgb_rounds)
        raws.append(fold_fit.raw(outside, store))
        held += outside
        truth = np.array([e.peak_memory_mb for e in outside])
        p50 = np.exp(raws[-1][:, 1])
        out[f"fold_{number}"] = float(np.mean(np.abs(p50 - truth) / truth) * 100)
    if held:
        _update(bundle.meta, np.concatenate(raws), np.log([e.peak_memory_mb for e in held]))
        out["new_family_mape"] = bundle.meta.validation[TARGET]["hybrid"].mape
    return out
