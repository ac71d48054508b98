"""Estimators that learn a center's batch jobs from its own history.

``HistoryEstimator`` is the online run-time (and memory) estimator for generic jobs:
``submit(job)`` and ``observe(finished job)`` in time order, ``predict(job)`` for what-ifs.
``replay``/``history_bench`` run it and the classic baselines over a whole trace.
"""

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
    MemoryBench,
    ReplayResult,
    history_bench,
    history_job_from_swf,
    replay,
)

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
    "MemoryBench",
    "PredictionBatch",
    "PredictorScore",
    "QuantileModel",
    "ReplayResult",
    "history_bench",
    "history_job_from_swf",
    "hit_limit",
    "predict_rows",
    "replay",
    "score",
    "user_request",
]
