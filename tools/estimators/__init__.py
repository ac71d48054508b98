"""Estimators, one subpackage or module per question they answer.

The package itself imports and exports nothing: import from the module that holds a
name (``tools.estimators.history.HistoryEstimator``, ``tools.estimators.replay.replay``),
so ``import tools.estimators.dnn`` (planning a DNN) never loads XGBoost through
``history``, and ``tools.estimators.replay`` is always the module.

    history, features, baselines, metrics, replay   generic jobs: the history estimator
    history_runtime, history_memory, replay_memory  its run-time and memory models
    promoted_runtime   the promoted run-time models and their loaders
    dnn          the CPU estimators of DNN training (bundle, per-operator model)
    gpu          the per-operator GPU estimator
    gpu_memory   white-box peak GPU memory
    promoted_record   the registry's promoted model, read once per promotion
"""

from __future__ import annotations

__all__: list[str] = []
