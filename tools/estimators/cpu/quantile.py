"""Black-box quantile regression with XGBoost: p10, p50 and p90 of a log-scale target.

One booster predicts the three quantiles at once (``objective="reg:quantileerror"``,
``quantile_alpha=[0.1, 0.5, 0.9]``); predictions are sorted per row so the quantiles
never cross. Targets are logs (see ``features``), so the quantiles of the target are
the exponentials of these.
"""

from __future__ import annotations

import gzip
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import xgboost as xgb
from numpy.typing import NDArray

__all__ = ["QUANTILES", "QuantileModel", "fit_quantiles"]

QUANTILES = (0.1, 0.5, 0.9)

DEFAULT_PARAMS: dict[str, Any] = {
    "objective": "reg:quantileerror",
    "quantile_alpha": np.array(QUANTILES),
    "tree_method": "hist",
    "learning_rate": 0.05,
    "max_depth": 6,
    "min_child_weight": 2.0,
    "subsample": 0.85,
    "colsample_bytree": 0.85,
    "reg_lambda": 1.0,
    "nthread": 2,
    "seed": 0,
}


@dataclass(slots=True)
class QuantileModel:
    """A trained booster and the feature names it expects, in order."""

    booster: xgb.Booster
    names: list[str]
    params: dict[str, Any] = field(default_factory=dict)

    def predict(self, features: NDArray[np.float64]) -> NDArray[np.float64]:
        """(rows, 3) sorted log-scale quantiles."""
        out = np.asarray(
            self.booster.inplace_predict(features.astype(np.float32)), dtype=np.float64
        )
        out = out.reshape(features.shape[0], -1)
        if out.shape[1] == 1:
            out = np.repeat(out, 3, axis=1)
        return np.sort(out, axis=1)

    def save(self, path: Path) -> None:
        """UBJ, gzip-compressed (trees compress ~4x; the shipped bundle stays small)."""
        self.booster.set_attr(feature_names_json=json.dumps(self.names))
        path.write_bytes(gzip.compress(bytes(self.booster.save_raw("ubj")), mtime=0))

    @classmethod
    def load(cls, path: Path) -> QuantileModel:
        booster = xgb.Booster()
        booster.load_model(bytearray(gzip.decompress(path.read_bytes())))
        names = json.loads(booster.attr("feature_names_json") or "[]")
        return cls(booster=booster, names=names)


def fit_quantiles(
    features: NDArray[np.float64],
    target: NDArray[np.float64],
    names: list[str],
    *,
    rounds: int = 600,
    params: dict[str, Any] | None = None,
) -> QuantileModel:
    """Train the three-quantile booster on ``features`` -> ``target`` (log scale)."""
    settings = {**DEFAULT_PARAMS, **(params or {})}
    matrix = xgb.QuantileDMatrix(features.astype(np.float32), label=target.astype(np.float32))
    booster = xgb.train(settings, matrix, num_boost_round=rounds)
    return QuantileModel(booster=booster, names=list(names), params=settings)
