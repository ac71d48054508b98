"""Estimators that learn a center's batch jobs from its own history.

``HistoryEstimator`` is the online run-time (and memory) estimator for generic jobs:
``submit(job)`` and ``observe(finished job)`` in time order, ``predict(job)`` for what-ifs.
``replay``/``history_bench`` run it and the classic baselines over a whole trace;
``memory_bench`` does the same for memory requests.

The package imports nothing itself: each name loads its submodule on first use, so
``import tools.estimators.dnn`` (planning a DNN) never loads XGBoost through ``history``.
Import from the submodules in new code.
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tools.estimators.baselines import LastTwo, user_request
    from tools.estimators.features import FEATURE_NAMES, FeatureState, HistoryJob, hit_limit
    from tools.estimators.history import (
        CANDIDATES,
        HistoryConfig,
        HistoryEstimator,
        HistoryPrediction,
        PredictionBatch,
        QuantileModel,
        predict_rows,
    )
    from tools.estimators.metrics import PredictorScore, score
    from tools.estimators.replay import (
        BenchResult,
        ReplayResult,
        history_bench,
        history_job_from_swf,
        replay,
    )
    from tools.estimators.replay_memory import MemoryBenchResult, memory_bench

_HOMES = {
    "baselines": ("LastTwo", "user_request"),
    "features": ("FEATURE_NAMES", "FeatureState", "HistoryJob", "hit_limit"),
    "history": (
        "CANDIDATES",
        "HistoryConfig",
        "HistoryEstimator",
        "HistoryPrediction",
        "PredictionBatch",
        "QuantileModel",
        "predict_rows",
    ),
    "metrics": ("PredictorScore", "score"),
    "replay": (
        "BenchResult",
        "ReplayResult",
        "history_bench",
        "history_job_from_swf",
        "replay",
    ),
    "replay_memory": ("MemoryBenchResult", "memory_bench"),
}
_MODULE_OF = {name: module for module, names in _HOMES.items() for name in names}


def __getattr__(name: str) -> Any:
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module 'tools.estimators' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"tools.estimators.{module}"), name)
    globals()[name] = value
    return value


class _Package(types.ModuleType):
    """Keeps ``tools.estimators.replay`` the function, as the eager package had it.

    Importing the submodule ``tools.estimators.replay`` binds the module to the package's
    ``replay`` attribute; the function of that name is what the package exports.
    """

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "replay" and isinstance(value, types.ModuleType):
            value = value.replay
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package


__all__ = [
    "CANDIDATES",
    "FEATURE_NAMES",
    "BenchResult",
    "FeatureState",
    "HistoryConfig",
    "HistoryEstimator",
    "HistoryJob",
    "HistoryPrediction",
    "LastTwo",
    "MemoryBenchResult",
    "PredictionBatch",
    "PredictorScore",
    "QuantileModel",
    "ReplayResult",
    "history_bench",
    "history_job_from_swf",
    "hit_limit",
    "memory_bench",
    "predict_rows",
    "replay",
    "score",
    "user_request",
]
