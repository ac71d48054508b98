"""Model Promotion: drift on live error, retrain, shadow evaluation, promotion, the registry.

Real SQLite knowledge base and in-process bus; the finished jobs are synthetic (three
applications whose run time depends on cores and request, with 10% noise), because the
test needs a shift it controls: 30% longer run times from one day on.
"""

from __future__ import annotations

import random
from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agents.events import (
    EstimatorDecision,
    EstimatorPromoted,
    EstimatorRetrainRequested,
    JobFinished,
)
from agents.promotion import (
    RUNTIME_TARGET,
    LogLinearRuntime,
    ModelPromotion,
    PromotionPolicy,
    fit_loglinear,
    judge,
    load_runtime_model,
    mape,
)
from knowledge_base.errors import NotFoundError
from knowledge_base.records import EstimatorStatus, JobRecord
from knowledge_base.sqlite import SQLiteKnowledgeBase
from knowledge_base.store import JobQuery
from tests.agents.harness import MiniCenter
from tests.tools.estimators.promoted.jobs import job

START = datetime.now(UTC) - timedelta(days=20)


async def feed(center: MiniCenter, jobs: Sequence[JobRecord]) -> None:
    for record in jobs:
        await center.publish(JobFinished(job=record), f"{record.system}/{record.job_id}")
    await center.settle(timeout_s=60)


@pytest.fixture
async def center(tmp_path: Path) -> AsyncIterator[MiniCenter]:
    async with MiniCenter(tmp_path) as c:
        yield c


async def test_a_30_percent_shift_triggers_a_retrain_and_a_promotion_that_lowers_the_live_error(
    center: MiniCenter, tmp_path: Path
) -> None:
    rng = random.Random(7)
    agent = ModelPromotion(center.kb, tmp_path / "estimators")
    await center.start(agent)
    before = [job(n, START + timedelta(minutes=30 * n), rng=rng) for n in range(240)]
    await center.kb.add_jobs(before)
    await center.publish(
        EstimatorRetrainRequested(target=RUNTIME_TARGET, reason="first model"), "estimators"
    )
    await center.settle()
    first = await center.kb.promoted_estimator(RUNTIME_TARGET)
    assert first is not None and first.validation["mape"] < 0.15
    old_model = load_runtime_model(first)

    shift_start = START + timedelta(days=6)
    after = [
        job(1000 + n, shift_start + timedelta(minutes=30 * n), shift=1.3, rng=rng)
        for n in range(100)
    ]
    await feed(center, after)

    decisions = await center.recorder.of(EstimatorDecision)
    kinds = [d.decision for d in decisions]
    assert "drift" in kinds and "promoted" in kinds
    drift = next(d for d in decisions if d.decision == "drift")
    assert drift.live_error is not None and drift.validation_error is not None
    assert drift.live_error > 1.5 * drift.validation_error
    # (events of different keys come back in partition order, not in time order)
    promoted = next(d for d in decisions if d.decision == "promoted" and d.estimator_id)
    assert promoted.candidate_error is not None and promoted.incumbent_error is not None
    assert promoted.candidate_error < promoted.incumbent_error  # on the same held-out jobs
    assert first.id in [p.replaced for p in await center.recorder.of(EstimatorPromoted)]

    # The new model serves, and on jobs neither has seen it is the better one.
    current = await center.kb.promoted_estimator(RUNTIME_TARGET)
    assert current is not None and current.id != first.id
    assert (await center.kb.get_estimator(first.id)).status is EstimatorStatus.RETIRED
    unseen = [
        job(5000 + n, shift_start + timedelta(days=2, minutes=30 * n), shift=1.3, rng=rng)
        for n in range(60)
    ]
    new_error = mape(load_runtime_model(current), unseen)
    old_error = mape(old_model, unseen)
    assert new_error is not None and old_error is not None
    assert new_error < old_error * 0.6
    assert "shadow-evaluated" in current.notes


