"""The predicted memory of a job that ran out of it: what the Re-scheduler raises from.

After an out-of-memory kill the Re-scheduler (``agents.rescheduler``) asks for the
quantile of the job's predicted peak given that it needed more than it had
(``JobEnd.memory_distribution_mb``), instead of a fixed factor, when a distribution is
known. It comes from the system's history estimator (``tools.estimators.history.estimator``, the
process's one per system: ``tools.planning.service.shared_chain(kb).history``, trained
once and kept until the history grows), asked about the same job the planner asked
about (user, application, partition, processors, the user's requests). The estimator
answers per processor in KB; a plan's memory is per node in MB, so each quantile is
multiplied by the plan's cores per node and divided by 1024, as the planner's
``HistoryRuntimeEstimator`` does for its interval.

Only generic batch jobs: DNN training keeps its white-box estimate. No trained model, no
memory model in it, or a knowledge base that does not answer: None, and the
Re-scheduler raises by its factor as before.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import TYPE_CHECKING, Protocol

from knowledge_base.errors import RightsizeError
from knowledge_base.records import Plan
from knowledge_base.workload import GenericJob

if TYPE_CHECKING:  # imported where used: the history estimator pulls in XGBoost
    from tools.estimators.history.estimator import HistoryPrediction
    from tools.estimators.history.features import HistoryJob

__all__ = ["HistorySource", "MemoryModel", "distribution_mb", "predicted_memory_mb"]

log = logging.getLogger("agents.scheduler")


class MemoryModel(Protocol):
    """What the Scheduler asks of a history estimator (``HistoryEstimator.predict``)."""

    def predict(self, job: HistoryJob) -> HistoryPrediction: ...


HistorySource = Callable[[str], Awaitable[MemoryModel | None]]
"""system name -> its trained history estimator, None until one has trained."""


def distribution_mb(
    prediction: HistoryPrediction, cores_per_node: int
) -> tuple[tuple[float, float], ...] | None:
    """The prediction's peak-memory distribution per node in MB: (P(use <= MB), MB)."""
    found = prediction.memory_distribution_kb_per_proc
    if not found:
        return None
    return tuple((level, kb * cores_per_node / 1024) for level, kb in found)


async def predicted_memory_mb(
    history: HistorySource, plan: Plan, now: datetime
) -> tuple[tuple[float, float], ...] | None:
    """``plan``'s job's predicted peak per node, as ``JobEnd.memory_distribution_mb``
    wants it; None where no history model answers for it."""
    workload, option = plan.spec.workload, plan.option
    if not isinstance(workload, GenericJob) or option is None:
        return None
    try:
        model = await history(option.system)
    except RightsizeError as exc:
        log.warning("plan %s: no memory prediction (history unavailable): %s", plan.id, exc)
        return None
    if model is None:
        return None
    from tools.estimators.history.features import HistoryJob
    from tools.planning.generic import requested_memory_mb

    asked = requested_memory_mb(workload, option.cores_per_node)
    prediction = model.predict(
        HistoryJob(
            job_id=f"{plan.id}-oom",
            submit_time_s=now.timestamp(),
            user=plan.spec.user,
            application=workload.application,
            partition=option.partition,
            procs=option.nodes * option.cores_per_node,
            requested_time_s=float(workload.walltime_s) if workload.walltime_s else None,
            requested_memory_kb_per_proc=asked * 1024 / option.cores_per_node if asked else None,
        )
    )
    return distribution_mb(prediction, option.cores_per_node)
