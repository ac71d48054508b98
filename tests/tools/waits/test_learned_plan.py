"""The plan's wait from the learned predictor where a live queue and recorded waits allow.

A simulated one-node cluster (``tests.cluster.TEST_SYSTEM``) holds the queue now: a
blocker runs, a job waits. The knowledge base holds the cluster's past: hourly bursts of
short jobs served first come, first served on the one node, so the recorded waits are
real consequences of a queue, not numbers picked for the test.
"""

from __future__ import annotations

import random
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path

import pytest

from knowledge_base.catalog import Catalog
from knowledge_base.records import JobRecord, JobState
from knowledge_base.sqlite import SQLiteKnowledgeBase
from tests.cluster import TEST_SYSTEM
from tools.actuators.model import JobRequest, SimulatedWork
from tools.actuators.simulated import EPOCH, ManualClock, SimulatedCluster
from tools.planning.queue import QueueModel, live_queue_and_waits
from tools.waits import predictor as predictor_module
from tools.waits.learned import PredictorCache
from tools.waits.live import history_from_records
from tools.waits.predictor import WaitPredictor
from tools.waits.snapshot import PendingJob, RunningJob, WaitSnapshot

BATCH = next(p for p in TEST_SYSTEM.partitions if p.name == "batch")


def past_jobs(days: float, seed: int = 7, prefix: str = "past") -> list[JobRecord]:
    """Bursts of 2-9 minute jobs in the 20 minutes before each hour before ``EPOCH``, run
    oldest first on one node (the 4-hourly training instants find a queue)."""
    rng = random.Random(seed)
    submits = sorted(
        hour * 3600.0 - rng.uniform(0, 1200)
        for hour in range(-int(days * 24), -1)
        for _ in range(rng.randint(4, 9))
    )
    free_at = submits[0]
    records = []
    for index, submit in enumerate(submits):
        run = rng.uniform(120, 540)
        start = max(submit, free_at)
        free_at = start + run
        at = EPOCH + timedelta(seconds=submit)
        records.append(
            JobRecord(
                job_id=f"{prefix}-{index}",
                system=TEST_SYSTEM.name,
                user=f"u{index % 5}",
                partition="batch",
                state=JobState.COMPLETED,
                submit_time=at,
                start_time=at + timedelta(seconds=start - submit),
                end_time=at + timedelta(seconds=free_at - submit),
                run_s=run,
                requested_nodes=1,
                requested_walltime_s=600,
            )
        )
    return records


@pytest.fixture
async def kb(tmp_path: Path) -> AsyncIterator[SQLiteKnowledgeBase]:
    store = SQLiteKnowledgeBase(tmp_path / "kb.db")
    yield store
    await store.close()


@pytest.fixture
async def cluster() -> SimulatedCluster:
    found = SimulatedCluster(
        nodes=1, cores_per_node=2, memory_mb_per_node=20000, clock=ManualClock(), system=TEST_SYSTEM
    )
    for name, run_s in (("blocker", 500), ("waiting", 100)):
        await found.submit(
            JobRequest(
                name=name,
                partition="batch",
                command="true",
                memory_mb=100,
                walltime_s=600,
                simulated=SimulatedWork(run_s=run_s, peak_memory_mb=50),
            )
        )
    return found


