"""State with one owner: a plan's purpose is what its maker said; job records change by
compare-and-set, so a prediction annotated while the job ends loses neither.

The race is real, not mocked: the annotate's read of the record is held until the
Scheduler has recorded the job's end in the same SQLite knowledge base, as when the two
agents handle their events at the same moment.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from agents.estimation import ResourceEstimation
from agents.events import PlanApproved, PlanFinished
from agents.scheduler import RecordJob, Scheduler, SchedulerConfig
from knowledge_base.cas import update_job
from knowledge_base.records import JobRecord, JobState, PlanStatus
from knowledge_base.sqlite import SQLiteKnowledgeBase
from tests.agents.harness import MiniCenter, dnn_spec, make_plan
from tools.actuators.simulated import EPOCH


def _submitted() -> JobRecord:
    return JobRecord(
        job_id="7",
        system="testcluster",
        state=JobState.PENDING,
        submit_time=EPOCH,
        plan_id="plan-1",
        source="test",
    )


def _ended() -> JobRecord:
    return _submitted().model_copy(
        update={
            "state": JobState.COMPLETED,
            "start_time": EPOCH,
            "end_time": EPOCH + timedelta(seconds=95),
            "run_s": 95,
            "exit_code": 0,
        }
    )


class _HeldRead(SQLiteKnowledgeBase):
    """Runs ``meanwhile`` right after the first read of a job: another writer lands
    between this writer's read and its write."""

    meanwhile: object = None

    async def get_job(self, system: str, job_id: str) -> JobRecord:
        known = await super().get_job(system, job_id)
        if self.meanwhile is not None:
            step, self.meanwhile = self.meanwhile, None
            await step()  # type: ignore[operator]
        return known


async def test_an_annotate_racing_the_jobs_end_keeps_both(tmp_path: Path) -> None:
    kb = _HeldRead(tmp_path / "kb.db")
    try:
        await kb.add_jobs([_submitted()])
        scheduler = Scheduler(kb, {}, bus=None, config=SchedulerConfig())  # type: ignore[arg-type]
        estimation = ResourceEstimation(kb)

        async def the_job_ends() -> None:
            await scheduler.act([RecordJob(record=_ended())], cause=None)  # type: ignore[arg-type]

        kb.meanwhile = the_job_ends
        annotation = _submitted().model_copy(update={"predicted_runtime_s": 90})
        await estimation._annotate(annotation)

        stored = await kb.get_job("testcluster", "7")
        assert (stored.state, stored.run_s, stored.end_time) == (
            JobState.COMPLETED,
            95,
            EPOCH + timedelta(seconds=95),
        )
        assert stored.predicted_runtime_s == 90
    finally:
        await kb.close()


async def test_the_jobs_end_racing_an_annotate_keeps_the_prediction(tmp_path: Path) -> None:
    kb = _HeldRead(tmp_path / "kb.db")
    try:
        await kb.add_jobs([_submitted()])
        scheduler = Scheduler(kb, {}, bus=None, config=SchedulerConfig())  # type: ignore[arg-type]
        estimation = ResourceEstimation(kb)

        async def annotated() -> None:
            await estimation._annotate(_submitted().model_copy(update={"predicted_runtime_s": 90}))

        kb.meanwhile = annotated
        await scheduler.act([RecordJob(record=_ended())], cause=None)  # type: ignore[arg-type]

        stored = await kb.get_job("testcluster", "7")
        assert stored.run_s == 95 and stored.predicted_runtime_s == 90
    finally:
        await kb.close()


async def test_update_job_gives_up_transiently_when_the_record_never_settles(
    tmp_path: Path,
) -> None:
    kb = SQLiteKnowledgeBase(tmp_path / "kb.db")
    try:
        await kb.add_jobs([_submitted()])
        bump = 0

        def always_raced(known: JobRecord | None) -> JobRecord:
            nonlocal bump
            bump += 1
            assert known is not None
            # every try stores behind the helper's back before it writes
            return known.model_copy(update={"run_s": bump})

        original = kb.replace_job

        async def lose(expected: JobRecord | None, new: JobRecord) -> bool:
            await kb.add_jobs([new.model_copy(update={"exit_code": bump})])
            return await original(expected, new)

        kb.replace_job = lose  # type: ignore[method-assign]
        with pytest.raises(Exception, match="kept changing") as raised:
            await update_job(kb, "testcluster", "7", always_raced, tries=3)
        assert getattr(raised.value, "transient", False)
    finally:
        await kb.close()


async def test_a_workload_named_like_a_profile_is_a_workload(tmp_path: Path) -> None:
    async with MiniCenter(tmp_path) as center:
        scheduler = Scheduler(
            center.kb, {"testcluster": center.cluster}, center.bus, SchedulerConfig()
        )
        await center.start(scheduler)
        plan = make_plan("profile-x-0123", dnn_spec("profile-x"))
        await center.publish(PlanApproved(plan=plan), plan.id)
        await center.settle()

        [job] = center.cluster._jobs.values()
        assert "RIGHTSIZE_PROFILE_STEPS" not in job.request.environment
        assert (await center.kb.get_plan(plan.id)).purpose == "workload"
        await center.publish(PlanApproved(plan=plan), plan.id)  # redelivered: no change
        await center.settle()
        assert (await center.kb.get_plan(plan.id)).purpose == "workload"


async def test_a_profiling_run_says_so_in_its_plan_and_its_job(tmp_path: Path) -> None:
    async with MiniCenter(tmp_path) as center:
        scheduler = Scheduler(
            center.kb, {"testcluster": center.cluster}, center.bus, SchedulerConfig()
        )
        await center.start(scheduler)
        plan = make_plan("any-name", dnn_spec("cnn-profile"))
        await center.publish(PlanApproved(plan=plan, purpose="profiling"), plan.id)
        await center.settle()

        [job] = center.cluster._jobs.values()
        assert job.request.environment["RIGHTSIZE_PROFILE_STEPS"] == "20"
        stored = await center.kb.get_plan(plan.id)
        assert stored.purpose == "profiling"
        center.clock.advance(3600)
        await scheduler.monitors["testcluster"].poll_once()
        await center.settle()
        finished = await center.recorder.of(PlanFinished)
        assert [f.purpose for f in finished] == ["profiling"]
        assert finished[0].status in (PlanStatus.COMPLETED, PlanStatus.FAILED)
