"""Estimators, one subpackage per question they answer and the hardware it is about.

The package itself imports and exports nothing: import from the module that holds a
name (``tools.estimators.history.estimator.HistoryEstimator``), so planning a DNN never
loads XGBoost through ``history``.

    model_file   a user's model file as a training task (and its errors)
    cpu          DNN training on CPUs: the bundle, the per-operator model, host calibration
    gpu          DNN training on GPUs: the per-operator model, Gavel's roofline, NeuSight
    gpu.memory   white-box peak GPU memory
    history      generic jobs from a center's history: run time, memory, CPU efficiency
    promoted     the registry's promoted estimator and its loaders
"""

from __future__ import annotations

__all__: list[str] = []