@pytest.fixture
def trainings(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The cutoffs models were trained at, in order."""
    seen: list[float] = []
    real = predictor_module.train_submission_model

    def counting(*args: object, **kwargs: object) -> predictor_module.WaitModel:
        seen.append(float(args[2]))  # type: ignore[arg-type]
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(predictor_module, "train_submission_model", counting)
    return seen


async def test_with_enough_recorded_waits_the_plans_wait_is_the_learned_p50(
    kb: SQLiteKnowledgeBase, cluster: SimulatedCluster, trainings: list[float]
) -> None:
    await kb.add_jobs(past_jobs(days=28))
    cache = PredictorCache()
    snapshot, learned = await live_queue_and_waits(cluster, TEST_SYSTEM.name, kb, cache)
    assert learned is not None and learned.model.booster is not None
    queue = QueueModel([snapshot], _catalog(), learned={TEST_SYSTEM.name: learned})

    waited = queue.wait(TEST_SYSTEM, BATCH, 1, 300)

    # The new-job model's own answer for this size, asked independently
    expected, model = learned.predictor.new_job_waits(learned.snapshot, 1, 300, "batch")
    assert model is learned.model and model.booster is not None
    assert waited.wait_s == pytest.approx(expected[1])
    assert waited.p10_s == pytest.approx(expected[0])
    assert waited.p90_s == pytest.approx(expected[2])
    assert waited.p10_s is not None and waited.p90_s is not None
    assert waited.p10_s <= waited.wait_s <= waited.p90_s
    recorded = learned.recorded
    assert 300 <= recorded < 28 * 24 * 9
    assert waited.basis.startswith(f"learned from {recorded} recorded waits on testcluster")
    assert "p10-p90" in waited.basis
    # A job needing more nodes than the pool has still cannot run: the rule says so
    assert queue.wait(TEST_SYSTEM, BATCH, 2, 300).never
    assert len(trainings) == 1


async def test_with_too_little_history_the_plan_keeps_the_rule(
    kb: SQLiteKnowledgeBase, cluster: SimulatedCluster, trainings: list[float]
) -> None:
    await kb.add_jobs(past_jobs(days=2))
    snapshot, learned = await live_queue_and_waits(cluster, TEST_SYSTEM.name, kb, PredictorCache())
    assert learned is None
    waited = QueueModel([snapshot], _catalog()).wait(TEST_SYSTEM, BATCH, 1, 300)
    assert waited.wait_s is not None and waited.wait_s > 0  # behind the blocker
    assert "the rule's error on recorded waits" in waited.basis
    assert trainings == []  # under min_rows recorded waits: no model is even tried


async def test_two_plans_train_once_and_growth_retrains(
    kb: SQLiteKnowledgeBase, cluster: SimulatedCluster, trainings: list[float]
) -> None:
    history = past_jobs(days=28)
    await kb.add_jobs(history[:-200])
    cache = PredictorCache()
    answers = []
    for _ in range(2):  # two plans in one process
        snapshot, learned = await live_queue_and_waits(cluster, TEST_SYSTEM.name, kb, cache)
        assert learned is not None
        queue = QueueModel([snapshot], _catalog(), learned={TEST_SYSTEM.name: learned})
        answers.append([queue.wait(TEST_SYSTEM, BATCH, 1, w).wait_s for w in (120, 300, 600)])
    assert len(trainings) == 1 and cache.built == 1
    assert answers[0] == answers[1]
    await kb.add_jobs(history[-200:])  # under 10% more: the same predictor
    await live_queue_and_waits(cluster, TEST_SYSTEM.name, kb, cache)
    assert len(trainings) == 1 and cache.built == 1
    await kb.add_jobs(past_jobs(days=28, seed=8, prefix="more")[: len(history) // 5])  # 20% more
    await live_queue_and_waits(cluster, TEST_SYSTEM.name, kb, cache)
    assert len(trainings) == 2 and cache.built == 2


def _catalog() -> Catalog:
    return Catalog(systems=[TEST_SYSTEM])


def test_the_new_job_model_learns_that_a_job_on_an_idle_machine_starts_at_once() -> None:
    # Trained on jobs at their submission, zero waits included (a random instant never
    # sees those pending): on an empty queue it says "now", behind a queue it does not.
    history = history_from_records(past_jobs(days=28), 1)
    predictor = WaitPredictor(history)
    t = EPOCH.timestamp()
    empty = WaitSnapshot(taken_at=t, total_procs=1, running=[], pending=[])
    idle, model = predictor.new_job_waits(empty, 1, 600)
    assert model.booster is not None
    busy = empty.model_copy(
        update={
            "running": [
                RunningJob(job_id="r", procs=1, submit_s=t - 60, start_s=t - 60, requested_s=600)
            ],
            "pending": [
                PendingJob(job_id=f"p{n}", procs=1, submit_s=t - 30, requested_s=600)
                for n in range(6)
            ],
        }
    )
    queued, _ = predictor.new_job_waits(busy, 1, 600)
    assert idle[1] < 20  # the pending-job model says 50 s here: no job it saw waited 0
    assert queued[1] > 3 * max(idle[1], 60.0)
    assert idle[0] <= idle[1] <= idle[2] and queued[0] <= queued[1] <= queued[2]


async def test_a_history_longer_than_the_cache_reads_learns_from_its_newest_jobs(
    kb: SQLiteKnowledgeBase,
) -> None:
    past = past_jobs(days=28)
    await kb.add_jobs(past)
    cache = PredictorCache(history_days=60.0, history_jobs=300)

    predictor = await cache.predictor(kb, TEST_SYSTEM.name, 1, EPOCH)

    newest = sorted(past, key=lambda r: r.submit_time)[-300:]
    assert sorted(predictor.history.job_id.tolist()) == sorted(r.job_id for r in newest)


async def test_a_kept_predictor_is_read_by_the_next_process_instead_of_trained_again(
    kb: SQLiteKnowledgeBase, cluster: SimulatedCluster, trainings: list[float], tmp_path: Path
) -> None:
    await kb.add_jobs(past_jobs(days=28))
    first = PredictorCache(folder=tmp_path / "waits")
    _, learned = await live_queue_and_waits(cluster, TEST_SYSTEM.name, kb, first)
    assert learned is not None and len(trainings) == 1

    again = PredictorCache(folder=tmp_path / "waits")  # a new process, the same home
    _, read = await live_queue_and_waits(cluster, TEST_SYSTEM.name, kb, again)
    assert read is not None and len(trainings) == 1 and again.built == 0
    assert read.wait(1, 300).start_s == learned.wait(1, 300).start_s

    # The history grew past the growth bound: trained again, and kept again.
    await kb.add_jobs(past_jobs(days=28, seed=8, prefix="more"))
    grown = PredictorCache(folder=tmp_path / "waits")
    _, fresh = await live_queue_and_waits(cluster, TEST_SYSTEM.name, kb, grown)
    assert fresh is not None and len(trainings) == 2 and grown.built == 1


async def test_an_unreadable_kept_predictor_is_trained_again(
    kb: SQLiteKnowledgeBase, cluster: SimulatedCluster, trainings: list[float], tmp_path: Path
) -> None:
    await kb.add_jobs(past_jobs(days=28))
    cache = PredictorCache(folder=tmp_path / "waits")
    await live_queue_and_waits(cluster, TEST_SYSTEM.name, kb, cache)
    (kept,) = (tmp_path / "waits").glob("*.pkl")
    kept.write_bytes(b"not a pickle")

    again = PredictorCache(folder=tmp_path / "waits")
    _, learned = await live_queue_and_waits(cluster, TEST_SYSTEM.name, kb, again)
    assert learned is not None and again.built == 1 and len(trainings) == 2
