"""From a plan to what a batch system accepts: sbatch scripts and Tapis v3 job requests.

One ``JobRequest`` per job of the plan (a cascade has several), built by the same
function the builder checks with, so a rendered job is exactly a checked job. The script
itself comes from ``tools.actuators.slurm.render_sbatch`` (golden-file tested; identity
travels in argv) and the Tapis body from ``tools.actuators.tapis.tapis_job_definition``.

The job learns its plan from the environment: ``RIGHTSIZE_BATCH_SIZE``,
``RIGHTSIZE_EPOCHS``, and for cascades ``RIGHTSIZE_SEGMENT`` (0-based),
``RIGHTSIZE_SEGMENTS`` and ``RIGHTSIZE_SEGMENT_WORK_S`` (when to checkpoint and stop).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from knowledge_base.workload import DNNTraining, WorkloadSpec
from tools.actuators.model import JobRequest
from tools.actuators.slurm import render_sbatch
from tools.actuators.tapis import tapis_job_definition
from tools.planning.builder import job_request
from tools.planning.results import PlannedOption

__all__ = ["DEFAULT_DNN_COMMAND", "command_for", "job_requests", "sbatch_scripts", "tapis_requests"]

DEFAULT_DNN_COMMAND = "python train.py"


def command_for(spec: WorkloadSpec) -> str:
    """What the batch script runs: the DNN's command (default ``python train.py``) or the app."""
    workload = spec.workload
    if isinstance(workload, DNNTraining):
        return workload.command or DEFAULT_DNN_COMMAND
    return workload.application


def _environment(spec: WorkloadSpec, plan: PlannedOption, index: int) -> dict[str, str]:
    env: dict[str, str] = {}
    workload = spec.workload
    if isinstance(workload, DNNTraining):
        env["RIGHTSIZE_EPOCHS"] = str(workload.epochs)
        if plan.option.batch_size is not None:
            env["RIGHTSIZE_BATCH_SIZE"] = str(plan.option.batch_size)
    if len(plan.segment_walltimes_s) > 1:
        env["RIGHTSIZE_SEGMENT"] = str(index)
        env["RIGHTSIZE_SEGMENTS"] = str(len(plan.segment_walltimes_s))
        env["RIGHTSIZE_SEGMENT_WORK_S"] = str(plan.segment_work_s[index])
    return env


def job_requests(
    plan: PlannedOption,
    spec: WorkloadSpec,
    *,
    plan_id: str | None = None,
    working_dir: Path | None = None,
) -> list[JobRequest]:
    """One request per job of ``plan``, in order."""
    requests = []
    for index, walltime_s in enumerate(plan.segment_walltimes_s):
        base = job_request(spec, plan.option, plan.qos, walltime_s, command_for(spec))
        requests.append(
            base.model_copy(
                update={
                    "environment": _environment(spec, plan, index),
                    "plan_id": plan_id,
                    "working_dir": working_dir,
                }
            )
        )
    # model_copy skips validation; validate once so a rendered job is a valid job
    return [JobRequest.model_validate(r.model_dump()) for r in requests]


def sbatch_scripts(
    plan: PlannedOption, spec: WorkloadSpec, *, plan_id: str | None = None
) -> list[str]:
    """The sbatch script of each job of ``plan``."""
    return [render_sbatch(r) for r in job_requests(plan, spec, plan_id=plan_id)]


def tapis_requests(
    plan: PlannedOption,
    spec: WorkloadSpec,
    *,
    exec_system_id: str,
    app_id: str,
    app_version: str,
    plan_id: str | None = None,
) -> list[dict[str, Any]]:
    """The Tapis v3 ``POST /v3/jobs/submit`` body of each job of ``plan``."""
    return [
        tapis_job_definition(
            r, exec_system_id=exec_system_id, app_id=app_id, app_version=app_version
        )
        for r in job_requests(plan, spec, plan_id=plan_id)
    ]
