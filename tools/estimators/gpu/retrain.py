"""The per-GPU correction's retraining and its measurements: Model Promotion's GPU work.

``trial_correction`` reads the center's GPU step measurements (family ``gpu_step``:
Profiling's runs on GPU partitions and finished GPU jobs), puts each beside the shipped
per-operator model's prediction, oldest first, holds out the latest
``holdout_fraction``, fits a correction on the rest and scores it, the correction that
serves now (``promoted.read_promoted_correction``, the planner's rule) and the model as
shipped on the held-out rows. ``record_correction`` writes the candidate's artifact and
its registry record. Whether to promote is the agent's decision
(``agents.promotion_gpu``).

``record_finished_gpu_job`` turns a finished GPU job of a planned DNN workload into a
measurement (run time less the start-up point, over the planned steps), so the next
retraining learns from it.
"""

from __future__ import annotations

import asyncio
import math
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

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
from tools.estimators.gpu.trace_folders import TraceFolders
from tools.planning.analytic import STARTUP_POINT_S

__all__ = [
    "CorrectionTrial",
    "NoTrial",
    "record_correction",
    "record_finished_gpu_job",
    "trial_correction",
]


@dataclass(frozen=True, slots=True)
class NoTrial:
    """Why no correction could be fitted, and the usable measurements there were."""

    reason: str
    rows: int = 0


@dataclass(frozen=True, slots=True)
class CorrectionTrial:
    """A correction fitted on the older measurements and its held-out errors beside those
    of what serves now (``incumbent``; None: the model as shipped) and of the model as
    shipped."""

    candidate: GpuStepCorrection
    rows: int  # usable measurements
    train: int
    holdout: int
    candidate_error: float
    incumbent_error: float
    shipped_error: float
    incumbent: EstimatorRecord | None
    serving: str  # what serves now, in words
    left_out: tuple[str, ...]  # measurements not usable, and why


async def trial_correction(
    kb: KnowledgeBase, *, holdout_fraction: float, traces: TraceFolders | None = None
) -> CorrectionTrial | NoTrial:
    """Fit a correction on the older measurements and score it on the latest
    ``holdout_fraction`` of them (at least one); ``traces``: where the measured models'
    traces persist."""
    records = await kb.query_profiles(family=GPU_STEP_FAMILY, status=ProfileStatus.OK)
    if not records:
        return NoTrial(
            f"no GPU step measurements in the knowledge base (family {GPU_STEP_FAMILY!r})"
        )
    from tools.estimators.gpu.estimator import load_step_model

    gpus = catalog_gpus(await kb.get_catalog())
    rows, left_out = await asyncio.to_thread(rows_from_records, records, gpus, traces)
    if len(rows) < 2:
        note = f"; left out: {'; '.join(left_out)}" if left_out else ""
        return NoTrial(
            f"{len(rows)} usable GPU step measurements, fewer than 2 (one to fit, one held "
            f"out){note}",
            len(rows),
        )
    base = load_step_model().estimator_id
    held = max(1, math.ceil(len(rows) * holdout_fraction))
    train, holdout = rows[:-held], rows[-held:]
    candidate = fit_correction(train, base)
    record, serving, words = await read_promoted_correction(kb, base)
    incumbent = serving.correction if serving is not None else None
    return CorrectionTrial(
        candidate=candidate,
        rows=len(rows),
        train=len(train),
        holdout=len(holdout),
        candidate_error=heldout_errors(holdout, candidate),
        incumbent_error=heldout_errors(holdout, incumbent),
        shipped_error=heldout_errors(holdout, None),
        incumbent=record,
        serving=words,
        left_out=tuple(left_out),
    )


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


async def record_correction(
    kb: KnowledgeBase,
    artifacts_dir: Path,
    trial: CorrectionTrial,
    candidate_id: str,
    *,
    shadow: bool,
    notes: str,
    created_at: datetime,
) -> EstimatorRecord:
    """Write the candidate to ``artifacts_dir/candidate_id.json`` and put its registry
    record: ``shadow`` (to be promoted) or retired, with its held-out errors."""
    path = artifacts_dir / f"{candidate_id}.json"
    await asyncio.to_thread(_write, path, trial.candidate.model_dump_json(indent=1))
    record = EstimatorRecord(
        id=candidate_id,
        kind=GPU_CORRECTION_KIND,
        target=GPU_CORRECTION_TARGET,
        status=EstimatorStatus.SHADOW if shadow else EstimatorStatus.RETIRED,
        validation={
            "mape": trial.candidate_error,
            "incumbent_mape": trial.incumbent_error,
            "uncorrected_mape": trial.shipped_error,
        },
        training_rows=trial.train,
        artifact_path=str(path),
        features=sorted(trial.candidate.factors),
        created_at=created_at,
        notes=notes,
    )
    await kb.put_estimator(record)
    return record


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
