"""Prometheus metrics: what the runner's observer counts, and scrape-time reads that never hang."""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from agents.bus.base import Message
from agents.bus.kafka import KafkaBus
from agents.bus.memory import InMemoryBus
from agents.events import (
    EstimatorDecision,
    EstimatorPromoted,
    PlanFinished,
    ScheduleDecision,
)
from agents.metrics import METRICS, CenterMetrics, plan_counts
from agents.runtime import AgentRunner, Handled
from knowledge_base.errors import InvalidInputError
from knowledge_base.records import CascadeSegment, Plan, PlanStatus
from knowledge_base.sqlite import SQLiteKnowledgeBase
from knowledge_base.store import KnowledgeBase
from tests.agents.conftest import TansuBroker, kafka_settings, unique, wait_for
from tests.agents.harness import NoPlanListing, generic_spec, make_plan
from tests.agents.test_runtime import FAST, IN, Echo, ping


@pytest.fixture
async def sqlite_kb(tmp_path: Path) -> AsyncIterator[KnowledgeBase]:
    async with SQLiteKnowledgeBase(tmp_path / "kb.db") as store:
        yield store


@pytest.fixture
async def memory_bus() -> AsyncIterator[InMemoryBus]:
    async with InMemoryBus() as bus:
        yield bus