async def test_a_worse_candidate_is_never_promoted_and_the_decision_is_recorded(
    center: MiniCenter, tmp_path: Path
) -> None:
    rng = random.Random(3)
    jobs = [job(n, START + timedelta(minutes=30 * n), rng=rng) for n in range(200)]
    await center.kb.add_jobs(jobs)

    def bad_trainer(records: Sequence[JobRecord]) -> LogLinearRuntime:
        good = fit_loglinear(records)
        return good.model_copy(update={"coefficients": [0.0] * len(good.coefficients)})

    trainers = iter([fit_loglinear, bad_trainer])
    agent = ModelPromotion(
        center.kb,
        tmp_path / "estimators",
        trainers={RUNTIME_TARGET: lambda records: next(trainers)(records)},
    )
    await center.start(agent)
    for reason in ("first model", "operator asked"):
        await center.publish(
            EstimatorRetrainRequested(target=RUNTIME_TARGET, reason=reason), "estimators"
        )
        await center.settle()

    decisions = await center.recorder.of(EstimatorDecision)
    assert sorted(d.decision for d in decisions) == ["promoted", "rejected"]
    rejected = next(d for d in decisions if d.decision == "rejected")
    first = next(d for d in decisions if d.decision == "promoted")
    assert rejected.candidate_error is not None and rejected.incumbent_error is not None
    assert rejected.candidate_error > rejected.incumbent_error
    assert "kept the incumbent" in rejected.reason
    serving = await center.kb.promoted_estimator(RUNTIME_TARGET)
    assert serving is not None and serving.id == first.candidate_id
    record = await center.kb.get_estimator(rejected.candidate_id or "")
    assert record.status is EstimatorStatus.RETIRED
    assert "not better than the incumbent" in record.notes


async def test_a_retrain_for_a_target_without_a_trainer_is_skipped_with_the_reason(
    center: MiniCenter, tmp_path: Path
) -> None:
    await center.start(ModelPromotion(center.kb, tmp_path / "estimators"))
    await center.publish(
        EstimatorRetrainRequested(target="queue_wait_s", reason="asked"), "estimators"
    )  # (DNN time, dnn_runtime_s, has its own: tests/agents/test_promotion_gpu.py)
    await center.settle()
    [decision] = await center.recorder.of(EstimatorDecision)
    assert decision.decision == "skipped" and "no trainer" in decision.reason


async def test_without_drift_nothing_is_retrained(center: MiniCenter, tmp_path: Path) -> None:
    rng = random.Random(11)
    agent = ModelPromotion(center.kb, tmp_path / "estimators")
    await center.start(agent)
    await center.kb.add_jobs(
        [job(n, START + timedelta(minutes=30 * n), rng=rng) for n in range(200)]
    )
    await center.publish(EstimatorRetrainRequested(target=RUNTIME_TARGET, reason="first"), "e")
    await center.settle()
    same = [job(2000 + n, START + timedelta(days=6, minutes=30 * n), rng=rng) for n in range(40)]
    await feed(center, same)
    kinds = [d.decision for d in await center.recorder.of(EstimatorDecision)]
    assert sorted(kinds) == ["no_drift", "no_drift", "promoted"]


async def test_a_full_window_evaluates_once_per_evaluate_every_new_jobs_not_on_every_job(
    center: MiniCenter, tmp_path: Path
) -> None:
    """The window holds 60 jobs; with the old ``len(live) % evaluate_every`` a full window
    (60 % 20 == 0) re-evaluated on every finished job from the 60th on."""
    rng = random.Random(5)
    policy = PromotionPolicy(window_jobs=60, evaluate_every=20, min_live_jobs=20)
    await center.start(ModelPromotion(center.kb, tmp_path / "estimators", policy=policy))
    await center.kb.add_jobs(
        [job(n, START + timedelta(minutes=30 * n), rng=rng) for n in range(200)]
    )
    await center.publish(EstimatorRetrainRequested(target=RUNTIME_TARGET, reason="first"), "e")
    await center.settle()
    same = [job(3000 + n, START + timedelta(days=6, minutes=30 * n), rng=rng) for n in range(100)]
    await feed(center, same)
    decisions = await center.recorder.of(EstimatorDecision)
    evaluations = [d for d in decisions if d.decision == "no_drift"]
    assert [d.decision for d in decisions].count("promoted") == 1, decisions
    assert len(evaluations) == 100 // 20
    assert sorted(d.jobs for d in evaluations)[-2:] == [60, 60]  # the window is full by then


