"""The planning entry points every front end shares: the CLI, the MCP server, the agents.

``gather_estimators`` asks the process's one estimator chain (``shared_chain``: profiles,
the promoted estimator where a loader was given, the per-hardware estimators, history
estimators for generic jobs, then the fallbacks) for a workload's estimators;
``plan_workload`` runs the whole pipeline on them. Front ends add only their own input
and output.
"""

from __future__ import annotations

import weakref
from datetime import UTC, datetime

from knowledge_base.catalog import Catalog
from knowledge_base.store import KnowledgeBase
from knowledge_base.workload import Objective, WorkloadSpec
from tools.planning.chain import ChainConfig, EstimatorChain, PromotedLoader
from tools.planning.cost import DollarRates
from tools.planning.estimation import Estimator
from tools.planning.queue import QueueModel
from tools.planning.selector import Selection, plan

__all__ = ["gather_estimators", "plan_workload", "shared_chain"]

_CHAINS: weakref.WeakKeyDictionary[KnowledgeBase, EstimatorChain] = weakref.WeakKeyDictionary()


def shared_chain(
    kb: KnowledgeBase,
    *,
    config: ChainConfig | None = None,
    promoted: PromotedLoader | None = None,
) -> EstimatorChain:
    """The process's estimator chain over ``kb``, made on first use and kept while ``kb``
    is open: every front end in the process trains each history model once. A later
    caller's ``config`` replaces the thresholds; its ``promoted`` loader fills a missing one.
    """
    chain = _CHAINS.get(kb)
    if chain is None:
        chain = _CHAINS[kb] = EstimatorChain(kb, config, promoted=promoted)
        return chain
    if config is not None:
        chain.config = config
    if promoted is not None and chain.promoted_loader is None:
        chain.promoted_loader = promoted
    return chain


async def gather_estimators(
    kb: KnowledgeBase,
    spec: WorkloadSpec,
    catalog: Catalog,
    *,
    now: datetime | None = None,
    chain: EstimatorChain | None = None,
) -> list[Estimator]:
    """The estimator chain for ``spec``, best first; the fallbacks always come last."""
    return await (chain or shared_chain(kb)).estimators(spec, catalog, now)


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
