"""Estimating generic batch jobs: the center's history when it has learned, else the user.

``HistoryRuntimeEstimator`` puts ``tools.estimators.history.HistoryEstimator`` (XGBoost
quantile regression over the center's finished jobs) behind the planning seam: its median
is the point, its calibrated safe quantile the top of the interval. Until that model has
trained on a system's history it declines, and ``GuessFallbackEstimator`` answers from
the user's own walltime and memory guesses, widened (x0.25-x1.25 for time) and labelled:
a generic job's speed on another machine is not something a guess can tell, so the same
guess stands on every system.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from knowledge_base.catalog import NodeType, Partition, System
from knowledge_base.records import Interval, JobRecord, ResourceEstimate
from knowledge_base.workload import GenericJob
from tools.planning.estimation import Candidate, NoEstimate, Workload

if TYPE_CHECKING:  # imported where used: xgboost is heavy and DNN planning never needs it
    from tools.estimators.history import HistoryConfig, HistoryEstimator

__all__ = [
    "GUESS_ID",
    "GUESS_LABEL",
    "GuessFallbackEstimator",
    "HistoryRuntimeEstimator",
    "large_memory_reason",
    "memory_share_mb",
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
        procs = candidate.nodes * candidate.cores_per_node
        memory_kb_per_proc = (
            asked * 1024 / candidate.cores_per_node
            if (asked := requested_memory_mb(workload, candidate.cores_per_node))
            else None
        )
        from tools.estimators.features import HistoryJob

        prediction = self.history.predict(
            HistoryJob(
                job_id="what-if",
                submit_time_s=self.now_s,
                user=self.user,
                application=workload.application,
                partition=candidate.partition.name,
                procs=procs,
                requested_time_s=float(workload.walltime_s) if workload.walltime_s else None,
                requested_memory_kb_per_proc=memory_kb_per_proc,
            )
        )
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
        return ResourceEstimate(
            option=candidate.option(runtime, memory),
            runtime_s=runtime,
            memory_mb=memory,
            estimator_id=self.estimator_id,
            validation_error=None,
            label=f"history estimator ({prediction.trained_on_jobs} jobs of {self.system})",
        )


def train_history(
    records: Sequence[JobRecord], config: HistoryConfig | None = None
) -> HistoryEstimator | None:
    """A history estimator trained on finished ``records``; None if too few to train."""
    from tools.estimators.features import HistoryJob
    from tools.estimators.history import HistoryEstimator

    estimator = HistoryEstimator(config)
    finished = [r for r in records if r.run_s is not None and r.end_time is not None]
    if len(finished) < estimator.config.first_train_jobs:
        return None
    # Replayed as it happened, so no row's features see jobs that ended after it began.
    estimator.learn_history(HistoryJob.from_job_record(record) for record in finished)
    return estimator if estimator.model is not None else None
