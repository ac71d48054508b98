"""The planning entry points every front end shares: the CLI, the MCP server, the agents.

``gather_estimators`` turns a workload and the knowledge base into the estimator chain
(history-trained estimators for generic jobs where the center has history, the DNN
estimators, then the fallbacks); ``plan_workload`` runs the whole pipeline on it.
Front ends add only their own input and output.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

from knowledge_base.catalog import Catalog
from knowledge_base.store import JobQuery, KnowledgeBase
from knowledge_base.workload import GenericJob, Objective, WorkloadSpec
from tools.estimators.dnn.adapter import planner_estimators
from tools.planning.cost import DollarRates
from tools.planning.estimation import Estimator
from tools.planning.generic import HistoryRuntimeEstimator, train_history
from tools.planning.queue import QueueModel
from tools.planning.selector import Selection, plan
from tools.planning.whatif import default_estimators

__all__ = ["HISTORY_JOBS", "gather_estimators", "plan_workload"]

HISTORY_JOBS = 50_000  # finished jobs per system the history estimator trains on


async def gather_estimators(
    kb: KnowledgeBase, spec: WorkloadSpec, catalog: Catalog, *, history_jobs: int = HISTORY_JOBS
) -> list[Estimator]:
    """The estimator chain for ``spec``, best first; the fallbacks always come last."""
    estimators: list[Estimator] = []
    if isinstance(spec.workload, GenericJob):
        now_s = datetime.now(UTC).timestamp()
        for name in spec.goals.systems or catalog.names():
            records = await kb.query_jobs(JobQuery(system=name, limit=history_jobs))
            trained = await asyncio.to_thread(train_history, records)
            if trained is not None:
                estimators.append(
                    HistoryRuntimeEstimator(name, trained, user=spec.user, now_s=now_s)
                )
    return [*estimators, *planner_estimators(spec), *default_estimators(spec)]


def plan_workload(
    spec: WorkloadSpec,
    catalog: Catalog,
    estimators: list[Estimator],
    *,
    objective: Objective | None = None,
    queue: QueueModel | None = None,
    rates: DollarRates | None = None,
    now: datetime | None = None,
) -> Selection:
    """Every option for ``spec``, policy-checked, priced, ranked by the objective."""
    return plan(
        spec,
        catalog,
        now=now or datetime.now(UTC),
        objective=objective,
        queue=queue,
        rates=rates,
        estimators=estimators,
    )