def test_decide_is_pure_over_the_numbers_sense_measured() -> None:
    """No model, no jobs: decide judges the live error it is handed."""
    from agents.events import Envelope
    from agents.promotion import Evaluated, PromotionObservation, Retrain
    from knowledge_base.records import EstimatorRecord

    incumbent = EstimatorRecord(
        id="inc", kind="loglinear-runtime", target=RUNTIME_TARGET, validation={"log_error": 0.1}
    )
    event = Envelope.of(
        JobFinished(job=job(1, START, rng=random.Random(1))), source="t", correlation_id="j"
    )
    agent = ModelPromotion.__new__(ModelPromotion)
    agent.policy = PromotionPolicy()
    agent.trainers = {RUNTIME_TARGET: (fit_loglinear,)}

    def observed(new_jobs: int, live_error: float) -> PromotionObservation:
        return PromotionObservation(
            event=event,
            kind="finished",
            incumbent=incumbent,
            model=fit_loglinear([job(n, START, rng=random.Random(n)) for n in range(30)]),
            new_jobs=new_jobs,
            live_jobs=25,
            live_error=live_error,
            validation_error=0.1,
            metric="log",
        )

    assert agent.decide(observed(19, 0.9)) == []  # not due yet
    drifted = agent.decide(observed(20, 0.9))
    assert [type(a) for a in drifted] == [Retrain, Evaluated]  # reset last: retries redo it
    assert isinstance(drifted[0], Retrain) and drifted[0].live_error == 0.9
    calm = agent.decide(observed(20, 0.12))
    assert isinstance(calm[-1], Evaluated) and len(calm) == 2


