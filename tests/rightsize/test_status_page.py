"""The status page's JSON API and /metrics: who sees what, and answers during an outage.

Requests go through httpx's ASGI transport, which lets each test say where a request
comes from (loopback or not); the page in a real browser is test_status_browser.py.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest

from agents.bus.kafka import KafkaBus
from agents.bus.memory import InMemoryBus
from agents.events import (
    Envelope,
    JobProgress,
    JobStateChanged,
    Payload,
    PlanFinished,
    ScheduleDecision,
)
from agents.metrics import CenterMetrics
from agents.topics import ALL_TOPICS, topic_for
from knowledge_base.records import CascadeSegment, JobState, Plan, PlanStatus
from knowledge_base.sqlite import SQLiteKnowledgeBase
from knowledge_base.store import KnowledgeBase, PlanQuery
from mcp_server.auth import HashedTokenVerifier, add_user, load_tokens
from rightsize.observability.feed import EventFeed
from rightsize.observability.server import Access, Observed, status_app
from rightsize.observability.status import StatusSnapshot, Viewer, collect_status, for_viewer
from tests.agents.conftest import (
    TansuBroker,
    _require_tansu,
    free_port,
    kafka_settings,
    wait_for,
)
from tests.agents.harness import NoPlanListing, generic_spec, make_plan

LOOPBACK = ("127.0.0.1", 50000)
REMOTE = ("10.1.2.3", 50000)


def event(payload: Payload, correlation_id: str) -> bytes:
    return Envelope.of(payload, source="test", correlation_id=correlation_id).to_bytes()


def plan_of(user: str, plan_id: str, status: PlanStatus, job_id: str, state: str) -> Plan:
    spec = generic_spec().model_copy(update={"user": user})
    return make_plan(plan_id, spec, partition="normal").model_copy(
        update={
            "status": status,
            "segments": [CascadeSegment(index=0, walltime_s=60, job_id=job_id, state=state)],
        }
    )


@pytest.fixture
async def kb(tmp_path: Path) -> AsyncIterator[KnowledgeBase]:
    async with SQLiteKnowledgeBase(tmp_path / "kb.db") as store:
        await store.put_plan(plan_of("alice", "plan-alice", PlanStatus.RUNNING, "101", "running"))
        await store.put_plan(plan_of("bob", "plan-bob", PlanStatus.FAILED, "202", "out_of_memory"))
        yield store


def feed_with_events() -> EventFeed:
    feed = EventFeed(InMemoryBus())
    for payload, key in [
        (JobStateChanged(system="s", job_id="101", plan_id="plan-alice", state=JobState.RUNNING),
         "101"),
        (JobProgress(system="s", job_id="101", plan_id="plan-alice", unit="epoch", done=3,
                     total=10, fraction=0.3), "101"),
        (JobStateChanged(system="s", job_id="202", plan_id="plan-bob",
                         state=JobState.OUT_OF_MEMORY, reason="bob's job hit 2048 MB"), "202"),
        (ScheduleDecision(plan_id="plan-bob", action="more_memory",
                          reason="bob: out of memory, again with 4096 MB"), "plan-bob"),
        (PlanFinished(plan_id="plan-bob", status=PlanStatus.FAILED,
                      reason="bob's plan gave up"), "plan-bob"),
    ]:  # fmt: skip
        feed.add_bytes(event(payload, key))
    return feed


@pytest.fixture
def tokens(tmp_path: Path) -> dict[str, str]:
    path = tmp_path / "tokens.json"
    found = {user: add_user(path, user) for user in ("alice", "bob", "carol")}
    found["_path"] = str(path)
    return found


def client(app: object, where: tuple[str, int]) -> httpx.AsyncClient:
    transport = httpx.ASGITransport(app=app, client=where)  # type: ignore[arg-type]
    return httpx.AsyncClient(transport=transport, base_url="http://status")


def app_for(kb: KnowledgeBase | None, tokens: dict[str, str], timeout_s: float = 2.0) -> object:
    verifier = HashedTokenVerifier(load_tokens(Path(tokens["_path"])))
    observed = Observed(kb=kb, feed=feed_with_events(), timeout_s=timeout_s)
    return status_app(observed, Access(verifier=verifier, staff=frozenset({"carol"})))


async def test_from_loopback_without_a_token_the_operator_sees_every_plan_and_failure(
    kb: KnowledgeBase, tokens: dict[str, str]
) -> None:
    async with client(app_for(kb, tokens), LOOPBACK) as http:
        response = await http.get("/api/status")
    assert response.status_code == 200
    status = StatusSnapshot.model_validate_json(response.content)
    assert status.scope == "all"
    assert {p.id for p in status.plans} == {"plan-alice", "plan-bob"}
    running = next(p for p in status.plans if p.id == "plan-alice").segments[0]
    assert (running.state, running.fraction, running.progress) == ("running", 0.3, "3/10 epoch")
    assert [f.reason for f in status.failures] == ["bob's plan gave up", "bob's job hit 2048 MB"]
    assert status.decisions[0].action == "more_memory"
    assert status.parts_up == {"knowledge_base": True}


@pytest.mark.parametrize("path", ["/api/status", "/metrics"])
async def test_beyond_loopback_without_a_token_is_401(
    kb: KnowledgeBase, tokens: dict[str, str], path: str
) -> None:
    async with client(app_for(kb, tokens), REMOTE) as http:
        response = await http.get(path)
    assert response.status_code == 401
    assert response.headers["www-authenticate"].startswith("Bearer")
    assert "plan-alice" not in response.text


async def test_the_page_itself_holds_no_data_and_loads_from_anywhere(
    kb: KnowledgeBase, tokens: dict[str, str]
) -> None:
    async with client(app_for(kb, tokens), REMOTE) as http:
        response = await http.get("/")
    assert response.status_code == 200
    assert "Rightsize center" in response.text
    assert "plan-alice" not in response.text and "plan-bob" not in response.text
    assert "http://" not in response.text and "https://" not in response.text  # nothing outside


@pytest.mark.parametrize("where", [LOOPBACK, REMOTE], ids=["loopback", "remote"])
async def test_an_unknown_token_is_401_wherever_it_comes_from(
    kb: KnowledgeBase, tokens: dict[str, str], where: tuple[str, int]
) -> None:
    async with client(app_for(kb, tokens), where) as http:
        response = await http.get("/api/status", headers={"Authorization": "Bearer not-a-token"})
    assert response.status_code == 401


async def test_a_user_sees_their_own_plans_and_only_counts_of_other_users(
    kb: KnowledgeBase, tokens: dict[str, str]
) -> None:
    async with client(app_for(kb, tokens), REMOTE) as http:
        response = await http.get(
            "/api/status", headers={"Authorization": f"Bearer {tokens['alice']}"}
        )
    assert response.status_code == 200
    status = StatusSnapshot.model_validate_json(response.content)
    assert (status.scope, status.user) == ("own", "alice")
    assert [p.id for p in status.plans] == ["plan-alice"]
    assert status.failures == [] and status.decisions == []
    assert status.hidden == {"plans": 1, "failures": 2, "decisions": 1}
    assert status.plans_by_state["failed"] == 1  # others' plans as counts
    assert "bob" not in response.text and '"202"' not in response.text


async def test_a_staff_token_sees_every_user(kb: KnowledgeBase, tokens: dict[str, str]) -> None:
    async with client(app_for(kb, tokens), REMOTE) as http:
        response = await http.get(
            "/api/status", headers={"Authorization": f"Bearer {tokens['carol']}"}
        )
    status = StatusSnapshot.model_validate_json(response.content)
    assert status.scope == "all" and len(status.plans) == 2


async def test_metrics_with_a_token_beyond_loopback_are_prometheus_text(
    kb: KnowledgeBase, tokens: dict[str, str]
) -> None:
    async with client(app_for(kb, tokens), REMOTE) as http:
        response = await http.get("/metrics", headers={"Authorization": f"Bearer {tokens['bob']}"})
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    assert 'rightsize_plans{state="running"} 1.0' in response.text
    assert 'rightsize_jobs{partition="normal",state="out_of_memory"} 1.0' in response.text
    assert 'rightsize_up{part="knowledge_base"} 1.0' in response.text


class HangingKB(SQLiteKnowledgeBase):
    """SQLite whose plan reads never answer: a database outage, switched on by the test.

    The real store underneath; only the plan reads and counts hang, as a dead server's would.
    """

    async def query_plans(self, query: PlanQuery) -> list[Plan]:
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    async def count_plans(self) -> dict[PlanStatus, int]:
        await asyncio.Event().wait()
        raise AssertionError("unreachable")


async def test_during_an_outage_the_page_and_metrics_answer_in_time_with_it_visible(
    tmp_path: Path, tokens: dict[str, str]
) -> None:
    async with HangingKB(tmp_path / "hang.db") as hanging:
        app = app_for(hanging, tokens, timeout_s=0.3)
        async with client(app, LOOPBACK) as http:
            started = time.monotonic()
            status = (await http.get("/api/status")).json()
            metrics = (await http.get("/metrics")).text
            took_s = time.monotonic() - started
    assert took_s < 5
    assert status["parts_up"] == {"knowledge_base": False}
    assert [f["reason"] for f in status["failures"]][-1] == "bob's job hit 2048 MB"  # still shown
    assert 'rightsize_up{part="knowledge_base"} 0.0' in metrics


def test_the_snapshot_json_names_no_owner_map() -> None:
    snapshot = StatusSnapshot.model_validate({"generated_at": "2026-01-01T00:00:00Z"})
    snapshot._owners = {"plan-x": "mallory"}
    assert "mallory" not in json.dumps(snapshot.model_dump(mode="json"))


def test_metrics_of_the_status_app_come_from_its_own_registry() -> None:
    first = Observed(kb=None)
    second = Observed(kb=None, metrics=CenterMetrics())
    assert first.metrics.registry is not second.metrics.registry


class SilentBroker(InMemoryBus):
    """The in-process bus, except that its broker never answers a probe (an outage)."""

    async def probe(self) -> None:
        await asyncio.Event().wait()


async def test_a_broker_outage_shows_on_the_page_and_in_metrics_without_hanging(
    kb: KnowledgeBase,
) -> None:
    observed = Observed(kb=kb, feed=feed_with_events(), bus=SilentBroker(), timeout_s=0.3)
    app = status_app(observed, Access())
    async with client(app, LOOPBACK) as http:
        started = time.monotonic()
        status = (await http.get("/api/status")).json()
        metrics = (await http.get("/metrics")).text
        took_s = time.monotonic() - started
    assert took_s < 5
    assert status["parts_up"] == {"knowledge_base": True, "bus": False}
    assert 'rightsize_up{part="bus"} 0.0' in metrics
    assert 'rightsize_plans{state="running"} 1.0' in metrics  # the rest still answers
    for task in observed.metrics._inflight.values():
        task.cancel()


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[TansuBroker]:
    started = TansuBroker(_require_tansu(), free_port(), tmp_path / "tansu.log")
    started.start()
    try:
        yield started
    finally:
        started.stop()


@pytest.mark.kafka
async def test_the_feed_sees_what_another_process_published_on_kafka(
    broker: TansuBroker,
) -> None:
    failed = JobStateChanged(
        system="s", job_id="9", plan_id="plan-k", state=JobState.TIMEOUT, reason="hit 60 s"
    )
    async with KafkaBus(kafka_settings(broker.bootstrap)) as publisher:
        await publisher.create_topics(list(ALL_TOPICS), partitions=2)
        await publisher.publish(topic_for("job.state_changed"), event(failed, "9"), key="9")
        async with KafkaBus(kafka_settings(broker.bootstrap)) as bus, EventFeed(bus) as feed:
            await wait_for(lambda: list(feed.failures), timeout_s=30, what="the failure")
    (seen,) = feed.failures
    assert (seen.job_id, seen.state, seen.reason) == ("9", "timeout", "hit 60 s")


class CountingKB(SQLiteKnowledgeBase):
    """SQLite that counts status reads (each counts the plans once)."""

    reads = 0

    async def count_plans(self) -> dict[PlanStatus, int]:
        self.reads += 1
        return await super().count_plans()


async def test_pages_polling_together_cost_one_knowledge_base_read(tmp_path: Path) -> None:
    async with CountingKB(tmp_path / "count.db") as counting:
        observed = Observed(kb=counting, cache_s=60)
        async with client(status_app(observed, Access()), LOOPBACK) as http:
            answers = await asyncio.gather(*(http.get("/api/status") for _ in range(5)))
            assert all(a.status_code == 200 for a in answers)
            assert counting.reads == 1
            observed.cache_s = 0
            await http.get("/api/status")
            assert counting.reads == 2


async def test_a_status_read_shows_recent_plans_and_counts_all_without_loading_every_plan(
    tmp_path: Path,
) -> None:
    async with NoPlanListing(tmp_path / "many.db") as kb:
        for i in range(30):
            status = PlanStatus.RUNNING if i % 10 == 0 else PlanStatus.COMPLETED
            state = "running" if status is PlanStatus.RUNNING else "completed"
            await kb.put_plan(plan_of("bob", f"plan-{i:02d}", status, str(i), state))
        await kb.put_plan(plan_of("bob", "plan-draft", PlanStatus.DRAFT, "99", "completed"))
        snapshot = await collect_status(kb, recent_plans=5)
    assert snapshot.parts_up == {"knowledge_base": True}
    ended = [f"plan-{i:02d}" for i in range(25, 30)]  # the five updated last
    assert [p.id for p in snapshot.plans] == ["plan-00", "plan-10", "plan-20", *ended]
    assert snapshot.plans_by_state["completed"] == 27
    assert snapshot.plans_by_state["running"] == 3 and snapshot.plans_by_state["draft"] == 1
    assert snapshot.jobs_by_state == {"completed": 28, "running": 3}


async def test_a_user_sees_their_failure_on_a_plan_that_ended_before_the_recent_ones(
    tmp_path: Path,
) -> None:
    async with SQLiteKnowledgeBase(tmp_path / "kb.db") as kb:
        await kb.put_plan(plan_of("alice", "plan-old", PlanStatus.FAILED, "7", "timeout"))
        for i in range(3):
            await kb.put_plan(
                plan_of("bob", f"plan-{i}", PlanStatus.COMPLETED, str(i), "completed")
            )
        feed = EventFeed(InMemoryBus())
        failed = JobStateChanged(
            system="s", job_id="7", plan_id="plan-old", state=JobState.TIMEOUT, reason="hit 60 s"
        )
        feed.add_bytes(event(failed, "7"))
        snapshot = await collect_status(kb, feed=feed, recent_plans=2)
    assert "plan-old" not in {p.id for p in snapshot.plans}
    mine = for_viewer(snapshot, Viewer(user="alice"))
    assert [f.reason for f in mine.failures] == ["hit 60 s"]
    assert for_viewer(snapshot, Viewer(user="bob")).failures == []


async def test_a_cascades_segments_show_each_job_the_feeds_word_and_what_is_still_planned(
    tmp_path: Path,
) -> None:
    plan = make_plan("plan-c", generic_spec(), partition="normal", segments=3).model_copy(
        update={
            "status": PlanStatus.RUNNING,
            "segments": [
                CascadeSegment(index=0, walltime_s=60),
                CascadeSegment(index=1, walltime_s=60),
                CascadeSegment(index=2, walltime_s=60),
                CascadeSegment(index=0, walltime_s=60, job_id="1", state="out_of_memory"),
                CascadeSegment(index=0, walltime_s=60, job_id="2", state="completed"),
                CascadeSegment(index=1, walltime_s=60, job_id="3", state="pending"),
            ],
        }
    )
    async with SQLiteKnowledgeBase(tmp_path / "kb.db") as kb:
        await kb.put_plan(plan)
        feed = EventFeed(InMemoryBus())
        for payload in (
            JobStateChanged(system="s", job_id="3", plan_id="plan-c", state=JobState.RUNNING),
            JobProgress(system="s", job_id="3", plan_id="plan-c", unit="step", done=5, total=20,
                        fraction=0.25),
        ):  # fmt: skip
            feed.add_bytes(event(payload, "3"))
        snapshot = await collect_status(kb, feed=feed)
    (shown,) = snapshot.plans
    rows = [(s.index, s.job_id, s.state, s.progress) for s in shown.segments]
    assert rows == [
        (0, "1", "out_of_memory", None),
        (0, "2", "completed", None),
        (1, "3", "running", "5/20 step"),  # the monitor's word, newer than the ledger's
        (2, None, None, None),  # planned, not submitted yet
    ]
    running = shown.segments[2]
    assert running.elapsed_s is not None and 0 <= running.elapsed_s < 60
    assert running.fraction == 0.25
    assert (shown.system, shown.partition) == ("testcluster", "normal")
