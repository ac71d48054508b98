"""Feature rows for the DNN estimators, and the targets they learn.

Three groups, so each estimator's inputs are explicit:

- ``tabular`` (black-box, HARP's tabular model): the family, its architecture
  parameters (depth, width, input size, classes/vocabulary), batch size, threads,
  optimizer, parameter count and FLOPs per step, and the hardware's specs. A user's own
  model has no family: those columns are missing (NaN), which XGBoost handles.
- ``graph``: totals of the op graph (FLOPs and bytes per phase and operator category,
  operator counts, saved activations, peak live bytes) - white-box, family-agnostic.
- ``analytic``: the analytic time and memory (``tools.profiling.analytic``) on this
  hardware.

``analytic_terms`` gives the analytic model's terms one by one (compute, memory traffic,
update, dispatch; model state, buffers, batch, saved activations, the live peak:
``MEMORY_LIVE``) with a constant, for the hybrid's fitted linear base (``bundle``).

Targets are logs: ``log(iteration_s)`` and ``log(peak_memory_mb)``; errors are relative.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Literal

import numpy as np
from numpy.typing import NDArray

from tools.profiling.analytic import (
    HardwareSpec,
    analytic_memory_mb,
    analytic_time_s,
    memory_terms_mb,
    optimizer_states,
    time_terms_s,
)
from tools.profiling.zoo.registry import FAMILIES

__all__ = [
    "ARCH_COLUMNS",
    "MEMORY_LIVE",
    "FeatureInput",
    "analytic_columns",
    "analytic_estimates",
    "analytic_terms",
    "feature_names",
    "feature_row",
    "matrix",
    "memory_terms",
]

_MIB = 1024.0 * 1024.0
# Architecture parameters mapped onto shared columns (depth means layers/blocks everywhere).
ARCH_COLUMNS: dict[str, tuple[str, ...]] = {
    "arch_depth": ("depth",),
    "arch_width": ("width",),
    "arch_input": ("image_size", "seq_len", "features"),
    "arch_classes": ("num_classes", "vocab"),
    "arch_extra": ("hidden", "patch", "tables", "rows"),
}
_FAMILY_NAMES = tuple(sorted(FAMILIES))


class FeatureInput:
    """What one prediction knows: configuration, hardware, and the op graph's summary."""

    __slots__ = ("batch_size", "family", "hardware", "optimizer", "params", "summary")

    def __init__(
        self,
        *,
        family: str | None,
        params: Mapping[str, int],
        batch_size: int,
        optimizer: str,
        hardware: HardwareSpec,
        summary: Mapping[str, float],
    ) -> None:
        self.family = family
        self.params = dict(params)
        self.batch_size = batch_size
        self.optimizer = optimizer
        self.hardware = hardware
        self.summary = dict(summary)


def _log(value: float) -> float:
    return math.log(max(value, 1e-12))


def analytic_estimates(item: FeatureInput) -> tuple[float, float]:
    """(time s, memory MiB) of the analytic model (``tools.profiling.analytic``)."""
    return (
        analytic_time_s(item.summary, item.hardware, item.optimizer),
        analytic_memory_mb(item.summary, item.optimizer),
    )


# The constant of each target's linear base, in its unit: 1 ms per step, 1 MiB.
_BASE_CONSTANT = {"iteration_s": 1e-3, "peak_memory_mb": 1.0}


# The live-peak term of the memory base: "live", the op graph's live peak, which keeps
# every gradient to the end of the step (so the gradients are counted beside the model
# state too, and the term has a floor at their size), "activations", the step's
# intermediate tensors without them (``OpGraph.peak_activation_bytes``), or "both".
# "live" was kept: on the zoo's new-family validation the memory hybrid over it erred
# least (5.8% against 6.1%, the state's weight held at 1: ``bundle.MEMORY_STATE_WEIGHT``);
# the activations' peak is one of the hybrid's inputs (``g_peak_activation_bytes``).
# docs/notebooks/estimators.md, "CPU peak memory: the gradients counted twice".
MEMORY_LIVE: Literal["activations", "live", "both"] = "live"


