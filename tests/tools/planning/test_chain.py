"""The estimator chain: one per process, trained once, retrained when history changes."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pytest

from knowledge_base.catalog import Catalog
from knowledge_base.records import (
    EstimatorRecord,
    EstimatorStatus,
    JobRecord,
    JobState,
    ProfileRecord,
    ResourceEstimate,
)
from knowledge_base.seed import load_seed_catalog
from knowledge_base.sqlite import SQLiteKnowledgeBase
from knowledge_base.workload import DNNTraining, GenericJob, Goals, WorkloadSpec
from tests.cluster import TEST_SYSTEM
from tests.tools.conftest import Clock, count_registry_reads
from tools.planning.chain import RUNTIME_TARGET, ChainConfig, EstimatorChain
from tools.planning.estimation import Candidate, Estimator, NoEstimate, Workload
from tools.planning.profiled import PROFILE_FAMILY, ProfiledWorkloadEstimator
from tools.planning.service import gather_estimators, shared_chain

START = datetime(2024, 1, 1, tzinfo=UTC)
GENERIC = WorkloadSpec(
    name="md",
    user="alice",
    workload=GenericJob(application="lmp", cores=28, walltime_s=4 * 3600, memory_mb=8000),
    goals=Goals(systems=["owens"]),
)


def _jobs(count: int, *, first: int = 0, start: datetime = START) -> list[JobRecord]:
    """A user whose LAMMPS runs take about an hour though they ask for four."""
    records = []
    for index in range(first, first + count):
        submit = start + timedelta(hours=index)
        run_s = 3000 + (index % 7) * 200
        records.append(
            JobRecord(
                job_id=str(index), system="owens", partition="batch", user="alice",
                application="lmp", state=JobState.COMPLETED, submit_time=submit,
                start_time=submit, end_time=submit + timedelta(seconds=run_s), run_s=run_s,
                requested_cores=28, requested_walltime_s=4 * 3600,
            )
        )  # fmt: skip
    return records


@pytest.fixture(scope="module")
def catalog() -> Catalog:
    return load_seed_catalog()


async def test_two_plans_in_one_process_train_the_history_estimator_once(
    sqlite_kb: SQLiteKnowledgeBase, catalog: Catalog
) -> None:
    await sqlite_kb.add_jobs(_jobs(1100))
    first = await gather_estimators(sqlite_kb, GENERIC, catalog)
    second = await gather_estimators(sqlite_kb, GENERIC, catalog)
    assert first[0].estimator_id.startswith("history-owens")
    assert second[0].estimator_id == first[0].estimator_id
    assert shared_chain(sqlite_kb).trainings == 1  # was one training per system per call


async def test_new_history_retrains_and_a_trickle_does_not(
    sqlite_kb: SQLiteKnowledgeBase, catalog: Catalog
) -> None:
    await sqlite_kb.add_jobs(_jobs(1100))
    chain = EstimatorChain(sqlite_kb, ChainConfig(history_retrain_growth=0.1))
    trained = await chain.history("owens")
    await sqlite_kb.add_jobs(_jobs(5, first=1100))  # 5 < 10% of 1100: the model is kept
    assert await chain.history("owens") is trained
    assert chain.trainings == 1
    # An import of the center's older past counts as much as new jobs do.
    await sqlite_kb.add_jobs(_jobs(200, first=5000, start=START - timedelta(days=400)))
    retrained = await chain.history("owens")
    assert retrained is not None and retrained is not trained
    assert chain.trainings == 2


async def test_history_trains_on_the_latest_jobs_when_there_are_more_than_history_jobs(
    sqlite_kb: SQLiteKnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    import tools.planning.generic as generic

    seen: list[list[str]] = []

    def train(records: list[JobRecord]) -> None:
        seen.append([r.job_id for r in records])

    monkeypatch.setattr(generic, "train_history", train)
    await sqlite_kb.add_jobs(_jobs(300))
    chain = EstimatorChain(sqlite_kb, ChainConfig(history_min_jobs=10, history_jobs=100))
    await chain.history("owens")
    # The latest 100 of 300, replayed oldest first (was the first 100, forever).
    assert seen == [[str(i) for i in range(200, 300)]]


async def test_too_little_history_trains_nothing_and_does_not_try_again_each_call(
    sqlite_kb: SQLiteKnowledgeBase,
) -> None:
    await sqlite_kb.add_jobs(_jobs(20))
    chain = EstimatorChain(sqlite_kb, ChainConfig(history_min_jobs=10))
    assert await chain.history("owens") is None  # under the estimator's 1,000 finished
    assert await chain.history("owens") is None
    assert chain.trainings == 1


DNN = WorkloadSpec(
    name="cnn",
    user="alice",
    workload=DNNTraining(
        model="examples/cascade/train.py",
        dataset_samples=8192,
        epochs=4,
        batch_sizes=[64],
        command="python train.py",
    ),
)


async def test_the_front_ends_chain_uses_the_workloads_own_profiles(
    sqlite_kb: SQLiteKnowledgeBase,
) -> None:
    await sqlite_kb.add_profiles(
        [
            ProfileRecord(
                id="profile-1",
                family=PROFILE_FAMILY,
                model="examples/cascade/train.py",
                config={"batch_size": 64, "startup_s": 3.0},
                hardware={"system": "testcluster", "node_type": "n", "cores": 2, "gpus": 0},
                iteration_s=0.05,
                peak_memory_mb=400,
            )
        ]
    )
    chain = await gather_estimators(sqlite_kb, DNN, Catalog(systems=[TEST_SYSTEM]))
    assert isinstance(chain[0], ProfiledWorkloadEstimator)  # the CLI and MCP never had it


@dataclass
class _Promoted:
    """A stand-in for Model Promotion's loaded model (the real loader lives in agents/,
    which tools cannot import; tests/agents cover it): answers with nothing, says who."""

    record: EstimatorRecord
    now: datetime | None = None

    @property
    def estimator_id(self) -> str:
        return self.record.id

    def at(self, now: datetime) -> Estimator:
        return _Promoted(self.record, now)

    def estimate(self, workload: Workload, candidate: Candidate) -> ResourceEstimate | NoEstimate:
        return NoEstimate("a stand-in")


async def _promote(kb: SQLiteKnowledgeBase, estimator_id: str) -> None:
    await kb.put_estimator(
        EstimatorRecord(
            id=estimator_id, kind="history", target=RUNTIME_TARGET,
            status=EstimatorStatus.CANDIDATE,
        )
    )  # fmt: skip
    await kb.promote_estimator(estimator_id)


async def test_the_promoted_estimator_is_read_once_and_again_after_a_promotion_event(
    sqlite_kb: SQLiteKnowledgeBase,
    catalog: Catalog,
    monkeypatch: pytest.MonkeyPatch,
    clock: Clock,
) -> None:
    loaded: list[str] = []
    reads = count_registry_reads(sqlite_kb, monkeypatch, RUNTIME_TARGET)

    def load(record: EstimatorRecord) -> _Promoted:
        loaded.append(record.id)
        return _Promoted(record)

    chain = EstimatorChain(sqlite_kb, promoted=load)
    chain.promoted_record.clock = clock
    await _promote(sqlite_kb, "reg-1")
    for _ in range(25):
        first = (await chain.estimators(GENERIC, catalog))[0]
        assert first.estimator_id == "reg-1"
    assert loaded == ["reg-1"] and len(reads) == 1  # was one read per request

    # Model Promotion promotes another; the agent hears estimator.promoted on the bus
    await _promote(sqlite_kb, "reg-2")
    chain.forget_promoted()
    for _ in range(5):
        assert (await chain.estimators(GENERIC, catalog))[0].estimator_id == "reg-2"
    assert loaded == ["reg-1", "reg-2"] and len(reads) == 2

    # a process that does not hear the bus serves the next one within recheck_s
    await _promote(sqlite_kb, "reg-3")
    clock.now_s += 59
    assert (await chain.estimators(GENERIC, catalog))[0].estimator_id == "reg-2"
    clock.now_s += 2
    assert (await chain.estimators(GENERIC, catalog))[0].estimator_id == "reg-3"
    assert loaded == ["reg-1", "reg-2", "reg-3"] and len(reads) == 3


async def test_a_dnn_plan_takes_host_memory_from_the_users_own_runs_in_the_history(
    sqlite_kb: SQLiteKnowledgeBase, catalog: Catalog
) -> None:
    """The chain wraps DNN estimators with the user's own past runs of the job (by name)."""
    runs = [
        record.model_copy(
            update={
                "application": "train-r50",
                "used_memory_mb": 20_000 + 1_000 * (index % 3),
                "requested_memory_mb": 64_000,
            }
        )
        for index, record in enumerate(_jobs(1100))
    ]
    await sqlite_kb.add_jobs(runs)
    workload = DNNTraining(model="resnet50", dataset_samples=20000, epochs=1, batch_sizes=[32])
    owens = catalog.system("owens")
    batch = owens.partition("batch")
    node_type = owens.node_type_of(batch)
    assert node_type is not None
    candidate = Candidate(owens, batch, node_type, 1, 28, 0)

    def first_answer(estimators: list[Estimator]) -> ResourceEstimate:
        for estimator in estimators:
            answer = estimator.estimate(workload, candidate)
            if isinstance(answer, ResourceEstimate):
                return answer
        raise AssertionError("no estimator answered")

    chain = EstimatorChain(sqlite_kb, ChainConfig())
    now = START + timedelta(days=50)
    own = first_answer(
        await chain.estimators(
            WorkloadSpec(name="train-r50", user="alice", workload=workload), catalog, now
        )
    )
    other = first_answer(
        await chain.estimators(
            WorkloadSpec(name="train-r50", user="bob", workload=workload), catalog, now
        )
    )

    assert "past runs of train-r50 by alice" in own.label
    assert 19_000 <= own.memory_mb.point <= 23_000
    assert "past runs" not in other.label and other.memory_mb.point < 19_000
