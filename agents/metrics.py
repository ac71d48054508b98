"""Prometheus metrics of one Rightsize process: what its agents did and the center's state.

Each process (``rightsize center run``, the MCP HTTP server) owns one ``CenterMetrics``
with its own ``CollectorRegistry``, never the global default: tests build as many as
they like, and nothing registers twice.

Two kinds of figures:

- **counted as it happens.** ``AgentRunner(observe=metrics.observe)`` reports how each
  consumed event ended: events consumed, published and dead-lettered per agent and
  type, and the handling latency. The events an agent emits say what it decided:
  resubmissions and their reasons and cascade segments (``schedule.decision``), plans
  finished (``plan.finished``), estimators' live and validation error and drift
  (``estimator.decision``), promotions (``estimator.promoted``). An event is emitted by
  one agent once, so in a center of one process per agent each figure comes from the one
  process that decides it and Prometheus sums them without double counting.
- **read at scrape time** (``await metrics.refresh(kb, runners, bus)``): the runners'
  health and consumer lag, plans by state, jobs by state and partition (counted by the
  knowledge base, never by loading every plan), estimators by status, and whether the
  broker answers (``Bus.probe``, one metadata round trip). Each part is bounded by
  ``timeout_s``: a knowledge base or broker that does not answer in time is reported
  down (``rightsize_up{part=...} 0``) and the scrape answers anyway with the last
  values it has and their age. A query that outlives a scrape is not started again by
  the next one: the next scrape waits on the same query.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter as Tally
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from agents.bus.base import Bus
from agents.events import EstimatorDecision, EstimatorPromoted, PlanFinished, ScheduleDecision
from agents.runtime import AgentRunner, Handled
from knowledge_base.records import PlanStatus
from knowledge_base.store import KnowledgeBase

__all__ = [
    "CONTENT_TYPE",
    "METRICS",
    "RESUBMIT_ACTIONS",
    "WHAT_IF_EVENTS",
    "CenterMetrics",
    "MetricSpec",
    "plan_counts",
]

log = logging.getLogger(__name__)

CONTENT_TYPE = CONTENT_TYPE_LATEST

RESUBMIT_ACTIONS = frozenset({"more_memory", "longer_walltime", "resubmit"})
"""``schedule.decision`` actions that submit a job again in place of one that failed or
diverged; the action is the reason label (free-text reasons would explode the series)."""

WHAT_IF_EVENTS = frozenset({"plan.build_requested", "plan.replan_requested"})
"""Events whose handling is a what-if analysis (Optimization: every option, ranked)."""

_LATENCY_BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)
_WHAT_IF_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)


def plan_counts(by_status: Mapping[PlanStatus, int]) -> dict[str, int]:
    """Plans by state, every state present (0 where none), so each series always exists."""
    return {str(state): by_status.get(state, 0) for state in PlanStatus}


@dataclass(frozen=True)
class MetricSpec:
    """One metric of ``CenterMetrics``: the attribute it is reached by, and its shape."""

    attribute: str
    name: str
    help: str
    labels: tuple[str, ...] = ()
    kind: type[Counter] | type[Gauge] | type[Histogram] = Counter
    buckets: tuple[float, ...] | None = None


# Counters are named without ``_total``: prometheus_client adds it (and ``_created``).
METRICS: tuple[MetricSpec, ...] = (
    # -- counted as it happens --
    MetricSpec(
        "consumed",
        "rightsize_events_consumed",
        "Events an agent consumed, by how they ended (handled, failed, malformed)",
        ("agent", "type", "outcome"),
    ),
    MetricSpec(
        "published",
        "rightsize_events_published",
        "Events an agent emitted (stored in its outbox, published in order)",
        ("agent", "type"),
    ),
    MetricSpec(
        "dead_lettered",
        "rightsize_events_dead_lettered",
        "Events sent to the dead-letter topic, by agent, event type and error class",
        ("agent", "type", "error_type"),
    ),
    MetricSpec(
        "handling",
        "rightsize_event_handling_seconds",
        "Sense, decide and act of one event, retries included",
        ("agent", "type"),
        Histogram,
        _LATENCY_BUCKETS_S,
    ),
    MetricSpec(
        "resubmissions",
        "rightsize_resubmissions",
        "Jobs submitted again by the Re-scheduler, by reason (its action)",
        ("reason",),
    ),
    MetricSpec(
        "cascade_segments",
        "rightsize_cascade_segments",
        "Next segments of checkpointed cascades submitted",
    ),
    MetricSpec(
        "plans_finished", "rightsize_plans_finished", "Plans that ended, by status", ("status",)
    ),
    MetricSpec(
        "live_error",
        "rightsize_estimator_live_error",
        "An estimator's error on finished jobs, at Model Promotion's last look",
        ("target", "metric"),
        Gauge,
    ),
    MetricSpec(
        "validation_error",
        "rightsize_estimator_validation_error",
        "The served estimator's held-out error at training time",
        ("target", "metric"),
        Gauge,
    ),
    MetricSpec(
        "estimator_decisions",
        "rightsize_estimator_decisions",
        "Model Promotion's decisions (no_drift, drift, promoted, rejected, skipped)",
        ("target", "decision"),
    ),
    MetricSpec(
        "drift",
        "rightsize_estimator_drift",
        "Times Model Promotion found an estimator's live error past its bound",
        ("target",),
    ),
    MetricSpec("promotions", "rightsize_promotions", "Estimators promoted, by target", ("target",)),
    MetricSpec(
        "what_if",
        "rightsize_what_if_seconds",
        "What-if analyses (every option, ranked), end to end; caller: mcp or the agent",
        ("caller",),
        Histogram,
        _WHAT_IF_BUCKETS_S,
    ),
    MetricSpec(
        "tool_seconds",
        "rightsize_mcp_tool_seconds",
        "MCP tool calls, end to end, by tool and outcome (ok, error)",
        ("tool", "outcome"),
        Histogram,
        _WHAT_IF_BUCKETS_S,
    ),
    # -- read at scrape time --
    MetricSpec(
        "agent_up", "rightsize_agent_up", "1 while the agent's runner consumes", ("agent",), Gauge
    ),
    MetricSpec(
        "consumer_lag",
        "rightsize_consumer_lag",
        "Messages not yet committed by the agent's group, all partitions",
        ("agent",),
        Gauge,
    ),
    MetricSpec("plans", "rightsize_plans", "Plans by state", ("state",), Gauge),
    MetricSpec(
        "jobs",
        "rightsize_jobs",
        "Rightsize's jobs by state and partition",
        ("state", "partition"),
        Gauge,
    ),
    MetricSpec(
        "estimators",
        "rightsize_estimators",
        "Registered estimators",
        ("target", "status"),
        Gauge,
    ),
    MetricSpec(
        "up",
        "rightsize_up",
        "1 when the part (knowledge_base, bus) answered the last scrape in time",
        ("part",),
        Gauge,
    ),
    MetricSpec(
        "refreshed",
        "rightsize_last_refresh_timestamp_seconds",
        "When the part last answered (the age of the figures read from it)",
        ("part",),
        Gauge,
    ),
)
"""Every metric a process exposes; docs/prometheus.yml and docs/grafana-dashboard.json
name them (tests/agents/test_metrics.py checks that what they name exists)."""


def _build(spec: MetricSpec, registry: CollectorRegistry) -> Counter | Gauge | Histogram:
    if spec.kind is Histogram:
        buckets = spec.buckets or Histogram.DEFAULT_BUCKETS
        return Histogram(spec.name, spec.help, spec.labels, buckets=buckets, registry=registry)
    return spec.kind(spec.name, spec.help, spec.labels, registry=registry)


class CenterMetrics:
    """The metrics of one process, in their own registry (one attribute per ``METRICS`` row)."""

    consumed: Counter
    published: Counter
    dead_lettered: Counter
    handling: Histogram
    resubmissions: Counter
    cascade_segments: Counter
    plans_finished: Counter
    live_error: Gauge
    validation_error: Gauge
    estimator_decisions: Counter
    drift: Counter
    promotions: Counter
    what_if: Histogram
    tool_seconds: Histogram
    agent_up: Gauge
    consumer_lag: Gauge
    plans: Gauge
    jobs: Gauge
    estimators: Gauge
    up: Gauge
    refreshed: Gauge

    def __init__(self, *, timeout_s: float = 2.0, registry: CollectorRegistry | None = None):
        self.registry = registry or CollectorRegistry()
        self.timeout_s = timeout_s
        for spec in METRICS:
            setattr(self, spec.attribute, _build(spec, self.registry))
        self._inflight: dict[str, asyncio.Task[None]] = {}

    # -- counted as it happens -------------------------------------------------------------

    def observe(self, handled: Handled) -> None:
        """``AgentRunner``'s observer: one consumed record and what it led to."""
        agent, kind = handled.agent, handled.event_type
        self.consumed.labels(agent, kind, handled.outcome).inc()
        if handled.outcome == "handled":
            self.handling.labels(agent, kind).observe(handled.seconds)
            if kind in WHAT_IF_EVENTS:
                self.what_if.labels(agent).observe(handled.seconds)
        else:
            self.dead_lettered.labels(agent, kind, handled.error_type or "unknown").inc()
        for payload in handled.emitted:
            self.published.labels(agent, payload.event_type).inc()
            self._decided(payload)

    def _decided(self, payload: Any) -> None:
        if isinstance(payload, ScheduleDecision):
            if payload.action in RESUBMIT_ACTIONS:
                self.resubmissions.labels(payload.action).inc()
            elif payload.action == "next_segment":
                self.cascade_segments.inc()
        elif isinstance(payload, PlanFinished):
            self.plans_finished.labels(str(payload.status)).inc()
        elif isinstance(payload, EstimatorDecision):
            self.estimator_decisions.labels(payload.target, payload.decision).inc()
            if payload.decision == "drift":
                self.drift.labels(payload.target).inc()
            if payload.live_error is not None:
                self.live_error.labels(payload.target, payload.metric).set(payload.live_error)
            if payload.validation_error is not None:
                self.validation_error.labels(payload.target, payload.metric).set(
                    payload.validation_error
                )
        elif isinstance(payload, EstimatorPromoted):
            self.promotions.labels(payload.target).inc()

    @contextlib.contextmanager
    def timing_tool(self, tool: str) -> Iterator[None]:
        """Time one MCP tool call (what_if also into the what-if histogram)."""
        started = time.perf_counter()
        outcome = "error"
        try:
            yield
            outcome = "ok"
        finally:
            seconds = time.perf_counter() - started
            self.tool_seconds.labels(tool, outcome).observe(seconds)
            if tool == "what_if":
                self.what_if.labels("mcp").observe(seconds)

    # -- read at scrape time -----------------------------------------------------------------

    async def refresh(
        self,
        kb: KnowledgeBase | None,
        runners: Sequence[AgentRunner] = (),
        bus: Bus | None = None,
    ) -> dict[str, bool]:
        """Read what scrapes show; returns which parts answered within ``timeout_s``."""
        for runner in runners:
            health = runner.health()
            self.agent_up.labels(runner.name).set(1 if health.running else 0)
            if health.consumer_lag is not None:
                self.consumer_lag.labels(runner.name).set(health.consumer_lag)
        parts: dict[str, Callable[[], Awaitable[None]]] = {}
        if kb is not None:
            parts["knowledge_base"] = lambda: self._read_kb(kb)
        if bus is not None:
            parts["bus"] = bus.probe
        names = list(parts)
        answered = await asyncio.gather(*(self._bounded(n, parts[n]) for n in names))
        return dict(zip(names, answered, strict=True))

    async def _bounded(self, part: str, read: Callable[[], Awaitable[None]]) -> bool:
        task = self._inflight.get(part)
        if task is None or task.done():
            task = asyncio.ensure_future(read())
            self._inflight[part] = task
        done, _ = await asyncio.wait({task}, timeout=self.timeout_s)
        ok = False
        if done:
            error = task.exception()
            if error is None:
                ok = True
            else:
                log.warning("metrics: %s did not answer: %s", part, error)
        self.up.labels(part).set(1 if ok else 0)
        if ok:
            self.refreshed.labels(part).set(time.time())
        return ok

    async def _read_kb(self, kb: KnowledgeBase) -> None:
        by_status = await kb.count_plans()
        jobs = await kb.count_plan_jobs()
        estimators = await kb.list_estimators()
        for state, count in plan_counts(by_status).items():
            self.plans.labels(state).set(count)
        self.jobs.clear()
        for (state, partition), count in jobs.items():
            self.jobs.labels(state, partition).set(count)
        self.estimators.clear()
        tally = Tally((e.target, str(e.status)) for e in estimators)
        for (target, status), count in tally.items():
            self.estimators.labels(target, status).set(count)

    def exposition(self) -> bytes:
        """The registry in Prometheus' text format."""
        return generate_latest(self.registry)
