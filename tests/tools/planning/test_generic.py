"""Generic jobs: the history estimator behind the planning seam, else the user's guess."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from knowledge_base.catalog import Catalog
from knowledge_base.records import JobRecord, JobState, ResourceEstimate
from knowledge_base.workload import GenericJob
from tools.estimators.history import HistoryConfig
from tools.planning.estimation import Candidate, NoEstimate, estimate_first
from tools.planning.generic import (
    GUESS_ID,
    GuessFallbackEstimator,
    HistoryRuntimeEstimator,
    train_history,
)

START = datetime(2024, 1, 1, tzinfo=UTC)
JOB = GenericJob(application="lmp", cores=28, walltime_s=4 * 3600, memory_mb=8000)


def _candidate(catalog: Catalog, system: str = "owens", partition: str = "batch") -> Candidate:
    found = catalog.system(system)
    part = found.partition(partition)
    node_type = found.node_type_of(part)
    assert node_type is not None
    return Candidate(found, part, node_type, 1, 28, 0)


def _history(jobs: int) -> list[JobRecord]:
    """A user whose LAMMPS runs take about an hour though they ask for four."""
    records = []
    for index in range(jobs):
        submit = START + timedelta(hours=index)
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


def test_the_users_guess_is_widened_and_labelled(catalog: Catalog) -> None:
    answer = GuessFallbackEstimator().estimate(JOB, _candidate(catalog))
    assert isinstance(answer, ResourceEstimate)
    assert answer.estimator_id == GUESS_ID and "untrained" in answer.label
    assert answer.runtime_s.low < 4 * 3600 < answer.runtime_s.high
    assert answer.memory_mb.high == 8000


def test_no_guess_and_no_history_is_declined_naming_the_field(catalog: Catalog) -> None:
    answer = GuessFallbackEstimator().estimate(
        JOB.model_copy(update={"walltime_s": None}), _candidate(catalog)
    )
    assert isinstance(answer, NoEstimate) and "workload.walltime_s" in answer.reason


def test_too_little_history_trains_nothing() -> None:
    assert train_history(_history(20)) is None  # default: 1,000 finished jobs first


def test_a_trained_history_estimator_answers_before_the_guess(catalog: Catalog) -> None:
    trained = train_history(_history(60), HistoryConfig(first_train_jobs=40, threads=1))
    assert trained is not None
    history = HistoryRuntimeEstimator(
        "owens", trained, user="alice", now_s=(START + timedelta(days=5)).timestamp()
    )
    answer = estimate_first([history, GuessFallbackEstimator()], JOB, _candidate(catalog))
    assert isinstance(answer, ResourceEstimate)
    assert answer.estimator_id.startswith("history-owens")
    assert answer.runtime_s.point < 2 * 3600  # learned: about an hour, not the 4 h asked
    elsewhere = _candidate(catalog, "pitzer", "serial")
    assert isinstance(history.estimate(JOB, elsewhere), NoEstimate)  # it knows owens only