async def test_the_live_error_is_scored_off_the_event_loop(
    center: MiniCenter, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import threading

    import agents.promotion as promotion

    threads: list[str] = []
    real_score = promotion.score

    def spying(*args: object, **kwargs: object) -> float | None:
        threads.append(threading.current_thread().name)
        return real_score(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(promotion, "score", spying)
    rng = random.Random(9)
    await center.start(ModelPromotion(center.kb, tmp_path / "estimators"))
    await center.kb.add_jobs(
        [job(n, START + timedelta(minutes=30 * n), rng=rng) for n in range(200)]
    )
    await center.publish(EstimatorRetrainRequested(target=RUNTIME_TARGET, reason="first"), "e")
    await center.settle()
    await feed(
        center,
        [job(4000 + n, START + timedelta(days=6, minutes=30 * n), rng=rng) for n in range(20)],
    )
    assert threads and threading.main_thread().name not in threads


async def test_now_is_the_events_time_so_a_simulation_on_its_own_clock_finds_its_history(
    center: MiniCenter, tmp_path: Path
) -> None:
    """A replay of 2001: 30 days of look-back from the wall clock would find no job."""
    rng = random.Random(13)
    then = datetime(2001, 3, 1, tzinfo=UTC)
    await center.start(ModelPromotion(center.kb, tmp_path / "estimators"))
    await center.kb.add_jobs(
        [job(n, then + timedelta(minutes=30 * n), rng=rng) for n in range(200)]
    )
    asked_at = then + timedelta(days=5)
    await center.publish(
        EstimatorRetrainRequested(target=RUNTIME_TARGET, reason="first"), "e", time=asked_at
    )
    await center.settle()
    [decision] = await center.recorder.of(EstimatorDecision)
    assert decision.decision == "promoted", decision.reason
    serving = await center.kb.promoted_estimator(RUNTIME_TARGET)
    assert serving is not None and serving.created_at == asked_at


@given(
    candidate=st.floats(min_value=0, max_value=10),
    incumbent=st.floats(min_value=0, max_value=10),
    improvement=st.floats(min_value=0, max_value=0.9),
)
def test_judge_promotes_only_a_candidate_better_on_held_out_data(
    candidate: float, incumbent: float, improvement: float
) -> None:
    verdict = judge(candidate, incumbent, PromotionPolicy(min_improvement=improvement))
    if verdict.promote:
        assert candidate < incumbent
    if candidate >= incumbent:
        assert not verdict.promote


# -- the history estimator as the candidate, on a real trace ---------------------------------

SDSC = "SDSC-SP2-1998-4.2-cln.swf.gz"


def sdsc_jobs(shared_data: Path, count: int = 400) -> list[JobRecord]:
    """``count`` finished jobs of SDSC-SP2 (from its 5,000th), moved by whole weeks so the
    last ended 1-8 days ago (Model Promotion looks at the last 30 days of history; the
    hour of the day and the day of the week, which the history estimator reads, stay)."""
    from agents.promotion import usable
    from tools.traces import read_swf

    header, jobs, _ = read_swf(shared_data / "traces" / SDSC)
    records = [j.to_job_record(header, system="testcluster") for j in jobs[5000 : 5000 + 3 * count]]
    records = sorted((r for r in records if usable(r)), key=lambda r: r.end_time or r.submit_time)
    records = records[:count]
    assert records[-1].end_time is not None
    week = timedelta(days=7)
    offset = (datetime.now(UTC) - timedelta(days=1) - records[-1].end_time) // week * week
    return [
        r.model_copy(
            update={
                "submit_time": r.submit_time + offset,
                "start_time": r.start_time + offset if r.start_time else None,
                "end_time": r.end_time + offset if r.end_time else None,
            }
        )
        for r in records
    ]


async def test_on_a_real_trace_the_history_estimator_beats_its_challenger_and_serves_at_once(
    center: MiniCenter, tmp_path: Path, shared_data: Path
) -> None:
    """SDSC-SP2's jobs have users who repeat themselves: what the history estimator reads."""
    from agents.estimation import ResourceEstimation
    from agents.events import EstimateReady, EstimateRequested
    from agents.promotion import HistoryRuntime, log_error
    from knowledge_base.workload import GenericJob, WorkloadSpec

    jobs = sdsc_jobs(shared_data)
    await center.kb.add_jobs(jobs)
    estimation = ResourceEstimation(center.kb)
    await center.start(estimation)
    await center.start(ModelPromotion(center.kb, tmp_path / "estimators"))
    spec = WorkloadSpec(
        name="md", user="u", workload=GenericJob(application="7", cores=2, walltime_s=3600)
    )
    await center.publish(EstimateRequested(plan_id="before", spec=spec), "before")
    await center.publish(
        EstimatorRetrainRequested(target=RUNTIME_TARGET, reason="first model"), "estimators"
    )
    await center.settle(timeout_s=60)
    await center.publish(EstimateRequested(plan_id="after", spec=spec), "after")
    await center.settle(timeout_s=60)

    [decision] = await center.recorder.of(EstimatorDecision)
    assert decision.decision == "promoted" and decision.metric == "log"
    serving = await center.kb.promoted_estimator(RUNTIME_TARGET)
    assert serving is not None and serving.kind == "history-runtime"
    assert serving.id == decision.candidate_id and serving.training_rows == 280
    assert "log_error" in serving.validation and "mape" in serving.validation
    # The challenger was shadow-tested on the same 120 jobs, lost, and is on record.
    [challenger] = [
        e
        for e in await center.kb.list_estimators(target=RUNTIME_TARGET)
        if e.kind == "loglinear-runtime"
    ]
    assert challenger.status is EstimatorStatus.RETIRED and "lost to" in challenger.notes
    assert serving.validation["log_error"] < challenger.validation["log_error"]
    # Resource Estimation served it from the next request, without a restart.
    answers = {r.plan_id: r for r in await center.recorder.of(EstimateReady)}
    assert all(e.estimator_id != serving.id for e in answers["before"].estimates)
    assert answers["after"].estimates[0].estimator_id == serving.id
    # The artifact is settings and jobs (no pickle): loading it replays them into the same
    # model, which predicts what the trained one did.
    loaded = load_runtime_model(serving)
    assert isinstance(loaded, HistoryRuntime)
    holdout = jobs[-120:]
    again = log_error(load_runtime_model(serving), holdout)
    assert again == pytest.approx(log_error(loaded, holdout))


def test_memory_drift_retrains_like_run_time_drift() -> None:
    """Run time within bounds, but the memory request left too many live jobs short."""
    from agents.events import Envelope
    from agents.promotion import Evaluated, PromotionObservation, Retrain
    from knowledge_base.records import EstimatorRecord

    incumbent = EstimatorRecord(
        id="inc", kind="history-runtime", target=RUNTIME_TARGET, validation={"log_error": 0.1}
    )
    event = Envelope.of(
        JobFinished(job=job(1, START, rng=random.Random(1))), source="t", correlation_id="j"
    )
    agent = ModelPromotion.__new__(ModelPromotion)
    agent.policy = PromotionPolicy()
    agent.trainers = {RUNTIME_TARGET: (fit_loglinear,)}

    def observed(oom: float | None, jobs: int) -> PromotionObservation:
        return PromotionObservation(
            event=event,
            kind="finished",
            incumbent=incumbent,
            model=fit_loglinear([job(n, START, rng=random.Random(n)) for n in range(30)]),
            new_jobs=20,
            live_jobs=25,
            live_error=0.11,
            validation_error=0.1,
            memory_jobs=jobs,
            live_oom_rate=oom,
            metric="log",
        )

    drifted = agent.decide(observed(0.2, 25))
    assert [type(a) for a in drifted] == [Retrain, Evaluated]
    assert isinstance(drifted[0], Retrain) and "memory drift" in drifted[0].reason
    assert "20.0% of 25 live jobs" in drifted[0].reason
    for calm in (observed(0.02, 25), observed(0.2, 5), observed(None, 0)):
        assert not any(isinstance(a, Retrain) for a in agent.decide(calm))


def test_the_history_model_reports_its_live_oom_rate() -> None:
    """A history model trained on jobs with used memory judges its own memory requests."""
    from agents.promotion import fit_history, memory_oom_rate

    rng = random.Random(3)
    jobs = []
    for n in range(260):
        record = job(n, START + timedelta(minutes=20 * n), rng=rng)
        used = {"lmp": 2000, "gromacs": 500, "vasp": 8000}[record.application or "lmp"]
        jobs.append(record.model_copy(update={"user": f"u{n % 3}", "used_memory_mb": used}))
    model = fit_history(jobs[:200])
    rate, judged = memory_oom_rate(model, jobs[200:])
    loglinear_rate = memory_oom_rate(fit_loglinear(jobs[:200]), jobs[200:])
    assert loglinear_rate == (None, 0)  # no memory model to judge
    assert judged > 0 and rate is not None and 0 <= rate <= 1


class RacingKB(SQLiteKnowledgeBase):
    """The Scheduler stores its record of a job right after Promotion first touches it
    (looks for it, or writes it): a read-then-write loses that record to the event's
    thinner copy; an insert-if-absent keeps it."""

    scheduler_record: JobRecord | None = None

    async def _other_writer(self) -> None:
        if self.scheduler_record is not None:
            await self.add_jobs([self.scheduler_record])
            self.scheduler_record = None

    async def get_job(self, system: str, job_id: str) -> JobRecord:
        try:
            return await super().get_job(system, job_id)
        except NotFoundError:
            await self._other_writer()  # just after the look: too late for the reader
            raise

    async def add_new_jobs(self, jobs: Sequence[JobRecord]) -> int:
        await self._other_writer()  # the other writer comes first
        return await super().add_new_jobs(jobs)


async def test_a_finished_job_never_replaces_the_record_another_writer_stored(
    tmp_path: Path,
) -> None:
    from agents.events import Envelope

    kb = RacingKB(tmp_path / "kb.db")
    try:
        thin = job(1, START, rng=random.Random(1))
        rich = thin.model_copy(update={"user": "bob", "predicted_runtime_s": 1234})
        kb.scheduler_record = rich
        agent = ModelPromotion(kb, tmp_path / "estimators")
        event = Envelope.of(JobFinished(job=thin), source="t", correlation_id="j")
        await agent.sense(event)
        stored = await kb.get_job("testcluster", "1")
        assert (stored.user, stored.predicted_runtime_s) == ("bob", 1234)
        # and a job nobody wrote is written by Promotion
        other = job(2, START, rng=random.Random(2))
        await agent.sense(Envelope.of(JobFinished(job=other), source="t", correlation_id="k"))
        assert (await kb.get_job("testcluster", "2")).run_s == other.run_s
    finally:
        await kb.close()


async def test_the_window_reads_only_the_latest_jobs_however_long_the_history(
    tmp_path: Path,
) -> None:
    """The window is the newest jobs, read newest first from the store: a bounded read
    (twice the window), not every job of the lookback sorted in Python."""
    rng = random.Random(3)
    kb = SQLiteKnowledgeBase(tmp_path / "kb.sqlite")
    try:
        jobs = [job(n, START + timedelta(minutes=10 * n), rng=rng) for n in range(600)]
        await kb.add_jobs(jobs)
        agent = ModelPromotion(kb, tmp_path / "estimators")
        read: list[int] = []
        query_jobs = kb.query_jobs

        async def counted(query: JobQuery) -> list[JobRecord]:
            found = await query_jobs(query)
            read.append(len(found))
            return found

        kb.query_jobs = counted  # type: ignore[method-assign]

        recent = await agent._recent(50, START + timedelta(days=19))

        assert read == [100]
        assert len(recent) == 50 and all(int(j.job_id) >= 500 for j in recent)
        assert "599" in {j.job_id for j in recent}
    finally:
        await kb.close()
