"""Estimators of generic jobs learned from a center's job history (no model file needed).

    estimator      ``HistoryEstimator``: run time, memory and CPU efficiency for the planner
    runtime        the run-time quantile model
    memory         memory per processor: quantiles and the OOM-targeted request
    cpu            CPU efficiency (used/allocated core time)
    features       job rows -> features, learned only from jobs ended before submit
    baselines      the users' requests, last-N rules, the tuned-factor oracle
    metrics        scores of a replay (under-prediction, waste, coverage)
    replay         replaying a trace in submit order (``rightsize history-bench``)
    replay_memory  the memory replay and its OOM/waste benchmark
    replay_cpu     the CPU-efficiency replay

Import from the module that holds a name; the package exports nothing.
"""

from __future__ import annotations

__all__: list[str] = []
