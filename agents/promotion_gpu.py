"""Model Promotion for DNN time on GPUs: when to retrain the per-GPU correction of the
per-operator model, and whether to promote what was fitted.

Profiling's retrain request for DNN time (``dnn_runtime_s``) lands here. The fitting is
estimator work (``tools.estimators.gpu.retrain.trial_correction``: the center's GPU step
measurements beside the shipped model's predictions, oldest first, the latest
``holdout_fraction`` held out). The decision is this module's: a correction is promoted
only when its held-out MAPE is lower than that of what serves now (the promoted
correction, or the model as shipped when none is); otherwise it is retired and the
decision says why. With no GPU measurement (or too few to hold one out) the request is
answered ``skipped`` with that reason.

A finished GPU job becomes a measurement on ``job.finished``
(``tools.estimators.gpu.retrain.record_finished_gpu_job``), so the next retraining learns
from it.
"""

from __future__ import annotations

import uuid
from pathlib import Path

from pydantic import Field

from agents.events import Envelope, EstimatorDecision, EstimatorPromoted
from agents.runtime import Action, Emit
from knowledge_base.store import KnowledgeBase
from tools.estimators.gpu.correction import GPU_CORRECTION_KIND, GPU_CORRECTION_TARGET
from tools.estimators.gpu.retrain import (
    NoTrial,
    record_correction,
    record_finished_gpu_job,
    trial_correction,
)
from tools.estimators.gpu.trace_folders import TraceFolders

__all__ = [
    "DNN_RUNTIME_TARGET",
    "GPU_TARGETS",
    "RetrainGpuStep",
    "record_finished_gpu_job",
    "retrain_gpu",
]

DNN_RUNTIME_TARGET = "dnn_runtime_s"  # Profiling's retrain target (agents.profiling)
GPU_TARGETS = (DNN_RUNTIME_TARGET, GPU_CORRECTION_TARGET)


class RetrainGpuStep(Action):
    reason: str = Field(min_length=1)


def _skipped(reason: str, rows: int = 0) -> list[Emit]:
    return [
        Emit(
            payload=EstimatorDecision(
                target=GPU_CORRECTION_TARGET,
                decision="skipped",
                reason=reason,
                jobs=rows,
                metric="mape",
            )
        )
    ]


async def retrain_gpu(
    kb: KnowledgeBase,
    artifacts_dir: Path,
    action: RetrainGpuStep,
    cause: Envelope,
    *,
    holdout_fraction: float,
    traces: TraceFolders | None = None,
) -> list[Emit]:
    """Have a correction fitted and shadow-evaluated; promote it or keep what serves."""
    trial = await trial_correction(kb, holdout_fraction=holdout_fraction, traces=traces)
    if isinstance(trial, NoTrial):
        return _skipped(f"{trial.reason}; asked because: {action.reason}", trial.rows)
    promote = trial.candidate_error < trial.incumbent_error
    # Deterministic ids: a redelivered request re-trains into the same record.
    stem = uuid.uuid5(uuid.NAMESPACE_URL, str(cause.id)).hex[:12]
    candidate_id = f"{GPU_CORRECTION_TARGET}-{GPU_CORRECTION_KIND}-{stem}"
    note = f"; left out: {'; '.join(trial.left_out)}" if trial.left_out else ""
    verdict = (
        f"held-out MAPE {trial.candidate_error:.1%} on {trial.holdout} measurements against "
        f"{trial.incumbent_error:.1%} for {trial.serving}"
    )
    reason = (
        f"{'promoted' if promote else 'kept ' + trial.serving}: {verdict} (fitted on "
        f"{trial.train} measurements of {len(trial.candidate.rows)} GPU models{note}; asked "
        f"because: {action.reason})"
    )
    await record_correction(
        kb,
        artifacts_dir,
        trial,
        candidate_id,
        shadow=promote,
        notes=reason,
        created_at=cause.time,
    )
    incumbent = trial.incumbent
    decision = EstimatorDecision(
        target=GPU_CORRECTION_TARGET,
        decision="promoted" if promote else "rejected",
        reason=reason,
        estimator_id=incumbent.id if incumbent else None,
        candidate_id=candidate_id,
        candidate_error=trial.candidate_error,
        incumbent_error=trial.incumbent_error,
        jobs=trial.rows,
        metric="mape",
    )
    emits = [Emit(payload=decision)]
    if promote:
        await kb.promote_estimator(candidate_id)
        emits.append(
            Emit(
                payload=EstimatorPromoted(
                    estimator_id=candidate_id,
                    target=GPU_CORRECTION_TARGET,
                    replaced=incumbent.id if incumbent else None,
                    heldout_error=trial.candidate_error,
                )
            )
        )
    return emits
