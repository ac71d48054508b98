"""What every part of the Scheduler shares: its knowledge base, executors, monitors and
configuration, and the look-ups every part makes (the plan, its partition's limits, its
executor)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from datetime import datetime

from agents.monitor import JobMonitor
from agents.rescheduler import Limits
from agents.runtime import Emit
from agents.scheduling.actions import Conclude
from agents.scheduling.config import SchedulerConfig
from agents.scheduling.memory import HistorySource
from knowledge_base.errors import NotFoundError
from knowledge_base.records import Plan
from knowledge_base.store import KnowledgeBase
from tools.actuators.base import Executor

__all__ = ["SchedulerParts"]


class SchedulerParts(ABC):
    """The state the Scheduler's parts (sensing, submission, re-scheduling) share, and the
    calls one part makes on another (abstract here, each defined by the part named)."""

    name: str
    kb: KnowledgeBase
    executors: dict[str, Executor]
    config: SchedulerConfig
    monitors: dict[str, JobMonitor]
    history: HistorySource  # system -> its history estimator (memory after an OOM)
    # job -> (first progress fraction seen, when): the base of its pace
    _first_seen: dict[str, tuple[float, datetime]]

    async def _plan(self, plan_id: str) -> Plan | None:
        try:
            return await self.kb.get_plan(plan_id)
        except NotFoundError:
            return None

    async def _limits(self, plan: Plan) -> Limits | None:
        option = plan.option
        if option is None:
            return None
        try:
            system = await self.kb.get_system(option.system)
            partition = system.partition(option.partition)
        except NotFoundError:
            return None
        node = system.node_type_of(partition)
        memory = partition.max_memory_mb
        if node is not None and (node.usable_memory_mb or node.memory_mb):
            memory = min(memory, node.usable_memory_mb or node.memory_mb or memory)
        return Limits(
            where=f"{system.name}/{partition.name}",
            max_memory_mb=max(1, memory),
            max_walltime_s=max(60, partition.max_minutes * 60),
        )

    def _executor(self, plan: Plan) -> Executor | None:
        return self.executors.get(plan.option.system) if plan.option else None

    def _watch(self, plan: Plan, job_id: str) -> None:
        assert plan.option is not None
        monitor = self.monitors.get(plan.option.system)
        if monitor is not None:
            monitor.watch(job_id, plan.id)

    @abstractmethod
    async def order_queue(self, system: str) -> object:
        """One rightsize-order round on ``system`` (``queue_order.QueueOrdering``)."""

    @abstractmethod
    async def extension_blocked(self, system: str, job_id: str, new_limit_s: int) -> str | None:
        """Why an extension would delay a starved job (``queue_order.QueueOrdering``)."""

    @abstractmethod
    async def _conclude(self, action: Conclude) -> list[Emit]:
        """End the plan (``rescheduling.Rescheduling`` does it)."""