def memory_terms(item: FeatureInput, live: str | None = None) -> dict[str, float]:
    """The memory base's terms, MiB: ``analytic.memory_terms_mb`` with its live peak as
    ``live`` (default ``MEMORY_LIVE``) says."""
    terms = memory_terms_mb(item.summary, item.optimizer)
    chosen = live or MEMORY_LIVE
    activations = item.summary.get("peak_activation_bytes", 0.0) / _MIB
    if chosen == "activations":
        terms["live"] = activations
    elif chosen == "both":
        terms["activations"] = activations
    return terms


def analytic_terms(item: FeatureInput, live: str | None = None) -> dict[str, list[float]]:
    """target -> (constant, the analytic model's terms): what a linear base weighs."""
    time = time_terms_s(item.summary, item.hardware, item.optimizer)
    memory = memory_terms(item, live)
    return {
        "iteration_s": [_BASE_CONSTANT["iteration_s"], *time.values()],
        "peak_memory_mb": [_BASE_CONSTANT["peak_memory_mb"], *memory.values()],
    }


def analytic_columns() -> list[str]:
    return ["analytic_log_time", "analytic_log_memory", "analytic_log_state_mb"]


def _hardware(spec: HardwareSpec) -> dict[str, float]:
    return {k: v if k == "hw_gpu" else _log(v + 1) for k, v in spec.features().items()}


def _tabular(item: FeatureInput) -> dict[str, float]:
    row: dict[str, float] = {f"family_{name}": float(item.family == name) for name in _FAMILY_NAMES}
    for column, names in ARCH_COLUMNS.items():
        found = [item.params[n] for n in names if n in item.params]
        row[column] = float(found[0]) if found else math.nan
    flops = item.summary.get("forward_flops", 0.0) + item.summary.get("backward_flops", 0.0)
    row.update(
        batch_size=float(item.batch_size),
        log_batch=math.log(item.batch_size),
        adam=float(item.optimizer.lower() in {"adam", "adamw"}),
        log_parameters=_log(item.summary.get("parameters", 0.0) + 1),
        log_flops=_log(flops + 1),
        **_hardware(item.hardware),
    )
    return row


def _graph(item: FeatureInput) -> dict[str, float]:
    out = {f"g_{k}": _log(v + 1) for k, v in sorted(item.summary.items())}
    per_sample = item.summary.get("saved_activation_bytes", 0.0) / item.batch_size
    out["g_log_saved_per_sample"] = _log(per_sample + 1)
    return out


def _analytic(item: FeatureInput) -> dict[str, float]:
    time_s, memory_mb = analytic_estimates(item)
    state = item.summary.get("parameter_bytes", 0.0) * (2 + optimizer_states(item.optimizer))
    return {
        "analytic_log_time": _log(time_s),
        "analytic_log_memory": _log(memory_mb),
        "analytic_log_state_mb": _log(state / _MIB + 1e-3),
    }


def feature_row(item: FeatureInput, groups: Sequence[str]) -> dict[str, float]:
    """The named features of ``item`` for the ``groups`` (tabular, graph, analytic)."""
    row: dict[str, float] = {}
    for group in groups:
        if group == "tabular":
            row.update(_tabular(item))
        elif group == "graph":
            row.update(_graph(item))
        elif group == "analytic":
            row.update(_analytic(item))
        elif group == "hardware":
            row.update(_hardware(item.hardware))
            row.update(
                log_batch=math.log(item.batch_size),
                adam=float(item.optimizer.lower() in {"adam", "adamw"}),
            )
        else:
            raise ValueError(f"unknown feature group {group!r}")
    return row


def feature_names(sample: FeatureInput, groups: Sequence[str]) -> list[str]:
    return list(feature_row(sample, groups))


def matrix(
    items: Sequence[FeatureInput], groups: Sequence[str], names: Sequence[str] | None = None
) -> tuple[NDArray[np.float64], list[str]]:
    """Rows of ``items`` as a matrix with columns ``names`` (missing ones are NaN)."""
    rows = [feature_row(item, groups) for item in items]
    columns = list(names) if names is not None else (list(rows[0]) if rows else [])
    out = np.full((len(rows), len(columns)), np.nan)
    for i, row in enumerate(rows):
        for j, column in enumerate(columns):
            if column in row:
                out[i, j] = row[column]
    return out, columns
