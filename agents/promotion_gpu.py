"""Model Promotion for DNN time on GPUs: the per-operator model's per-GPU correction.

Profiling's retrain request for DNN time (``dnn_runtime_s``) lands here. The center's
GPU step measurements (``tools.estimators.gpu.correction``: Profiling's runs on GPU
partitions and finished GPU jobs, family ``gpu_step``) are put beside the shipped
per-operator model's predictions, oldest first; the latest ``holdout_fraction`` are
held out. A correction fitted on the rest is promoted only when its held-out MAPE is
lower than that of what serves now (the promoted correction, or the model as shipped
when none is); otherwise it is retired and the decision says why. With no GPU
measurement (or too few to hold one out) the request is answered ``skipped`` with that
reason.

``record_finished_gpu_job`` turns a finished GPU job of a planned DNN workload into a
measurement (run time less the start-up point, over the planned steps), on
``job.finished``, so the next retraining learns from it.
"""

from __future__ import annotations

import asyncio
import math
import uuid
from pathlib import Path

from pydantic import Field

from agents.events import Envelope, EstimatorDecision, EstimatorPromoted
from agents.runtime import Action, Emit
from knowledge_base.errors import NotFoundError
from knowledge_base.records import (
    EstimatorRecord,
    EstimatorStatus,
    JobRecord,
    JobState,
    ProfileRecord,
    ProfileStatus,
)
from knowledge_base.store import KnowledgeBase
from knowledge_base.workload import DNNTraining
from tools.estimators.gpu.correction import (
    GPU_CORRECTION_KIND,
    GPU_CORRECTION_TARGET,
    GPU_STEP_FAMILY,
    GpuStepCorrection,
    fit_correction,
    heldout_errors,
    measurement_record,
    rows_from_records,
)
from tools.estimators.gpu.promoted import read_promoted_correction
from tools.estimators.gpu.specs import catalog_gpus
from tools.planning.analytic import STARTUP_POINT_S

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


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


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


async def _incumbent(
    kb: KnowledgeBase, base: str
) -> tuple[EstimatorRecord | None, GpuStepCorrection | None, str]:
    # the same rule the planner's chain serves by (``promoted.read_promoted_correction``)
    record, serving, words = await read_promoted_correction(kb, base)
    return record, serving.correction if serving is not None else None, words


async def retrain_gpu(
    kb: KnowledgeBase,
    artifacts_dir: Path,
    action: RetrainGpuStep,
    cause: Envelope,
    *,
    holdout_fraction: float,
) -> list[Emit]:
    """Fit, shadow-evaluate and promote (or keep) the per-GPU correction."""
    records = await kb.query_profiles(family=GPU_STEP_FAMILY, status=ProfileStatus.OK)
    if not records:
        return _skipped(
            f"no GPU step measurements in the knowledge base (family {GPU_STEP_FAMILY!r}); "
            f"asked because: {action.reason}"
        )
    from tools.estimators.gpu.estimator import load_step_model

    gpus = catalog_gpus(await kb.get_catalog())
    rows, left_out = await asyncio.to_thread(rows_from_records, records, gpus)
    note = f"; left out: {'; '.join(left_out)}" if left_out else ""
    if len(rows) < 2:
        return _skipped(
            f"{len(rows)} usable GPU step measurements, fewer than 2 (one to fit, one held "
            f"out){note}; asked because: {action.reason}",
            len(rows),
        )
    base = load_step_model().estimator_id
    held = max(1, math.ceil(len(rows) * holdout_fraction))
    train, holdout = rows[:-held], rows[-held:]
    candidate = fit_correction(train, base)
    incumbent_record, incumbent, serving = await _incumbent(kb, base)
    candidate_error = heldout_errors(holdout, candidate)
    incumbent_error = heldout_errors(holdout, incumbent)
    shipped_error = heldout_errors(holdout, None)
    promote = candidate_error < incumbent_error
    stem = uuid.uuid5(uuid.NAMESPACE_URL, str(cause.id)).hex[:12]
    candidate_id = f"{GPU_CORRECTION_TARGET}-{GPU_CORRECTION_KIND}-{stem}"
    path = artifacts_dir / f"{candidate_id}.json"
    await asyncio.to_thread(_write, path, candidate.model_dump_json(indent=1))
    verdict = (
        f"held-out MAPE {candidate_error:.1%} on {len(holdout)} measurements against "
        f"{incumbent_error:.1%} for {serving}"
    )
    reason = (
        f"{'promoted' if promote else 'kept ' + serving}: {verdict} (fitted on {len(train)} "
        f"measurements of {len(candidate.rows)} GPU models{note}; asked because: {action.reason})"
    )
    await kb.put_estimator(
        EstimatorRecord(
            id=candidate_id,
            kind=GPU_CORRECTION_KIND,
            target=GPU_CORRECTION_TARGET,
            status=EstimatorStatus.SHADOW if promote else EstimatorStatus.RETIRED,
            validation={
                "mape": candidate_error,
                "incumbent_mape": incumbent_error,
                "uncorrected_mape": shipped_error,
            },
            training_rows=len(train),
            artifact_path=str(path),
            features=sorted(candidate.factors),
            created_at=cause.time,
            notes=reason,
        )
    )
    decision = EstimatorDecision(
        target=GPU_CORRECTION_TARGET,
        decision="promoted" if promote else "rejected",
        reason=reason,
        estimator_id=incumbent_record.id if incumbent_record else None,
        candidate_id=candidate_id,
        candidate_error=candidate_error,
        incumbent_error=incumbent_error,
        jobs=len(rows),
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
                    replaced=incumbent_record.id if incumbent_record else None,
                    heldout_error=candidate_error,
                )
            )
        )
    return emits


async def record_finished_gpu_job(kb: KnowledgeBase, job: JobRecord) -> ProfileRecord | None:
    """A GPU step measurement from a finished single-job GPU plan of DNN training:
    (run time - the analytic start-up point) / the planned steps. None for anything else
    (a CPU or generic job, a cascade, a run shorter than twice the start-up)."""
    if job.state is not JobState.COMPLETED or not job.plan_id or not job.run_s:
        return None
    try:
        plan = await kb.get_plan(job.plan_id)
    except NotFoundError:
        return None
    workload, option = plan.spec.workload, plan.option
    if not isinstance(workload, DNNTraining) or option is None or not option.gpus_per_node:
        return None
    if len(plan.segments) > 1 or job.run_s < 2 * STARTUP_POINT_S:
        return None
    gpu = None
    try:
        system = (await kb.get_catalog()).system(option.system)
    except NotFoundError:
        return None
    node = next((n for n in system.node_types if n.name == option.node_type), None)
    gpu = node.gpu if node is not None else None
    if gpu is None:
        return None
    batch = option.batch_size or workload.batch_sizes[0]
    steps = workload.epochs * math.ceil(workload.dataset_samples / batch)
    record = measurement_record(
        f"job-{job.system}-{job.job_id}-gpu-step",
        workload,
        batch_size=batch,
        gpus=option.gpus_per_node * option.nodes,
        gpu_model=gpu.model,
        step_s=(job.run_s - STARTUP_POINT_S) / steps,
        source="finished job",
        hardware={"system": option.system, "node_type": option.node_type or ""},
        created_at=job.end_time,
    )
    await kb.add_profiles([record])
    return record
