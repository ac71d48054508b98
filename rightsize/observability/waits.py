"""When a pending job is predicted to start, p50 with its p10-p90 interval (docs/waits.md).

Two answers, the cheaper where the better one cannot be had:

- **learned** (``WaitBoard``, the status page beside a running center, which holds the
  executors): the system's queue now (``executor.cluster_state()``: squeue and sinfo on
  SLURM) and the learned wait predictor (``tools.waits.predictor.WaitPredictor``) over
  the knowledge base's finished jobs of that system. Cheap on refresh: the queue is read
  at most every ``refresh_s`` per system (the page refreshes every second, the answer is
  reused in between); the predictor is kept per system and rebuilt only when the
  system's history has grown by 10% (``tools.waits.learned.PredictorCache``, as for the
  planner's learned waits), and it trains its model once per
  ``WaitConfig.retrain_s`` window (a week) itself. Fewer than 300 recorded waits: the
  predictor's simulation answers with its fixed factor-3 band (its basis says so).
- **the rule** (``rule_start``: ``rightsize status``, and wherever no executor answers):
  the plan's own wait (``Plan.expected_wait_s``, the planner's fixed rule when the plan
  was made), counted from when the plan was made, with the band the rule's error on
  recorded waits gives (``tools.waits.rule.rule_interval``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict

from knowledge_base.errors import RightsizeError
from knowledge_base.records import Plan
from knowledge_base.store import KnowledgeBase
from tools.actuators.base import Executor

if TYPE_CHECKING:  # imported where used: the predictor pulls in XGBoost
    from tools.waits.learned import PredictorCache

__all__ = ["PendingStart", "WaitBoard", "rule_start"]

log = logging.getLogger(__name__)

RULE_BASIS = (
    "the planner's rule when the plan was made; p10-p90 from the rule's error on recorded waits"
)


class PendingStart(BaseModel):
    """A pending job's predicted start (p50) and its p10-p90 interval, and why."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    start: datetime
    p10: datetime
    p90: datetime
    basis: str

    def describe(self, now: datetime) -> str:
        """E.g. ``in 2.5 h (0.5-9.0 h)``, from ``now``."""

        def hours(at: datetime) -> float:
            return max((at - now).total_seconds(), 0.0) / 3600

        return f"in {hours(self.start):.1f} h ({hours(self.p10):.1f}-{hours(self.p90):.1f} h)"


def rule_start(plan: Plan) -> PendingStart | None:
    """The plan's own wait with the rule's measured band; None when it has none."""
    from tools.waits.rule import rule_interval

    if plan.expected_wait_s is None:
        return None
    wait = float(plan.expected_wait_s)
    low, high = rule_interval(wait)
    base = plan.created_at
    return PendingStart(
        start=base + timedelta(seconds=wait),
        p10=base + timedelta(seconds=low),
        p90=base + timedelta(seconds=high),
        basis=RULE_BASIS,
    )


def _predictor_cache() -> PredictorCache:
    from tools.waits.learned import PredictorCache

    return PredictorCache()


@dataclass
class WaitBoard:
    """Learned starts of every pending job, per system, kept between refreshes."""

    kb: KnowledgeBase
    executors: Mapping[str, Executor]
    refresh_s: float = 60.0
    predictors: PredictorCache = field(default_factory=lambda: _predictor_cache())
    _starts: dict[str, tuple[float, dict[str, PendingStart]]] = field(
        default_factory=dict, repr=False
    )
    _locks: dict[str, asyncio.Lock] = field(default_factory=dict, repr=False)
    predictions_made: int = 0  # queue reads + predictions so far (what the cache saves)

    async def starts(self, system: str) -> dict[str, PendingStart]:
        """job id -> its predicted start, for every job pending on ``system`` now; {}
        where the system has no executor here or its batch system does not answer."""
        executor = self.executors.get(system)
        if executor is None:
            return {}
        lock = self._locks.setdefault(system, asyncio.Lock())
        async with lock:  # many pages at once read the queue once
            kept = self._starts.get(system)
            if kept is not None and time.monotonic() - kept[0] < self.refresh_s:
                return kept[1]
            try:
                found = await self._predict(system, executor)
            except RightsizeError as exc:
                log.warning("waits on %s: the queue could not be read: %s", system, exc)
                found = kept[1] if kept is not None else {}
            self._starts[system] = (time.monotonic(), found)
            return found

    async def _predict(self, system: str, executor: Executor) -> dict[str, PendingStart]:
        from tools.waits.live import snapshot_from_cluster

        snapshot = snapshot_from_cluster(await executor.cluster_state())
        if not snapshot.pending:
            return {}
        predictor = await self.predictors.predictor(
            self.kb, system, snapshot.total_procs, executor.now()
        )
        result = await asyncio.to_thread(predictor.predict, snapshot)
        self.predictions_made += 1

        def at(seconds: float) -> datetime:
            return datetime.fromtimestamp(seconds, UTC)

        return {
            row.job_id: PendingStart(
                start=at(row.start_s), p10=at(row.p10_s), p90=at(row.p90_s), basis=result.basis
            )
            for row in result.predictions
        }
