"""The Re-scheduler's rules, called directly: they are pure functions of the plan and the end."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime

from hypothesis import given, settings
from hypothesis import strategies as st

from agents.rescheduler import (
    Finish,
    JobEnd,
    Limits,
    NextJob,
    Replan,
    ReschedulePolicy,
    as_of,
    on_job_end,
    on_near_limit,
    on_progress,
    resubmission,
    revise,
    submitted,
)
from knowledge_base.records import (
    CascadeSegment,
    Interval,
    JobState,
    Plan,
    PlanRevision,
    PlanStatus,
    SegmentState,
    WalltimeExtension,
)
from tests.agents.harness import dnn_spec, generic_spec, make_plan

DEBUG = Limits(where="c/debug", max_memory_mb=4096, max_walltime_s=60)
BATCH = Limits(where="c/batch", max_memory_mb=20000, max_walltime_s=600)


def with_jobs(plan: Plan, *jobs: tuple[int, str, str, int]) -> Plan:
    """``plan`` with submitted jobs (index, job id, state, walltime) appended."""
    entries = [CascadeSegment(index=i, job_id=j, state=s, walltime_s=w) for i, j, s, w in jobs]
    return plan.model_copy(update={"segments": [*plan.segments, *entries]})


def test_a_completed_job_at_its_total_completes_the_plan() -> None:
    plan = with_jobs(make_plan("p", dnn_spec(), segments=3), (0, "1", "running", 60))
    end = JobEnd(job_id="1", state=JobState.COMPLETED, done=40, total=40, unit="epoch")
    outcome = on_job_end(plan, end, limits=DEBUG, checkpointable=True)
    assert isinstance(outcome, Finish) and outcome.status is PlanStatus.COMPLETED
    assert "epoch 40/40" in outcome.reason


def test_a_checkpointed_segment_below_the_total_gets_the_next_segment() -> None:
    plan = with_jobs(make_plan("p", dnn_spec(), segments=3), (0, "1", "running", 60))
    end = JobEnd(job_id="1", state=JobState.COMPLETED, done=7, total=40, unit="epoch")
    outcome = on_job_end(plan, end, limits=DEBUG, checkpointable=True)
    assert isinstance(outcome, NextJob)
    assert (outcome.kind, outcome.segment_index, outcome.attempt) == ("next_segment", 1, 1)
    assert outcome.walltime_s == 60 and "epoch 7/40" in outcome.reason


def test_segments_past_the_plan_keep_going_until_the_work_is_done() -> None:
    plan = with_jobs(
        make_plan("p", dnn_spec(), segments=1),
        (0, "1", "completed", 60),
        (1, "2", "running", 60),
    )
    end = JobEnd(job_id="2", state=JobState.COMPLETED, done=30, total=40, previous_done=20)
    outcome = on_job_end(plan, end, limits=DEBUG, checkpointable=True)
    assert isinstance(outcome, NextJob) and outcome.segment_index == 2


def test_a_segment_that_made_no_progress_stops_the_cascade() -> None:
    plan = with_jobs(make_plan("p", dnn_spec(), segments=3), (1, "2", "running", 60))
    end = JobEnd(job_id="2", state=JobState.COMPLETED, done=7, total=40, previous_done=7)
    outcome = on_job_end(plan, end, limits=DEBUG, checkpointable=True)
    assert isinstance(outcome, Finish) and outcome.status is PlanStatus.FAILED
    assert "made no progress" in outcome.reason


def test_a_checkpointing_job_that_timed_out_after_progress_resumes_in_the_next_segment() -> None:
    plan = with_jobs(make_plan("p", dnn_spec(), segments=3), (0, "1", "running", 60))
    end = JobEnd(job_id="1", state=JobState.TIMEOUT, done=5, total=40)
    outcome = on_job_end(plan, end, limits=DEBUG, checkpointable=True)
    assert isinstance(outcome, NextJob) and outcome.kind == "next_segment"
    assert "hit its walltime" in outcome.reason


def test_a_checkpointing_job_that_timed_out_before_its_first_checkpoint_says_so() -> None:
    # At the partition's limit: stop, and say the work unit did not fit, not "cannot checkpoint".
    plan = with_jobs(make_plan("p", dnn_spec(), segments=3), (0, "1", "running", 60))
    end = JobEnd(job_id="1", state=JobState.TIMEOUT)
    outcome = on_job_end(plan, end, limits=DEBUG, checkpointable=True)
    assert isinstance(outcome, Finish) and outcome.status is PlanStatus.FAILED
    assert "made no progress to resume from" in outcome.reason
    assert "cannot checkpoint" not in outcome.reason and "epoch" in outcome.reason
    # Below the limit: a longer walltime, with the same reason.
    retried = on_job_end(plan, end, limits=BATCH, checkpointable=True)
    assert isinstance(retried, NextJob) and retried.kind == "longer_walltime"
    assert retried.walltime_s == 120 and "made no progress to resume from" in retried.reason


def test_a_failure_is_not_retried_and_the_reason_names_the_exit_code() -> None:
    plan = with_jobs(make_plan("p", generic_spec()), (0, "1", "running", 60))
    end = JobEnd(job_id="1", state=JobState.FAILED, exit_code=3)
    outcome = on_job_end(plan, end, limits=DEBUG, checkpointable=False)
    assert isinstance(outcome, Finish) and "exit code 3" in outcome.reason


def test_a_cascade_stops_at_max_segments() -> None:
    jobs = [(i, str(i), "completed", 60) for i in range(4)]
    plan = with_jobs(make_plan("p", dnn_spec(), segments=2), *jobs)
    plan = plan.model_copy(
        update={
            "segments": [
                *plan.segments[:-1],
                plan.segments[-1].model_copy(update={"state": "running"}),
            ]
        }
    )
    end = JobEnd(job_id="3", state=JobState.COMPLETED, done=10, total=40, previous_done=8)
    outcome = on_job_end(
        plan, end, limits=DEBUG, checkpointable=True, policy=ReschedulePolicy(max_segments=4)
    )
    assert isinstance(outcome, Finish) and "max_segments=4" in outcome.reason


def test_the_view_as_of_a_job_drops_what_came_after_it() -> None:
    plan = with_jobs(
        make_plan("p", dnn_spec(), segments=2),
        (0, "1", "out_of_memory", 60),
        (0, "2", "completed", 60),
    )
    view = as_of(plan, "1")
    assert [(s.job_id, s.state) for s in submitted(view)] == [("1", "running")]
    assert len(view.segments) == 3  # the two planned segments stay


def _run_ooms(
    start_mb: int, peak_mb: int, limits: Limits, policy: ReschedulePolicy
) -> tuple[list[int], Finish | None]:
    """Drive the rules through OOM kills until the job fits or the rules stop it."""
    plan = make_plan("p", generic_spec(), memory_mb=start_mb)
    asked: list[int] = []
    for n in range(50):
        assert plan.option is not None
        memory = plan.option.memory_mb
        asked.append(memory)
        job = str(n)
        plan = with_jobs(plan, (0, job, "running", 60))
        if memory >= peak_mb:
            return asked, None
        outcome = on_job_end(
            plan,
            JobEnd(job_id=job, state=JobState.OUT_OF_MEMORY),
            limits=limits,
            checkpointable=False,
            policy=policy,
        )
        segments = [
            s.model_copy(update={"state": "out_of_memory"}) if s.job_id == job else s
            for s in plan.segments
        ]
        plan = plan.model_copy(update={"segments": segments})
        if isinstance(outcome, Finish):
            return asked, outcome
        assert outcome.kind == "more_memory"
        plan = plan.model_copy(
            update={"option": plan.option.model_copy(update={"memory_mb": outcome.memory_mb})}
        )
    raise AssertionError("the rules never stopped")


@settings(max_examples=200, deadline=None)
@given(
    start_mb=st.integers(min_value=256, max_value=8000),
    peak_mb=st.integers(min_value=1, max_value=40000),
    max_attempts=st.integers(min_value=0, max_value=6),
    growth=st.floats(min_value=1.1, max_value=3.0),
)
def test_oom_retries_grow_memory_within_the_limit_and_are_bounded(
    start_mb: int, peak_mb: int, max_attempts: int, growth: float
) -> None:
    limits = BATCH
    policy = ReschedulePolicy(max_oom_attempts=max_attempts, memory_growth=growth)
    asked, stopped = _run_ooms(min(start_mb, limits.max_memory_mb), peak_mb, limits, policy)
    assert all(b > a for a, b in itertools.pairwise(asked))  # strictly more each time
    assert all(m <= limits.max_memory_mb for m in asked)
    assert len(asked) <= 1 + max_attempts  # the first submission and the bounded retries
    if stopped is not None:
        assert stopped.status is PlanStatus.FAILED
        assert "out of memory" in stopped.reason
    else:
        assert asked[-1] >= peak_mb


@settings(max_examples=100, deadline=None)
@given(
    walltime_min=st.integers(min_value=1, max_value=10),
    max_attempts=st.integers(min_value=0, max_value=4),
)
def test_timeout_retries_without_checkpoint_never_pass_the_partition_limit(
    walltime_min: int, max_attempts: int
) -> None:
    policy = ReschedulePolicy(max_timeout_attempts=max_attempts)
    plan = make_plan("p", generic_spec(), partition="batch", walltime_s=walltime_min * 60)
    walltime = walltime_min * 60
    for n in range(20):
        plan = with_jobs(plan, (0, str(n), "running", walltime))
        outcome = on_job_end(
            plan,
            JobEnd(job_id=str(n), state=JobState.TIMEOUT),
            limits=BATCH,
            checkpointable=False,
            policy=policy,
        )
        segments = [
            s.model_copy(update={"state": "timeout"}) if s.job_id == str(n) else s
            for s in plan.segments
        ]
        plan = plan.model_copy(update={"segments": segments})
        if isinstance(outcome, Finish):
            assert "walltime" in outcome.reason or "timed out" in outcome.reason
            break
        assert outcome.walltime_s > walltime and outcome.walltime_s <= BATCH.max_walltime_s
        walltime = outcome.walltime_s
    else:
        raise AssertionError("never stopped")
    assert n <= max_attempts


@given(
    fraction=st.floats(min_value=0.06, max_value=0.99),
    elapsed=st.floats(min_value=20, max_value=10_000),
)
def test_divergence_asks_for_a_replan_exactly_when_the_pace_projects_past_the_bound(
    fraction: float, elapsed: float
) -> None:
    expected = Interval(point=1000, low=800, high=1200)
    answer = on_progress(expected, elapsed_s=elapsed, fraction_at_start=0.0, fraction_now=fraction)
    projected = elapsed / fraction
    if projected > 1200 * 1.5:
        assert isinstance(answer, Replan)
        assert answer.remaining_fraction == 1 - fraction
    else:
        assert answer is None


def test_divergence_is_not_judged_on_too_little_progress_or_too_soon() -> None:
    expected = Interval(point=100, low=80, high=120)
    assert on_progress(expected, elapsed_s=1000, fraction_at_start=0.5, fraction_now=0.51) is None
    assert on_progress(expected, elapsed_s=10, fraction_at_start=0.0, fraction_now=0.06) is None


def test_a_job_that_cannot_checkpoint_asks_for_a_replan_when_it_will_outrun_its_walltime() -> None:
    expected = Interval(point=130, low=110, high=180)  # x1.5 bound: 270 s

    def judge(**job: object) -> Replan | None:
        # 15% in 37 s since the first line, 50 s since the start: a run of ~247 s.
        return on_progress(
            expected,
            elapsed_s=37.0,
            fraction_at_start=0.0,
            fraction_now=0.15,
            job_elapsed_s=50,
            job_walltime_s=240,
            **job,  # type: ignore[arg-type]
        )

    # Inside the estimate's bound, but 50 s + 85% of 247 s is past a 240 s walltime, and
    # a timeout loses a run that cannot checkpoint.
    outrun = judge(checkpointable=False)
    assert isinstance(outrun, Replan) and "past its walltime of 4 min" in outrun.reason
    # A cascade segment stops itself at its budget: it does not outrun its walltime.
    assert judge(checkpointable=True) is None


def test_a_revision_is_applied_once_and_kept_in_the_plans_history() -> None:
    plan = with_jobs(make_plan("p", dnn_spec(), segments=3), (0, "1", "running", 60))
    assert plan.option is not None
    batch = plan.option.model_copy(update={"partition": "batch", "walltime_s": 300})
    slower = PlanRevision(revision=1, action="extend", reason="slower")
    once = revise(
        plan,
        slower,
        option=batch,
        start_index=1,
        segments=[CascadeSegment(index=0, walltime_s=300)],
    )
    assert once is not None and once.option is not None and once.option.partition == "batch"
    assert [(s.index, s.walltime_s, s.job_id) for s in once.segments] == [
        (0, 60, None),
        (1, 300, None),
        (0, 60, "1"),
    ]
    assert once.replans == [slower]
    assert once.reason == plan.reason  # the history is typed, not joined into the reason
    assert revise(once, slower) is None
    assert revise(once, slower.model_copy(update={"action": "keep"})) is None


def test_a_plan_stored_with_its_history_in_the_reason_loads_it_typed() -> None:
    """Plans stored before the history was typed kept it after " || " in ``reason``."""
    stored = make_plan("p", dnn_spec()).model_dump(mode="json")
    stored["reason"] = (
        "job 9 completed (step 10/10) after 2 jobs || re-plan 1: extend: slower || "
        "re-plan 2: stop: the plan was stopped for the reason it ends with (above)"
    )
    for segment in stored["segments"]:
        segment["state"] = None
    stored["segments"].append({"index": 0, "walltime_s": 60, "job_id": "9", "state": "replanned"})
    plan = Plan.model_validate(stored)
    assert plan.reason == "job 9 completed (step 10/10) after 2 jobs"
    assert [(r.revision, r.action) for r in plan.replans] == [(1, "extend"), (2, "stop")]
    assert plan.replans[0].reason == "slower"
    assert plan.segments[-1].state is SegmentState.REPLANNED and plan.segments[-1].state.ended
    # A reason that merely contains the mark is left alone.
    stored["reason"] = "a || b"
    assert Plan.model_validate(stored).reason == "a || b"


def test_one_definition_of_a_job_that_ended() -> None:
    ended = {s for s in JobState if s.ended}
    assert ended == {
        JobState.COMPLETED,
        JobState.FAILED,
        JobState.TIMEOUT,
        JobState.OUT_OF_MEMORY,
        JobState.CANCELLED,
    }
    for state in JobState:  # the ledger agrees with the job, and adds its own two
        assert SegmentState.of(state).ended == state.ended
    assert SegmentState.REPLANNED.ended and not SegmentState.SUBMITTING.ended


def test_only_the_job_in_flight_or_one_a_replan_took_is_replaced() -> None:
    plan = with_jobs(make_plan("p", dnn_spec(), segments=3), (0, "1", "completed", 60))
    running = with_jobs(plan, (1, "2", "running", 60))
    assert resubmission(running, "2", checkpointable=True) == (2, 1)
    assert resubmission(running, "2", checkpointable=False) == (1, 2)
    assert resubmission(running, "1", checkpointable=True) is None  # ended on its own
    taken = with_jobs(plan, (1, "2", SegmentState.REPLANNED, 60), (2, "3", "pending", 60))
    assert resubmission(taken, "2", checkpointable=True) == (2, 1)  # the same answer again


# -- extending in place near the limit ------------------------------------------------------

ON = ReschedulePolicy(extend_in_place=True)


def test_a_job_far_from_its_limit_is_not_extended() -> None:
    assert (
        on_near_limit(job_elapsed_s=100, limit_s=600, ceiling_s=3600, tried=False, policy=ON)
        is None
    )


def test_a_job_near_its_limit_is_extended_to_its_projection_in_whole_minutes() -> None:
    extend = on_near_limit(
        job_elapsed_s=500, limit_s=600, ceiling_s=3600, tried=False, projected_run_s=900, policy=ON
    )
    assert extend is not None
    assert (extend.from_s, extend.to_s) == (600, 1020)  # 900 + the 120 s margin
    assert "projects 15 min" in extend.reason and "up to 60 min" in extend.reason


def test_without_a_projection_the_limit_grows_by_the_walltime_growth() -> None:
    extend = on_near_limit(job_elapsed_s=500, limit_s=600, ceiling_s=3600, tried=False, policy=ON)
    assert extend is not None and extend.to_s == 1200


def test_an_extension_never_passes_the_ceiling() -> None:
    extend = on_near_limit(
        job_elapsed_s=590, limit_s=600, ceiling_s=700, tried=False, projected_run_s=5000, policy=ON
    )
    assert extend is not None and extend.to_s == 700


def test_extension_is_off_by_default() -> None:
    assert on_near_limit(job_elapsed_s=590, limit_s=600, ceiling_s=3600, tried=False) is None


def test_no_extension_at_the_ceiling_once_tried_without_a_ceiling_or_when_turned_off() -> None:
    def near(ceiling_s: int | None, tried: bool, policy: ReschedulePolicy = ON) -> bool:
        found = on_near_limit(
            job_elapsed_s=590, limit_s=600, ceiling_s=ceiling_s, tried=tried, policy=policy
        )
        return found is not None

    assert near(3600, tried=False, policy=ON)
    assert not near(600, tried=False, policy=ON)
    assert not near(3600, tried=True)
    assert not near(None, tried=False, policy=ON)
    assert not near(3600, tried=False, policy=ReschedulePolicy(extend_in_place=False))


def test_a_timeout_after_an_extension_grows_from_the_extended_limit() -> None:
    plan = make_plan("p-ext", generic_spec(), partition="batch", walltime_s=60)
    extended = CascadeSegment(
        index=0,
        walltime_s=60,
        job_id="1",
        state=SegmentState.RUNNING,
        ceiling_s=120,
        extensions=[WalltimeExtension(from_s=60, to_s=120, at=datetime(2026, 1, 1, tzinfo=UTC))],
    )
    plan = plan.model_copy(update={"segments": [extended]})
    outcome = on_job_end(
        plan,
        JobEnd(job_id="1", state=JobState.TIMEOUT),
        limits=Limits(where="c/batch", max_memory_mb=4096, max_walltime_s=600),
        checkpointable=False,
    )
    assert isinstance(outcome, NextJob) and outcome.walltime_s == 240


# A job's predicted peak: P(use <= MB). Of the jobs needing more than 2 GB (F = 0.9), 98 %
# fit in 8 GB: (0.998 - 0.9) / 0.1 = 0.98.
PEAK = ((0.5, 1024.0), (0.9, 2048.0), (0.95, 3072.0), (0.99, 6144.0), (0.998, 8192.0))


def test_after_an_oom_the_raise_comes_from_the_distribution_given_it_needed_more() -> None:
    plan = with_jobs(make_plan("p", generic_spec(), memory_mb=2048), (0, "1", "running", 60))
    end = JobEnd(job_id="1", state=JobState.OUT_OF_MEMORY, memory_distribution_mb=PEAK)
    outcome = on_job_end(plan, end, limits=BATCH, checkpointable=False)
    assert isinstance(outcome, NextJob) and outcome.kind == "more_memory"
    assert outcome.memory_mb == 8192  # not 1.5 x 2048 = 3 GB
    assert "predicted distribution given it needed more than 2.0 GB" in outcome.reason


def test_a_looser_oom_target_raises_less() -> None:
    plan = with_jobs(make_plan("p", generic_spec(), memory_mb=2048), (0, "1", "running", 60))
    end = JobEnd(job_id="1", state=JobState.OUT_OF_MEMORY, memory_distribution_mb=PEAK)
    policy = ReschedulePolicy(memory_oom_target=0.55)
    outcome = on_job_end(plan, end, limits=BATCH, checkpointable=False, policy=policy)
    assert isinstance(outcome, NextJob) and outcome.memory_mb == 3072


def test_a_kill_past_everything_the_distribution_foresaw_falls_back_to_the_factor() -> None:
    plan = with_jobs(make_plan("p", generic_spec(), memory_mb=9216), (0, "1", "running", 60))
    end = JobEnd(job_id="1", state=JobState.OUT_OF_MEMORY, memory_distribution_mb=PEAK)
    outcome = on_job_end(plan, end, limits=BATCH, checkpointable=False)
    assert isinstance(outcome, NextJob) and outcome.memory_mb == 14336  # 1.5 x 9 GB
    assert "(x1.5)" in outcome.reason
