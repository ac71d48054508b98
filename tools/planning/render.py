"""From a plan to what a batch system accepts: the one job contract, sbatch, Tapis.

``segment_request`` is the job contract: it turns one segment of a plan into the job the
batch system gets (command, environment, walltime, memory flags, ranks, qos, job name).
``rightsize plan --sbatch``/``--tapis`` (``job_requests``), the Scheduler (every
submission and resubmission), the Tapis actuator and the simulated cluster all take
their job from it, so a script printed at planning time is the script that runs. Its
resources come from ``tools.planning.builder.job_request``, the function the planner
checks a candidate with, so a rendered job is exactly a checked job. The script itself
comes from ``tools.actuators.slurm.render_sbatch`` (golden-file tested) and the Tapis
body from ``tools.actuators.tapis.tapis_job_definition``.

The job learns its plan from the environment: ``RIGHTSIZE_BATCH_SIZE``,
``RIGHTSIZE_EPOCHS``, and, for a workload that checkpoints (a cascade's segments, or a
single job the Re-scheduler may continue), ``RIGHTSIZE_SEGMENT`` (0-based),
``RIGHTSIZE_SEGMENTS`` and ``RIGHTSIZE_SEGMENT_WORK_S`` (its walltime less the checkpoint
overhead: when to checkpoint and stop); a profiling run gets ``RIGHTSIZE_PROFILE_STEPS``.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from knowledge_base.records import PlanOption
from knowledge_base.workload import DNNTraining, GenericJob, WorkloadSpec
from tools.actuators.model import JobRequest
from tools.actuators.slurm import render_sbatch
from tools.actuators.tapis import tapis_job_definition
from tools.planning.builder import PlanningConfig, job_request
from tools.planning.results import PlannedOption

__all__ = [
    "DEFAULT_DNN_COMMAND",
    "command_for",
    "job_name",
    "job_requests",
    "sbatch_scripts",
    "segment_request",
    "tapis_requests",
]

DEFAULT_DNN_COMMAND = "python train.py"


def command_for(spec: WorkloadSpec) -> str:
    """What the batch script runs: the DNN's command (default ``python train.py``) or the app."""
    workload = spec.workload
    if isinstance(workload, DNNTraining):
        return workload.command or DEFAULT_DNN_COMMAND
    return workload.application


def job_name(spec: WorkloadSpec, plan_id: str | None, index: int, attempt: int = 1) -> str:
    """A job's unique name, ``<name>-<plan>-s<segment>a<attempt>``: how a submission is
    found again after a crash (without a plan id, as ``plan --sbatch`` prints it:
    ``<name>-s<segment>a<attempt>``)."""
    plan = f"-{plan_id[:56]}" if plan_id else ""
    return f"{spec.name[:48]}{plan}-s{index}a{attempt}"


def _checkpoints(spec: WorkloadSpec) -> bool:
    return isinstance(spec.workload, DNNTraining) and spec.workload.checkpointable


def _memory_per_cpu_mb(spec: WorkloadSpec, request: JobRequest) -> int | None:
    """The user's memory per core (``--mem-per-cpu``); raised with the node's memory when
    the Re-scheduler gave the job more than the per-core share (after an OOM)."""
    workload = spec.workload
    if not isinstance(workload, GenericJob) or workload.memory_per_core_mb is None:
        return None
    asked = workload.memory_per_core_mb
    cores = request.cores_per_node
    if request.memory_mb > asked * cores + 1024:  # beyond the planner's rounding to GB
        return math.ceil(request.memory_mb / cores)
    return asked


def _ranks(spec: WorkloadSpec, request: JobRequest) -> int | None:
    """The ranks the user asked (``--ntasks``), when the layout does not fill every node."""
    workload = spec.workload
    if not isinstance(workload, GenericJob) or (workload.tasks is None and workload.cores is None):
        return None
    ranks = workload.total_tasks
    if not request.nodes <= ranks <= request.nodes * request.tasks_per_node:
        return None  # a layout the planner changed (more ranks per node): as laid out
    return ranks


def segment_request(
    spec: WorkloadSpec,
    option: PlanOption,
    *,
    qos: str | None,
    walltime_s: int,
    index: int = 0,
    segments: int = 1,
    attempt: int = 1,
    checkpoint_overhead_s: int = PlanningConfig().checkpoint_overhead_s,
    plan_id: str | None = None,
    working_dir: Path | None = None,
    profile_steps: int | None = None,
) -> JobRequest:
    """Segment ``index`` (of ``segments``) of a plan for ``spec`` on ``option``, its
    ``attempt``-th submission, as the batch system gets it: the job contract."""
    base = job_request(spec, option, qos, walltime_s, command_for(spec))
    env: dict[str, str] = {}
    workload = spec.workload
    if profile_steps is not None:
        env["RIGHTSIZE_PROFILE_STEPS"] = str(profile_steps)
    if isinstance(workload, DNNTraining):
        env["RIGHTSIZE_EPOCHS"] = str(workload.epochs)
        if option.batch_size is not None:
            env["RIGHTSIZE_BATCH_SIZE"] = str(option.batch_size)
    if segments > 1 or _checkpoints(spec):
        env["RIGHTSIZE_SEGMENT"] = str(index)
        env["RIGHTSIZE_SEGMENTS"] = str(segments)
        env["RIGHTSIZE_SEGMENT_WORK_S"] = str(max(1, walltime_s - checkpoint_overhead_s))
    fields: dict[str, Any] = {
        **base.model_dump(),
        "name": job_name(spec, plan_id, index, attempt),
        "ntasks": _ranks(spec, base),
        "memory_per_cpu_mb": _memory_per_cpu_mb(spec, base),
        "environment": env,
        "plan_id": plan_id,
        "working_dir": working_dir,
    }
    return JobRequest.model_validate(fields)


def job_requests(
    plan: PlannedOption,
    spec: WorkloadSpec,
    *,
    plan_id: str | None = None,
    working_dir: Path | None = None,
    checkpoint_overhead_s: int = PlanningConfig().checkpoint_overhead_s,
) -> list[JobRequest]:
    """One request per job of ``plan``, in order (each segment's first attempt)."""
    segments = len(plan.segment_walltimes_s)
    return [
        segment_request(
            spec,
            plan.option,
            qos=plan.qos,
            walltime_s=walltime_s,
            index=index,
            segments=segments,
            checkpoint_overhead_s=checkpoint_overhead_s,
            plan_id=plan_id,
            working_dir=working_dir,
        )
        for index, walltime_s in enumerate(plan.segment_walltimes_s)
    ]


def sbatch_scripts(
    plan: PlannedOption,
    spec: WorkloadSpec,
    *,
    plan_id: str | None = None,
    checkpoint_overhead_s: int = PlanningConfig().checkpoint_overhead_s,
) -> list[str]:
    """The sbatch script of each job of ``plan``."""
    requests = job_requests(
        plan, spec, plan_id=plan_id, checkpoint_overhead_s=checkpoint_overhead_s
    )
    return [render_sbatch(r) for r in requests]


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
