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
from tools.planning.generic import plan_with_core_advice
from tools.planning.queue import QueueModel
from tools.planning.selector import Selection

__all__ = ["gather_estimators", "plan_workload", "shared_chain"]

# One chain per (knowledge base, configuration): a caller with other thresholds gets a
# chain of its own instead of changing everyone's.
_CHAINS: weakref.WeakKeyDictionary[KnowledgeBase, dict[ChainConfig, EstimatorChain]] = (
    weakref.WeakKeyDictionary()
)


def shared_chain(
    kb: KnowledgeBase,
    *,
    config: ChainConfig | None = None,
    promoted: PromotedLoader | None = None,
) -> EstimatorChain:
    """The process's estimator chain over ``kb`` for ``config`` (None: the defaults),
    made on first use and kept while ``kb`` is open: every front end in the process with
    the same configuration trains each history model once. The configuration of a chain
    never changes after it is made; ``promoted`` fills a chain's missing loader only."""
    config = config or ChainConfig()
    chains = _CHAINS.setdefault(kb, {})
    chain = chains.get(config)
    if chain is None:
        chain = chains[config] = EstimatorChain(kb, config, promoted=promoted)
    elif promoted is not None and chain.promoted_loader is None:
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
    """Every option for ``spec``, policy-checked, priced, ranked by the objective (with
    a fewer-cores alternative where the history says the cores would sit idle)."""
    return plan_with_core_advice(
        spec,
        catalog,
        now=now or datetime.now(UTC),
        objective=objective,
        queue=queue,
        rates=rates,
        estimators=estimators,
    )
