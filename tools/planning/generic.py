"""Estimating generic batch jobs: the center's history when it has learned, else the user.

``HistoryRuntimeEstimator`` puts ``tools.estimators.history.estimator.HistoryEstimator`` (XGBoost
quantile regression over the center's finished jobs) behind the planning seam: its median
is the point, its calibrated safe quantile the top of the interval. Until that model has
trained on a system's history it declines, and ``GuessFallbackEstimator`` answers from
the user's own walltime and memory guesses, widened (x0.25-x1.25 for time) and labelled:
a generic job's speed on another machine is not something a guess can tell, so the same
guess stands on every system.

Cores left idle. Where the history records CPU time (SLURM's ``TotalCPU``, SWF field
6), the history estimator also predicts the share of its cores the job will keep busy.
When that is below ``LOW_CPU_EFFICIENCY`` for the user's jobs of this shape, the
estimate's label says so (``CoreAdvice.note``), and ``plan_with_core_advice`` adds to
the plan the same job with fewer cores as an alternative option.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from knowledge_base.catalog import NodeType, Partition, System
from knowledge_base.records import Interval, JobRecord, ResourceEstimate
from knowledge_base.workload import DNNTraining, GenericJob, Objective, WorkloadSpec
from tools.planning.estimation import Candidate, Estimator, NoEstimate, Workload

if TYPE_CHECKING:  # imported where used: xgboost is heavy and DNN planning never needs it
    from knowledge_base.catalog import Catalog
    from tools.estimators.history.estimator import (
        HistoryConfig,
        HistoryEstimator,
        HistoryPrediction,
    )
    from tools.estimators.history.features import HistoryJob
    from tools.planning.builder import PlanningConfig
    from tools.planning.cost import DollarRates
    from tools.planning.queue import QueueModel
    from tools.planning.selector import Selection

__all__ = [
    "GUESS_ID",
    "GUESS_LABEL",
    "LOW_CPU_EFFICIENCY",
    "CoreAdvice",
    "GuessFallbackEstimator",
    "HistoryRuntimeEstimator",
    "UserHistoryMemory",
    "core_advice",
    "large_memory_reason",
    "memory_share_mb",
    "plan_with_core_advice",
    "requested_memory_mb",
    "train_history",
]

GUESS_ID = "user-guess-fallback"
GUESS_LABEL = "analytic fallback (untrained): the user's guess, widened"
GUESS_RUNTIME_SPREAD = (0.25, 1.25)
# Users ask for more memory than they use; a guess is taken as the top of the interval.
GUESS_MEMORY_POINT = 0.8


def memory_share_mb(candidate: Candidate) -> float:
    """The memory per node a job of this many cores gets by default (the per-core share)."""
    node_type, partition = candidate.node_type, candidate.partition
    if node_type.usable_memory_mb and node_type.cores:
        per_core = node_type.usable_memory_mb / node_type.cores
    else:
        per_core = partition.max_memory_mb / partition.max_cores_per_node
    return min(per_core * candidate.cores_per_node, float(partition.max_memory_mb))


def requested_memory_mb(workload: GenericJob, cores_per_node: int) -> float | None:
    """The memory per node the user asked for, in whichever form SLURM lets them say it."""
    if workload.memory_mb:
        return float(workload.memory_mb)
    if workload.memory_per_task_mb:
        return float(workload.memory_per_task_mb) * max(cores_per_node // workload.cpus_per_task, 1)
    if workload.memory_per_core_mb:
        return float(workload.memory_per_core_mb) * cores_per_node
    return None


def _per_core_mb(partition: Partition, node_type: NodeType) -> float:
    if node_type.usable_memory_mb and node_type.cores:
        return node_type.usable_memory_mb / node_type.cores
    return partition.max_memory_mb / max(partition.max_cores_per_node, 1)


LARGE_MEMORY_RATIO = 2.0  # a queue whose per-core share is over twice the standard one


def large_memory_reason(
    workload: GenericJob,
    system: System,
    partition: Partition,
    node_type: NodeType,
    cores_per_node: int,
) -> str | None:
    """Why a large-memory (hugemem) queue is not for this job, or None when it may run there.

    The standard share is the smallest per-core memory of the system's CPU partitions; a
    queue with over twice that is for jobs that need it: one whose memory fits the
    standard share (or that gave none, and so gets the share) runs elsewhere.
    """
    shares = [
        _per_core_mb(p, n)
        for p in system.partitions
        if not p.gpus_per_node and (n := system.node_type_of(p)) is not None
    ]
    if not shares or partition.gpus_per_node:
        return None
    standard = min(shares)
    share = _per_core_mb(partition, node_type)
    if share <= LARGE_MEMORY_RATIO * standard:
        return None
    wanted = requested_memory_mb(workload, cores_per_node)
    if wanted is not None and wanted > standard * cores_per_node:
        return None
    return (
        f"{system.name}/{partition.name} is a large-memory queue ({share / 1024:.1f} GB per "
        f"core); the job fits the standard {standard / 1024:.1f} GB per core (ask for more "
        "with workload.memory_mb, memory_per_task_mb or memory_per_core_mb)"
    )


def _memory(workload: GenericJob, candidate: Candidate) -> Interval:
    asked = requested_memory_mb(workload, candidate.cores_per_node)
    high = asked if asked is not None else memory_share_mb(candidate)
    return Interval(
        point=high * GUESS_MEMORY_POINT, low=high * 0.5, high=high, coverage_basis="assumed"
    )


class GuessFallbackEstimator:
    """A generic job's run time from the user's own walltime guess, widened."""

    @property
    def estimator_id(self) -> str:
        return GUESS_ID

    def estimate(self, workload: Workload, candidate: Candidate) -> ResourceEstimate | NoEstimate:
        if not isinstance(workload, GenericJob):
            return NoEstimate("the guess fallback only estimates generic jobs")
        if not workload.walltime_s:
            return NoEstimate(
                f"no history estimator is trained for {candidate.system.name} and "
                "workload.walltime_s (the user's guess) is not given"
            )
        guess = float(workload.walltime_s)
        low, high = GUESS_RUNTIME_SPREAD
        runtime = Interval(
            point=guess, low=guess * low, high=guess * high, coverage_basis="assumed"
        )
        memory = _memory(workload, candidate)
        return ResourceEstimate(
            option=candidate.option(runtime, memory),
            runtime_s=runtime,
            memory_mb=memory,
            estimator_id=GUESS_ID,
            validation_error=None,
            label=GUESS_LABEL,
        )


LOW_CPU_EFFICIENCY = 0.5
"""Below this predicted share of busy cores, a plan says so and offers fewer cores."""


@dataclass(frozen=True, slots=True)
class CoreAdvice:
    """A job predicted to leave most of its cores idle, and how many would do."""

    efficiency: float  # the predicted median share of busy cores
    cores: int  # what the job asks for in all
    fewer: int  # cores that would be busy in 9 of 10 such jobs (the 0.9 quantile)
    basis_jobs: int  # the user's recent jobs of this shape behind it

    @property
    def note(self) -> str:
        return (
            f"history: this user's jobs of this shape use ~{self.efficiency:.0%} of their "
            f"cores; {self.fewer} cores would do (of {self.cores}; from their last "
            f"{self.basis_jobs} such jobs' CPU time)"
        )


def core_advice(
    prediction: HistoryPrediction, cores: int, cpus_per_task: int = 1
) -> CoreAdvice | None:
    """Fewer cores for a job whose user's jobs of its shape kept under half theirs busy.

    ``None`` when there is no such history (no CPU time recorded for the user's jobs of
    this processor count), when the predicted efficiency is ``LOW_CPU_EFFICIENCY`` or
    more, or when fewer cores would not be fewer.
    """
    p50 = prediction.cpu_efficiency_p50
    if p50 is None or p50 >= LOW_CPU_EFFICIENCY or prediction.cpu_user_shape_jobs == 0:
        return None
    high = max(prediction.cpu_efficiency_high or p50, p50)
    # Whole tasks: the cores busy at the 0.9 quantile, rounded up to cpus_per_task.
    fewer = max(math.ceil(cores * high / cpus_per_task), 1) * cpus_per_task
    if fewer >= cores:
        return None
    return CoreAdvice(p50, cores, fewer, prediction.cpu_user_shape_jobs)


class HistoryRuntimeEstimator:
    """The history estimator of one system, asked about a what-if job at ``now_s``."""

    def __init__(
        self, system: str, estimator: HistoryEstimator, *, user: str | None, now_s: float
    ) -> None:
        self.system = system
        self.history = estimator
        self.user = user
        self.now_s = now_s

    @property
    def estimator_id(self) -> str:
        version = self.history.model.version if self.history.model is not None else 0
        return f"history-{self.system}-v{version}"

    def estimate(self, workload: Workload, candidate: Candidate) -> ResourceEstimate | NoEstimate:
        if not isinstance(workload, GenericJob):
            return NoEstimate("the history estimator only estimates generic jobs")
        if candidate.system.name != self.system:
            return NoEstimate(f"the history estimator knows {self.system} only")
        prediction = self.history.predict(self._job(workload, candidate))
        if prediction.source == "fallback":
            return NoEstimate(f"the history estimator for {self.system} is not trained yet")
        # The estimator's own conversion: its point estimate within [0, safe] at the
        # calibrated coverage (its field names are still moving; this method is its API).
        runtime = prediction.runtime_interval()
        if workload.walltime_s and runtime.point > workload.walltime_s:
            # Its point stops at the request plus the kill delay the history shows (a job
            # expected to run to its limit); the delay is the batch system's, not work.
            runtime = Interval(
                point=float(workload.walltime_s),
                low=runtime.low,
                high=runtime.high,
                coverage=runtime.coverage,
                coverage_basis=runtime.coverage_basis,
            )
        if prediction.memory_safe_kb_per_proc is not None:
            per_node = candidate.cores_per_node / 1024
            mem_point = (prediction.memory_p50_kb_per_proc or 0.0) * per_node
            mem_high = max(prediction.memory_safe_kb_per_proc * per_node, mem_point)
            # The model's request is calibrated on jobs it never saw for the center's OOM
            # rate; the fallback (the user's last use, else the request) is not.
            calibrated = prediction.memory_source == "model"
            memory = Interval(
                point=mem_point,
                low=0.0 if calibrated else mem_point * 0.5,
                high=mem_high,
                coverage=1.0 - self.history.config.target_oom_rate if calibrated else 0.8,
                coverage_basis="held_out" if calibrated else "assumed",
            )
        else:
            memory = _memory(workload, candidate)
        label = f"history estimator ({prediction.trained_on_jobs} jobs of {self.system})"
        advice = core_advice(
            prediction, candidate.nodes * candidate.cores_per_node, workload.cpus_per_task
        )
        return ResourceEstimate(
            option=candidate.option(runtime, memory),
            runtime_s=runtime,
            memory_mb=memory,
            estimator_id=self.estimator_id,
            validation_error=None,
            label=label if advice is None else f"{label}; {advice.note}",
        )

    def core_advice(self, workload: GenericJob, candidate: Candidate) -> CoreAdvice | None:
        """:func:`core_advice` for ``workload`` on ``candidate`` (None off this system)."""
        if candidate.system.name != self.system:
            return None
        prediction = self.history.predict(self._job(workload, candidate))
        cores = candidate.nodes * candidate.cores_per_node
        return core_advice(prediction, cores, workload.cpus_per_task)

    def _job(self, workload: GenericJob, candidate: Candidate) -> HistoryJob:
        """The what-if job the history is asked about: this user, now, this shape."""
        from tools.estimators.history.features import HistoryJob

        asked = requested_memory_mb(workload, candidate.cores_per_node)
        return HistoryJob(
            job_id="what-if",
            submit_time_s=self.now_s,
            user=self.user,
            application=workload.application,
            partition=candidate.partition.name,
            procs=candidate.nodes * candidate.cores_per_node,
            requested_time_s=float(workload.walltime_s) if workload.walltime_s else None,
            requested_memory_kb_per_proc=asked * 1024 / candidate.cores_per_node if asked else None,
        )


class UserHistoryMemory:
    """A DNN estimator whose host memory comes from the user's own past runs, where any.

    ``inner`` (the white-box or profiled estimator) answers as before; when the system's
    history holds ended runs of this user under this job name (``spec.name``: the batch
    job's name, what accounting records as its application) with a recorded peak, the
    host memory becomes the history's: the memory model's median and its request for the
    center's OOM rate (``held_out``); before that model is trained, the user's last use
    and, as the top, the larger of it and the white-box top (``assumed``). GPU memory,
    run time and everything else stay the inner estimator's.
    """

    def __init__(
        self,
        inner: Estimator,
        history: HistoryEstimator,
        *,
        system: str,
        user: str,
        name: str,
        now_s: float,
    ) -> None:
        self.inner = inner
        self.history = history
        self.system = system
        self.user = user
        self.name = name
        self.now_s = now_s

    @property
    def estimator_id(self) -> str:
        return self.inner.estimator_id

    def estimate(self, workload: Workload, candidate: Candidate) -> ResourceEstimate | NoEstimate:
        answer = self.inner.estimate(workload, candidate)
        if not isinstance(answer, ResourceEstimate) or not isinstance(workload, DNNTraining):
            return answer
        runs = self.history.memory.state.user_runs(self.user, self.name)
        if candidate.system.name != self.system or runs == 0:
            return answer
        from tools.estimators.history.features import HistoryJob

        cores = candidate.cores_per_node
        prediction = self.history.predict(
            HistoryJob(
                job_id="what-if",
                submit_time_s=self.now_s,
                user=self.user,
                application=self.name,
                partition=candidate.partition.name,
                procs=candidate.nodes * cores,
                requested_memory_kb_per_proc=answer.memory_mb.high * 1024 / cores,
            )
        )
        if prediction.memory_safe_kb_per_proc is None:
            return answer
        point = (prediction.memory_p50_kb_per_proc or 0.0) * cores / 1024
        high = max(prediction.memory_safe_kb_per_proc * cores / 1024, point)
        calibrated = prediction.memory_source == "model"
        memory = Interval(
            point=point,
            low=0.0 if calibrated else point * 0.5,
            high=high,
            coverage=1.0 - self.history.config.target_oom_rate if calibrated else 0.8,
            coverage_basis="held_out" if calibrated else "assumed",
        )
        return answer.model_copy(
            update={
                "memory_mb": memory,
                "option": answer.option.model_copy(
                    update={"memory_mb": max(1, math.ceil(memory.high))}
                ),
                "label": f"{answer.label}; host memory from {runs} past runs of "
                f"{self.name} by {self.user} (history)",
            }
        )


def train_history(
    records: Sequence[JobRecord], config: HistoryConfig | None = None
) -> HistoryEstimator | None:
    """A history estimator trained on finished ``records``; None if too few to train."""
    from tools.estimators.history.estimator import HistoryEstimator
    from tools.estimators.history.features import HistoryJob

    estimator = HistoryEstimator(config)
    finished = [r for r in records if r.run_s is not None and r.end_time is not None]
    if len(finished) < estimator.config.first_train_jobs:
        return None
    # Replayed as it happened, so no row's features see jobs that ended after it began.
    estimator.learn_history(HistoryJob.from_job_record(record) for record in finished)
    return estimator if estimator.model is not None else None


def plan_with_core_advice(
    spec: WorkloadSpec,
    catalog: Catalog,
    *,
    now: datetime,
    estimators: Sequence[Estimator],
    objective: Objective | None = None,
    queue: QueueModel | None = None,
    rates: DollarRates | None = None,
    config: PlanningConfig | None = None,
) -> Selection:
    """``tools.planning.selector.plan``, and where the recommended generic plan would leave
    most of its cores idle (the history's CPU efficiency), a note saying so and the same
    job with fewer cores, on the same partition, as an alternative (ranked last, never
    recommended over the user's shape)."""
    from tools.planning.selector import plan

    def planned(of: WorkloadSpec) -> Selection:
        return plan(
            of,
            catalog,
            now=now,
            objective=objective,
            queue=queue,
            rates=rates,
            config=config,
            estimators=estimators,
        )

    selection = planned(spec)
    chosen, workload = selection.recommended, spec.workload
    if chosen is None or not isinstance(workload, GenericJob):
        return selection
    option = chosen.option
    system = catalog.system(option.system)
    partition = system.partition(option.partition)
    node_type = system.node_type_of(partition)
    if node_type is None:
        return selection
    candidate = Candidate(
        system, partition, node_type, option.nodes, option.cores_per_node, option.gpus_per_node
    )
    advice = next(
        (
            found
            for estimator in estimators
            if isinstance(estimator, HistoryRuntimeEstimator)
            and (found := estimator.core_advice(workload, candidate)) is not None
        ),
        None,
    )
    if advice is None:
        return selection
    fewer = workload.model_copy(
        update={"tasks": advice.fewer // workload.cpus_per_task, "cores": None, "nodes": None}
    )
    alternative = next(
        (
            found
            for found in planned(spec.model_copy(update={"workload": fewer})).ranked
            if found.option.system == option.system and found.option.partition == option.partition
        ),
        None,
    )
    if alternative is None:
        return dataclasses.replace(
            selection, notes=[*selection.notes, f"{advice.note}; no plan with fewer fits"]
        )
    offered = dataclasses.replace(
        alternative,
        notes=(*alternative.notes, f"fewer cores than asked: {advice.note}"),
    )
    return dataclasses.replace(
        selection,
        ranked=[*selection.ranked, offered],
        notes=[
            *selection.notes,
            f"{advice.note}: option {offered.option_id} asks for {advice.fewer}",
        ],
    )
