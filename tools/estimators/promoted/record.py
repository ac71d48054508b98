"""What the registry promoted for one target, read and loaded once per promotion.

Model Promotion promotes estimators in the knowledge base's registry; a process serving
requests (the planner's chain, the agents, the MCP server, ``rightsize estimate``) must
serve the promoted one without reading the registry on every request. ``PromotedRecord``
is that rule, for any target: it reads the promoted record on first use, then only when
told another was promoted (``invalidate``: the Resource Estimation agent hears
``estimator.promoted`` on the bus) or once ``recheck_s`` has passed since its last read
(a process that does not hear the bus, such as a second CLI or an MCP server beside the
agents). A read that finds the same record id keeps what was loaded, or what refused to
load (said once, in ``problem`` and the log), so N requests cost O(1) registry reads and
one artifact load per promotion. ``invalidate`` also drops what was loaded: a promotion
event for the same id (an artifact written again) loads it afresh.

Its users: the promoted runtime estimator (``tools.planning.chain``) and the promoted
per-GPU correction (``tools.estimators.gpu.promoted``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Generic, TypeVar

from knowledge_base.errors import InvalidInputError
from knowledge_base.records import EstimatorRecord
from knowledge_base.store import KnowledgeBase

__all__ = ["RECHECK_S", "PromotedRecord"]

log = logging.getLogger(__name__)

RECHECK_S = 60.0
"""Longest a process serves a promoted estimator without looking at the registry again."""

T = TypeVar("T")


def _plain(record: EstimatorRecord, exc: Exception) -> str:
    return str(exc)


class PromotedRecord(Generic[T]):
    """The loaded promoted estimator of one registry ``target`` (see the module).

    ``load`` turns the record into what serves; it raises OSError or ValueError when it
    cannot (``describe`` words the refusal from the record and the exception).
    """

    def __init__(
        self,
        target: str,
        load: Callable[[EstimatorRecord], T],
        *,
        describe: Callable[[EstimatorRecord, Exception], str] = _plain,
        recheck_s: float = RECHECK_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if recheck_s < 0:
            raise InvalidInputError("must not be negative", field="recheck_s", value=recheck_s)
        self.target = target
        self.recheck_s = recheck_s
        self._load = load
        self._describe = describe
        self.clock = clock  # the recheck's (tests set their own)
        self._read_at: float | None = None  # None: read on the next request
        self.record_id: str | None = None  # the promoted id last read
        self._loaded: T | None = None
        self.problem: str | None = None  # why the promoted one is not serving
        self.registry_reads = 0
        self.loads = 0

    def invalidate(self) -> None:
        """Another estimator may have been promoted: read the registry and load on next use."""
        self._read_at = None
        self.record_id = None
        self._loaded = None
        self.problem = None

    async def current(self, kb: KnowledgeBase) -> T | None:
        """What serves (None: nothing promoted, or it cannot load); reads when due."""
        now = self.clock()
        if self._read_at is not None and now - self._read_at < self.recheck_s:
            return self._loaded
        self._read_at = now
        self.registry_reads += 1
        record = await kb.promoted_estimator(self.target)
        if record is not None and record.id == self.record_id:
            return self._loaded  # the same promotion: keep what was loaded (or refused)
        loaded: T | None = None
        problem: str | None = None
        if record is not None:
            self.loads += 1
            try:
                loaded = self._load(record)
            except (OSError, ValueError) as exc:
                problem = self._describe(record, exc)
                log.warning("promoted %s %s not served: %s", self.target, record.id, problem)
        self.record_id = record.id if record is not None else None
        self._loaded = loaded
        self.problem = problem
        return loaded
