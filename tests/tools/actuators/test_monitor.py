"""Progress parsing and change detection: the pure half of job monitoring."""

from __future__ import annotations

from pathlib import Path

from knowledge_base.records import JobState
from tests.tools.actuators.conftest import Harness, quick_job
from tools.actuators.model import JobStatus, SimulatedWork
from tools.actuators.monitor import Progress, observe, parse_progress


def _status(state: JobState) -> JobStatus:
    return JobStatus(job_id="1", state=state, native_state=state.value.upper())


def test_the_last_progress_line_wins_and_carries_its_unit() -> None:
    output = (
        "loading data\nRIGHTSIZE_PROGRESS epoch=1/50\nloss 0.9\n"
        "RIGHTSIZE_PROGRESS epoch=2/50\nloss 0.7\n"
    )
    assert parse_progress(output) == Progress(unit="epoch", done=2, total=50)
    assert parse_progress("RIGHTSIZE_PROGRESS step=1.2e3") == Progress("step", 1200, None)
    assert parse_progress("no progress here") is None


def test_progress_fraction_is_capped_and_unknown_without_a_total() -> None:
    assert Progress("epoch", 60, 50).fraction == 1.0
    assert Progress("epoch", 10, 40).fraction == 0.25
    assert Progress("step", 10).fraction is None


def test_observe_reports_first_sight_state_changes_and_new_progress_only() -> None:
    pending, running = _status(JobState.PENDING), _status(JobState.RUNNING)
    first = observe(None, pending, None, None)
    assert first is not None and first.state_changed and first.previous_state is None
    assert observe(pending, pending, None, None) is None
    moved = observe(pending, running, None, Progress("epoch", 1, 50))
    assert moved is not None and moved.state_changed and moved.progress_changed
    same = observe(running, running, Progress("epoch", 1, 50), Progress("epoch", 1, 50))
    assert same is None
    done = observe(running, _status(JobState.COMPLETED), None, None)
    assert done is not None and done.finished


async def test_simulated_jobs_report_progress_through_their_output(
    simulated: Harness, workdir: Path
) -> None:
    job_id = await simulated.executor.submit(quick_job(workdir, simulated=SimulatedWork(run_s=40)))
    for _ in range(10):
        await simulated.step()
    progress = parse_progress(await simulated.executor.output_tail(job_id))
    assert progress == Progress("second", 10, 40)
