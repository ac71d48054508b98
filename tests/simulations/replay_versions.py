"""New versions of agents for ``rightsize replay --against`` tests."""

from __future__ import annotations

from collections.abc import Mapping

from agents.optimization import Optimization, OptimizationConfig
from knowledge_base.store import KnowledgeBase
from tools.actuators.base import Executor
from tools.planning.builder import PlanningConfig


class PaddedOptimization(Optimization):
    """Optimization with a bigger walltime safety factor: it must plan differently."""

    def __init__(
        self,
        kb: KnowledgeBase,
        executors: Mapping[str, Executor] | None = None,
        config: OptimizationConfig | None = None,
    ) -> None:
        padded = OptimizationConfig(planning=PlanningConfig(safety_factor=2.0))
        super().__init__(kb, executors, padded)