def samples(metrics: CenterMetrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of the exposition, parsed back as Prometheus would read it."""
    found: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for family in text_string_to_metric_families(metrics.exposition().decode()):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


def value(metrics: CenterMetrics, name: str, **labels: str) -> float | None:
    return samples(metrics).get((name, tuple(sorted(labels.items()))))


async def test_the_observer_counts_consumed_published_failed_and_malformed_events_per_agent(
    memory_bus: InMemoryBus, sqlite_kb: KnowledgeBase
) -> None:
    metrics = CenterMetrics()
    agent = Echo()
    agent.raise_for[1] = [InvalidInputError("bad seq", field="seq", value=1)]
    await memory_bus.publish_many([Message.of(IN, ping(i)) for i in range(3)])
    await memory_bus.publish(IN, b"not an event", key="k")
    async with AgentRunner(agent, memory_bus, sqlite_kb, FAST, observe=metrics.observe) as runner:
        await wait_for(
            lambda: runner.health().events_dead_lettered == 2, timeout_s=10, what="dead letters"
        )

    ping_type = "diagnostic.ping"
    assert (
        value(
            metrics,
            "rightsize_events_consumed_total",
            agent="echo",
            type=ping_type,
            outcome="handled",
        )
        == 2
    )
    assert (
        value(
            metrics,
            "rightsize_events_consumed_total",
            agent="echo",
            type=ping_type,
            outcome="failed",
        )
        == 1
    )
    assert (
        value(metrics, "rightsize_events_published_total", agent="echo", type="diagnostic.pong")
        == 2
    )
    assert (
        value(
            metrics,
            "rightsize_events_dead_lettered_total",
            agent="echo",
            type=ping_type,
            error_type="InvalidInputError",
        )
        == 1
    )
    assert (
        value(
            metrics,
            "rightsize_events_dead_lettered_total",
            agent="echo",
            type="malformed",
            error_type="MalformedEventError",
        )
        == 1
    )
    assert (
        value(metrics, "rightsize_event_handling_seconds_count", agent="echo", type=ping_type) == 2
    )


async def test_an_observer_that_raises_does_not_stop_the_agent(
    memory_bus: InMemoryBus, sqlite_kb: KnowledgeBase
) -> None:
    def broken(_: Handled) -> None:
        raise RuntimeError("observer bug")

    await memory_bus.publish_many([Message.of(IN, ping(i)) for i in range(2)])
    async with AgentRunner(Echo(), memory_bus, sqlite_kb, FAST, observe=broken) as runner:
        await wait_for(lambda: runner.health().events_handled == 2, timeout_s=10, what="both")
    assert runner.health().events_failed == 0


def test_what_agents_emit_counts_resubmissions_segments_drift_and_promotions() -> None:
    metrics = CenterMetrics()
    emitted = (
        ScheduleDecision(plan_id="p", action="more_memory", reason="OOM at 2048 MB"),
        ScheduleDecision(plan_id="p", action="more_memory", reason="OOM at 4096 MB"),
        ScheduleDecision(plan_id="p", action="longer_walltime", reason="timeout"),
        ScheduleDecision(plan_id="p", action="next_segment", reason="segment 1 of 3"),
        ScheduleDecision(plan_id="p", action="submit", reason="first"),
        PlanFinished(plan_id="p", status=PlanStatus.FAILED, reason="gave up"),
        EstimatorDecision(
            target="runtime_s",
            decision="drift",
            reason="live error 0.9 over bound",
            live_error=0.9,
            validation_error=0.3,
            metric="log",
        ),
        EstimatorPromoted(estimator_id="e2", target="runtime_s", replaced="e1"),
    )
    metrics.observe(Handled("scheduler", "job.finished", "handled", 0.01, emitted))

    assert value(metrics, "rightsize_resubmissions_total", reason="more_memory") == 2
    assert value(metrics, "rightsize_resubmissions_total", reason="longer_walltime") == 1
    assert value(metrics, "rightsize_resubmissions_total", reason="submit") is None
    assert value(metrics, "rightsize_cascade_segments_total") == 1
    assert value(metrics, "rightsize_plans_finished_total", status="failed") == 1
    assert value(metrics, "rightsize_estimator_live_error", target="runtime_s", metric="log") == 0.9
    assert (
        value(metrics, "rightsize_estimator_validation_error", target="runtime_s", metric="log")
        == 0.3
    )
    assert value(metrics, "rightsize_estimator_drift_total", target="runtime_s") == 1
    assert value(metrics, "rightsize_promotions_total", target="runtime_s") == 1


def test_optimizations_planning_is_timed_as_a_what_if() -> None:
    metrics = CenterMetrics()
    metrics.observe(Handled("optimization", "plan.build_requested", "handled", 0.3))
    metrics.observe(Handled("optimization", "plan.replan_requested", "handled", 0.2))
    metrics.observe(Handled("optimization", "plan.build_requested", "failed", 0.1, (), "E"))
    assert value(metrics, "rightsize_what_if_seconds_count", caller="optimization") == 2
    assert value(metrics, "rightsize_what_if_seconds_sum", caller="optimization") == 0.5


def test_two_processes_metrics_do_not_share_a_registry() -> None:
    first, second = CenterMetrics(), CenterMetrics()
    first.observe(Handled("a", "t", "handled", 0.1))
    assert (
        value(first, "rightsize_events_consumed_total", agent="a", type="t", outcome="handled") == 1
    )
    assert (
        value(second, "rightsize_events_consumed_total", agent="a", type="t", outcome="handled")
        is None
    )


def _plans() -> list[Plan]:
    running = make_plan("p1", generic_spec(), partition="normal", segments=3)
    running = running.model_copy(
        update={
            "status": PlanStatus.RUNNING,
            "segments": [
                CascadeSegment(index=0, walltime_s=60, job_id="1", state="completed"),
                CascadeSegment(index=1, walltime_s=60, job_id="2", state="running"),
                CascadeSegment(index=2, walltime_s=60),
            ],
        }
    )
    failed = make_plan("p2", generic_spec(), partition="debug").model_copy(
        update={
            "status": PlanStatus.FAILED,
            "segments": [CascadeSegment(index=0, walltime_s=60, job_id="3", state="out_of_memory")],
        }
    )
    return [running, failed]


def test_every_plan_state_has_a_count_zero_where_none() -> None:
    counts = plan_counts({PlanStatus.RUNNING: 1, PlanStatus.FAILED: 2})
    assert counts["running"] == 1 and counts["failed"] == 2 and counts["draft"] == 0
    assert set(counts) == {str(s) for s in PlanStatus}


async def test_a_scrape_reads_plans_and_jobs_from_the_knowledge_base(
    sqlite_kb: KnowledgeBase,
) -> None:
    for plan in _plans():
        await sqlite_kb.put_plan(plan)
    metrics = CenterMetrics()
    assert await metrics.refresh(sqlite_kb) == {"knowledge_base": True}
    assert value(metrics, "rightsize_plans", state="running") == 1
    assert value(metrics, "rightsize_plans", state="failed") == 1
    assert value(metrics, "rightsize_plans", state="draft") == 0
    assert value(metrics, "rightsize_jobs", state="completed", partition="normal") == 1
    assert value(metrics, "rightsize_jobs", state="running", partition="normal") == 1
    assert value(metrics, "rightsize_jobs", state="out_of_memory", partition="debug") == 1
    assert value(metrics, "rightsize_up", part="knowledge_base") == 1


async def test_a_scrape_counts_in_the_knowledge_base_without_loading_every_plan(
    tmp_path: Path,
) -> None:
    async with NoPlanListing(tmp_path / "kb.db") as kb:
        for plan in _plans():
            await kb.put_plan(plan)
        metrics = CenterMetrics()
        assert await metrics.refresh(kb) == {"knowledge_base": True}
    assert value(metrics, "rightsize_jobs", state="running", partition="normal") == 1


class HangingKB:
    """A knowledge base whose reads never answer (a database or broker outage).

    A stand-in: an outage cannot be switched on and off inside a real SQLite file.
    """

    def __init__(self) -> None:
        self.calls = 0

    async def count_plans(self) -> dict[PlanStatus, int]:
        self.calls += 1
        await asyncio.Event().wait()
        raise AssertionError("unreachable")


async def test_a_scrape_during_an_outage_answers_in_time_with_the_outage_visible() -> None:
    metrics = CenterMetrics(timeout_s=0.2)
    kb = HangingKB()
    for _ in range(2):
        started = time.monotonic()
        answered = await metrics.refresh(kb)  # type: ignore[arg-type]
        assert time.monotonic() - started < 2
        assert answered == {"knowledge_base": False}
    assert value(metrics, "rightsize_up", part="knowledge_base") == 0
    assert kb.calls == 1  # the second scrape waited on the same query, not a new one
    for task in metrics._inflight.values():
        task.cancel()


@pytest.mark.kafka
async def test_a_scrape_during_a_broker_outage_answers_in_time_with_the_bus_down(
    tansu_factory: Callable[[], TansuBroker], tmp_path: Path
) -> None:
    broker = tansu_factory()
    broker.start()
    topic = unique("in")
    metrics = CenterMetrics(timeout_s=1.0)
    agent = Echo()
    agent.topics = (topic,)
    async with (
        SQLiteKnowledgeBase(tmp_path / "kb.db") as kb,
        KafkaBus(kafka_settings(broker.bootstrap)) as bus,
    ):
        await bus.create_topics([topic], partitions=1)
        async with AgentRunner(agent, bus, kb, FAST, observe=metrics.observe) as runner:
            await wait_for(lambda: runner.health().partitions, timeout_s=30, what="assignment")
            up = await metrics.refresh(kb, [runner], bus)
            assert up == {"knowledge_base": True, "bus": True}

            broker.stop()
            for _ in range(2):  # the second scrape waits on the first's probe, not a new one
                started = time.monotonic()
                answered = await metrics.refresh(kb, [runner], bus)
                assert time.monotonic() - started < 3
                assert answered == {"knowledge_base": True, "bus": False}
            assert value(metrics, "rightsize_up", part="bus") == 0
            assert value(metrics, "rightsize_up", part="knowledge_base") == 1
            broker.start()  # let the runner and the bus leave cleanly


def exposed_names() -> set[str]:
    """Every series name a CenterMetrics can expose (what a PromQL query may name)."""
    names = set()
    for family in CenterMetrics().registry.collect():
        names.add(family.name)
        if family.type == "counter":
            names.add(family.name + "_total")
        elif family.type == "histogram":
            names.update(family.name + suffix for suffix in ("_bucket", "_count", "_sum"))
    return names


@pytest.mark.parametrize(
    "doc", ["docs/grafana-dashboard.json", "docs/observability.md", "docs/prometheus.yml"]
)
def test_the_docs_and_the_dashboard_name_only_metrics_that_exist(doc: str) -> None:
    text = (Path(__file__).resolve().parents[2] / doc).read_text()
    named = set(re.findall(r"\brightsize_[a-z_]+[a-z]\b", text))
    assert named - exposed_names() == set()
    if doc.endswith(".json"):
        queries = [t["expr"] for p in json.loads(text)["panels"] for t in p["targets"]]
        assert queries and all("rightsize_" in q for q in queries)


# What docs/prometheus.yml, docs/grafana-dashboard.json and people's alerts rely on.
EXPECTED_METRICS = {
    "rightsize_events_consumed": ("counter", ("agent", "type", "outcome")),
    "rightsize_events_published": ("counter", ("agent", "type")),
    "rightsize_events_dead_lettered": ("counter", ("agent", "type", "error_type")),
    "rightsize_event_handling_seconds": ("histogram", ("agent", "type")),
    "rightsize_resubmissions": ("counter", ("reason",)),
    "rightsize_cascade_segments": ("counter", ()),
    "rightsize_plans_finished": ("counter", ("status",)),
    "rightsize_estimator_live_error": ("gauge", ("target", "metric")),
    "rightsize_estimator_validation_error": ("gauge", ("target", "metric")),
    "rightsize_estimator_decisions": ("counter", ("target", "decision")),
    "rightsize_estimator_drift": ("counter", ("target",)),
    "rightsize_promotions": ("counter", ("target",)),
    "rightsize_what_if_seconds": ("histogram", ("caller",)),
    "rightsize_mcp_tool_seconds": ("histogram", ("tool", "outcome")),
    "rightsize_agent_up": ("gauge", ("agent",)),
    "rightsize_consumer_lag": ("gauge", ("agent",)),
    "rightsize_plans": ("gauge", ("state",)),
    "rightsize_jobs": ("gauge", ("state", "partition")),
    "rightsize_estimators": ("gauge", ("target", "status")),
    "rightsize_up": ("gauge", ("part",)),
    "rightsize_last_refresh_timestamp_seconds": ("gauge", ("part",)),
}


def test_the_metric_table_declares_every_metric_with_its_kind_and_labels() -> None:
    metrics = CenterMetrics()
    declared = {}
    for spec in METRICS:
        metric = getattr(metrics, spec.attribute)
        assert isinstance(metric, spec.kind)
        assert metric._name == spec.name
        declared[spec.name] = (metric._type, metric._labelnames)
    assert declared == EXPECTED_METRICS
    assert {s.attribute for s in METRICS} == set(CenterMetrics.__annotations__)


def test_the_dashboard_groups_and_filters_only_by_labels_its_metrics_have() -> None:
    text = (Path(__file__).resolve().parents[2] / "docs/grafana-dashboard.json").read_text()
    queries = [t["expr"] for p in json.loads(text)["panels"] for t in p["targets"]]
    bases = sorted(EXPECTED_METRICS, key=len, reverse=True)
    for query in queries:
        named = set(re.findall(r"\brightsize_[a-z_]+[a-z]\b", query))
        metrics = {next(b for b in bases if name.startswith(b)) for name in named}
        used = {
            label.strip()
            for group in re.findall(r"by \(([^)]*)\)", query)
            for label in group.split(",")
        }
        used |= set(re.findall(r"[{,]\s*([a-z_]+)\s*=~?", query))
        for metric in metrics:
            kind, labels = EXPECTED_METRICS[metric]
            allowed = set(labels) | ({"le"} if kind == "histogram" else set())
            assert used <= allowed, (query, metric, used - allowed)
