"""Generic jobs: the history estimator behind the planning seam, else the user's guess."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from knowledge_base.catalog import Catalog
from knowledge_base.records import Interval, JobRecord, JobState, ResourceEstimate
from knowledge_base.workload import DNNTraining, GenericJob, Goals, WorkloadSpec
from tools.estimators.history.estimator import HistoryConfig
from tools.estimators.history.features import HistoryJob
from tools.planning.builder import BuildContext, PlanningConfig
from tools.planning.cost import DollarRates
from tools.planning.estimation import Candidate, NoEstimate, estimate_first
from tools.planning.generic import (
    GUESS_ID,
    GuessFallbackEstimator,
    HistoryRuntimeEstimator,
    UserHistoryMemory,
    plan_with_core_advice,
    train_history,
)
from tools.planning.selector import Selection
from tools.planning.whatif import what_if

START = datetime(2024, 1, 1, tzinfo=UTC)
JOB = GenericJob(application="lmp", cores=28, walltime_s=4 * 3600, memory_mb=8000)


def _candidate(catalog: Catalog, system: str = "owens", partition: str = "batch") -> Candidate:
    found = catalog.system(system)
    part = found.partition(partition)
    node_type = found.node_type_of(part)
    assert node_type is not None
    return Candidate(found, part, node_type, 1, 28, 0)


def _history(jobs: int, limit_s: int | None = None) -> list[JobRecord]:
    """A user whose LAMMPS runs take about an hour though they ask for four.

    With ``limit_s``: runs that always go to that limit, and 40 s past it (the kill's delay).
    """
    records = []
    for index in range(jobs):
        submit = START + timedelta(hours=index)
        run_s = 3000 + (index % 7) * 200 if limit_s is None else limit_s + 40
        records.append(
            JobRecord(
                job_id=str(index), system="owens", partition="batch", user="alice",
                application="lmp", state=JobState.COMPLETED, submit_time=submit,
                start_time=submit, end_time=submit + timedelta(seconds=run_s), run_s=run_s,
                requested_cores=28, requested_walltime_s=limit_s or 4 * 3600,
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


def test_a_job_that_runs_to_the_partition_limit_is_planned_at_the_limit(
    catalog: Catalog,
) -> None:
    candidate = _candidate(catalog)
    limit_s = candidate.partition.max_minutes * 60
    trained = train_history(
        _history(60, limit_s=limit_s), HistoryConfig(first_train_jobs=40, threads=1)
    )
    assert trained is not None
    history = HistoryRuntimeEstimator(
        "owens", trained, user="alice", now_s=(START + timedelta(days=5)).timestamp()
    )
    job = JOB.model_copy(update={"walltime_s": limit_s})
    # The estimator itself expects the run past the request by the kill's delay ...
    assert trained.predict(_what_if(job, limit_s)).runtime_estimate_s > limit_s
    answer = history.estimate(job, candidate)
    assert isinstance(answer, ResourceEstimate)
    # ... the plan's point is the request: the delay is the batch system's, not work.
    assert answer.runtime_s.point == limit_s < answer.runtime_s.high
    spec = WorkloadSpec(name="md", user="alice", workload=job, goals=Goals(systems=["owens"]))
    context = BuildContext(spec=spec, config=PlanningConfig(), rates=DollarRates(usd_per_su=1.0))
    planned = [
        plan
        for plan in what_if(spec, catalog, context, [history]).feasible
        if plan.option.partition == "batch"
    ]
    assert planned and all(list(plan.segment_walltimes_s) == [limit_s] for plan in planned)
    assert any("asks for the limit" in note for note in planned[0].notes)


def _what_if(job: GenericJob, limit_s: int) -> HistoryJob:
    return HistoryJob(
        job_id="what-if",
        submit_time_s=(START + timedelta(days=5)).timestamp(),
        user="alice",
        application=job.application,
        partition="batch",
        procs=28,
        requested_time_s=float(limit_s),
    )


def _busy_history(jobs: int, efficiency: float) -> list[JobRecord]:
    """Alice's 28-core runs, keeping ``efficiency`` (+-0.05) of their cores busy."""
    return [
        record.model_copy(
            update={
                "used_cpu_s": (record.run_s or 0) * 28 * (efficiency + 0.05 * ((index % 3) - 1)),
                "requested_tasks": 28,
            }
        )
        for index, record in enumerate(_history(jobs))
    ]


def _plan_with_advice(catalog: Catalog, efficiency: float) -> Selection:
    trained = train_history(
        _busy_history(60, efficiency), HistoryConfig(first_train_jobs=40, threads=1)
    )
    assert trained is not None
    history = HistoryRuntimeEstimator(
        "owens", trained, user="alice", now_s=(START + timedelta(days=5)).timestamp()
    )
    spec = WorkloadSpec(
        name="md",
        user="alice",
        workload=JOB,
        goals=Goals(systems=["owens"], partitions=["batch"]),
    )
    return plan_with_core_advice(
        spec,
        catalog,
        now=START + timedelta(days=5),
        estimators=[history, GuessFallbackEstimator()],
        rates=DollarRates(usd_per_su=1.0),
    )


def test_a_plan_that_would_leave_most_cores_idle_says_so_and_offers_fewer(
    catalog: Catalog,
) -> None:
    selection = _plan_with_advice(catalog, 0.2)
    assert selection.recommended is not None
    assert selection.recommended.option.cores_per_node == 28  # the user's shape still leads
    notes = [note for note in selection.notes if note.startswith("history: this user's jobs")]
    assert len(notes) == 1 and "cores would do" in notes[0]
    shown = int(notes[0].split("~")[1].split("%")[0])
    assert 10 <= shown <= 30  # the runs kept 15-25 % of their cores busy
    assert "cores would do" in selection.recommended.estimate.label
    fewer = [
        plan for plan in selection.ranked if plan.option.nodes * plan.option.cores_per_node < 28
    ]
    assert len(fewer) == 1 and fewer[0] is selection.ranked[-1]
    offered = fewer[0].option.nodes * fewer[0].option.cores_per_node
    assert 5 <= offered <= 14  # about a fifth busy: the 0.9 quantile's share, not all 28
    assert f"asks for {offered}" in notes[0]
    assert any("fewer cores than asked" in note for note in fewer[0].notes)


def test_a_plan_whose_cores_are_busy_offers_nothing_more(catalog: Catalog) -> None:
    selection = _plan_with_advice(catalog, 0.9)
    assert selection.recommended is not None
    assert not any("cores would do" in note for note in selection.notes)
    assert all(plan.option.cores_per_node == 28 for plan in selection.ranked)


class _WhiteBox:
    """A DNN estimator that says 4 GB of host memory per node, whatever the history."""

    estimator_id = "white-box"

    def estimate(self, workload: object, candidate: Candidate) -> ResourceEstimate:
        runtime = Interval(point=3600.0, low=3000.0, high=4000.0, coverage_basis="assumed")
        memory = Interval(point=3000.0, low=2500.0, high=4000.0, coverage_basis="assumed")
        return ResourceEstimate(
            option=candidate.option(runtime, memory),
            runtime_s=runtime,
            memory_mb=memory,
            estimator_id=self.estimator_id,
            label="white-box",
        )


def test_a_dnn_job_takes_host_memory_from_the_users_own_runs_where_they_exist(
    catalog: Catalog,
) -> None:
    # Alice's "train-r50" runs peaked at 20-22 GB a node: the white-box 4 GB would be killed.
    records = [
        record.model_copy(
            update={
                "application": "train-r50",
                "used_memory_mb": 20_000 + 1_000 * (index % 3),
                "requested_memory_mb": 64_000,
            }
        )
        for index, record in enumerate(_history(60))
    ]
    trained = train_history(records, HistoryConfig(first_train_jobs=40, threads=1))
    assert trained is not None
    workload = DNNTraining(model="resnet50", dataset_samples=20000, epochs=1, batch_sizes=[32])
    now_s = (START + timedelta(days=5)).timestamp()

    def wrapped(user: str, name: str) -> ResourceEstimate:
        estimator = UserHistoryMemory(
            _WhiteBox(), trained, system="owens", user=user, name=name, now_s=now_s
        )
        answer = estimator.estimate(workload, _candidate(catalog))
        assert isinstance(answer, ResourceEstimate)
        return answer

    own = wrapped("alice", "train-r50")
    assert 19_000 <= own.memory_mb.point <= 23_000
    assert own.memory_mb.high >= 21_000 and own.option.memory_mb >= own.memory_mb.high
    assert "past runs of train-r50 by alice" in own.label
    assert own.runtime_s.point == 3600.0  # only host memory comes from the history
    for user, name in (("bob", "train-r50"), ("alice", "other-job")):
        untouched = wrapped(user, name)
        assert untouched.memory_mb.high == 4000.0 and untouched.label == "white-box"
