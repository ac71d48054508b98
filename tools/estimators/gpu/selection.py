"""Whether the planner answers GPU options with the per-operator model or the fallback.

The rule is honest and one line: the per-operator model answers where its recorded
leave-one-GPU-out error (the model file's ``meta.validation``) is lower than the analytic
fallback's; otherwise the fallback answers, and the answer says why. The fallback's error
is taken on the same runs when the model file records it (``analytic_e2e_mape`` or
``fallback_e2e_mape``), else the fallback's own leave-one-GPU-out error on Gavel
(``tools.planning.hardware.GAVEL_FIT_LOGO_MAPE``). The metadata is read defensively: a
missing or unreadable figure means the per-operator model is not used, with that reason.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tools.planning import hardware

__all__ = [
    "FALLBACK_ERROR_KEYS",
    "MODEL_PATH",
    "OPCOST_ERROR_KEYS",
    "OpCostChoice",
    "choose_opcost",
    "read_meta",
]

MODEL_PATH = Path(__file__).resolve().parents[3] / "data" / "gpu_models" / "opcost.json"
"""The shipped model (``estimator.DEFAULT_MODEL_PATH``; a test checks they agree)."""

OPCOST_ERROR_KEYS = ("logo_mape", "e2e_mape")
FALLBACK_ERROR_KEYS = ("analytic_e2e_mape", "fallback_e2e_mape")


@dataclass(frozen=True, slots=True)
class OpCostChoice:
    use: bool
    reason: str
    opcost_error: float | None
    fallback_error: float


def _figure(validation: Mapping[str, Any], keys: tuple[str, ...]) -> tuple[str, float] | None:
    for key in keys:
        value = validation.get(key)
        if isinstance(value, bool) or not isinstance(value, int | float):
            continue
        if math.isfinite(value) and value >= 0:
            return key, float(value)
    return None


def choose_opcost(
    meta: Mapping[str, Any] | None,
    estimator_id: str = "gpu-opcost",
    *,
    correction: tuple[str, float] | None = None,
) -> OpCostChoice:
    """The choice for a model file's ``meta`` (None: the model could not be loaded).

    ``correction``: the promoted per-GPU correction (Model Promotion's, fitted on the
    center's own measurements) and its held-out MAPE there; the corrected model is used
    where that error is below the fallback's.
    """
    validation = meta.get("validation") if isinstance(meta, Mapping) else None
    if not isinstance(validation, Mapping):
        validation = {}
    same_runs = _figure(validation, FALLBACK_ERROR_KEYS)
    fallback = same_runs[1] if same_runs else hardware.GAVEL_FIT_LOGO_MAPE
    where = "on the same runs" if same_runs else "leaving one GPU out of Gavel's"
    if meta is None:
        return OpCostChoice(False, f"{estimator_id} could not be loaded", None, fallback)
    if correction is not None and correction[1] < fallback:
        return OpCostChoice(
            True,
            f"{estimator_id} with the center's correction {correction[0]}: held-out error "
            f"{correction[1]:.1%} on the center's own GPU runs, below the analytic "
            f"fallback's {fallback:.1%} ({where})",
            correction[1],
            fallback,
        )
    found = _figure(validation, OPCOST_ERROR_KEYS)
    if found is None:
        return OpCostChoice(
            False,
            f"{estimator_id} records no leave-one-GPU-out error (meta.validation."
            f"{' or '.join(OPCOST_ERROR_KEYS)})",
            None,
            fallback,
        )
    error = found[1]
    if error < fallback:
        return OpCostChoice(
            True,
            f"{estimator_id}: leave-one-GPU-out error {error:.1%}, below the analytic "
            f"fallback's {fallback:.1%} ({where})",
            error,
            fallback,
        )
    return OpCostChoice(
        False,
        f"per-operator GPU model {estimator_id} not used: its leave-one-GPU-out error "
        f"{error:.1%} is not below the analytic fallback's {fallback:.1%} ({where})",
        error,
        fallback,
    )


def read_meta(path: Path | None = None) -> tuple[dict[str, Any], str]:
    """The model file's ``meta`` and estimator id, read without loading the model (its
    kernels' module imports torch, seconds of CPU a plan that does not use it should not
    pay); ValueError/OSError when the file cannot be read."""
    document = json.loads((path or MODEL_PATH).read_text(encoding="utf-8"))
    meta = document.get("meta") if isinstance(document, dict) else None
    if not isinstance(meta, dict):
        raise ValueError("the GPU cost model records no meta")
    return meta, f"gpu-opcost-{meta.get('version', 'dev')}"  # GpuStepModel.estimator_id
