"""Constraints: enforce() makes any model output legal; the checker counts each rule."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from simulations.synth.columns import JobTable
from simulations.synth.constraints import check_jobs, check_trace, enforce
from simulations.synth.generator import swf_jobs
from tools.traces.swf import SWFJob

MACHINE = 128


def _job(job_id: int, submit: int, **fields: object) -> SWFJob:
    base: dict[str, object] = {
        "job_id": job_id,
        "submit_time_s": submit,
        "wait_s": None,
        "run_s": 50,
        "allocated_procs": 4,
        "avg_cpu_time_s": None,
        "used_memory_kb_per_proc": None,
        "requested_procs": 4,
        "requested_time_s": 100,
        "requested_memory_kb_per_proc": None,
        "status": 1,
        "user_id": 7,
        "group_id": None,
        "executable_id": None,
        "queue_id": None,
        "partition_id": None,
        "preceding_job_id": None,
        "think_time_s": None,
    }
    base.update(fields)
    return SWFJob(**base)  # type: ignore[arg-type]


any_float = st.floats(allow_nan=True, allow_infinity=True, width=64)


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(min_value=1, max_value=200),
    data=st.data(),
)
def test_enforce_makes_any_model_output_pass_every_rule(n: int, data: st.DataObject) -> None:
    # Whatever a diverged model emits (NaN, inf, negatives, fractions, huge values).
    column = arrays(np.float64, n, elements=any_float)
    table = JobTable(
        interarrival_s=data.draw(column),
        procs=data.draw(column),
        requested_time_s=data.draw(column),
        run_s=data.draw(column),
        status=data.draw(column),
        user=data.draw(arrays(np.int64, n, elements=st.integers(-5, 10**6))),
    )
    legal = enforce(table, machine_procs=MACHINE, statuses=[0, 1, 5])
    report = check_jobs(swf_jobs(legal), machine_procs=MACHINE)
    assert report.passed, [r for r in report.rules if r.violations]
    assert report.rows == n


def test_enforce_is_idempotent() -> None:
    rng = np.random.default_rng(3)
    n = 500
    table = JobTable(
        interarrival_s=rng.normal(100, 300, n),
        procs=rng.normal(20, 80, n),
        requested_time_s=rng.lognormal(7, 2, n),
        run_s=rng.lognormal(7, 2, n),
        status=rng.choice([0.0, 1.0, 3.3, 5.0], n),
        user=rng.integers(-1, 50, n),
    )
    once = enforce(table, machine_procs=MACHINE, statuses=[1, 5])
    twice = enforce(once, machine_procs=MACHINE, statuses=[1, 5])
    for name in ("interarrival_s", "procs", "requested_time_s", "run_s", "status", "user"):
        np.testing.assert_array_equal(once.column(name), twice.column(name))
    # A run past its request is cut to the request: the job is killed at its limit.
    over = table.run_s > np.maximum(np.rint(table.requested_time_s), 1)
    np.testing.assert_array_equal(once.run_s[over], once.requested_time_s[over])


def test_checker_counts_every_broken_rule_once() -> None:
    jobs = [
        _job(1, 0),
        _job(2, 10, requested_procs=200, allocated_procs=200),  # bigger than the machine
        _job(3, 20, requested_procs=2.5),  # a fraction of a processor
        _job(4, 30, status=1, run_s=150),  # completed past its request
        _job(5, 40, status=5, run_s=101),  # killed, but past its limit
        _job(6, 40),  # submitted at the same second as job 5
        _job(7, 50, run_s=None),  # run time unknown
        _job(8, 60, submit_time_s=-3),  # negative submit time
    ]
    report = check_jobs(jobs, machine_procs=MACHINE)
    counts = {r.rule: r.violations for r in report.rules}
    assert counts == {
        "valid_swf": 0,
        "integer_procs_within_machine": 2,
        "completed_run_within_request": 1,
        "killed_at_limit": 1,
        "submit_increasing": 2,  # job 6 (tie) and job 8 (goes back in time)
        "no_negative_values": 2,
    }
    assert not report.passed
    assert report.rows_with_violations == 7
    assert "job 4" in report.rule("completed_run_within_request").examples[0]


def test_checker_reads_unparseable_lines_as_violations(tmp_path: Path) -> None:
    path = tmp_path / "broken.swf"
    path.write_text(
        "; MaxProcs: 128\n"
        "1 0 -1 50 4 -1 -1 4 100 -1 1 7 -1 -1 -1 -1 -1 -1\n"
        "2 10 -1 50 2.5 -1 -1 2.5 100 -1 1 7 -1 -1 -1 -1 -1 -1\n"  # fractional procs
        "3 20 -1 -7 4 -1 -1 4 100 -1 1 7 -1 -1 -1 -1 -1 -1\n"  # negative run
        "4 30 -1 50 4\n"  # truncated line
    )
    report = check_trace(path)
    counts = {r.rule: r.violations for r in report.rules}
    assert counts["integer_procs_within_machine"] == 1
    assert counts["no_negative_values"] == 1
    assert counts["valid_swf"] == 1
    assert report.rows == 4
    assert report.rows_with_violations == 3


def test_a_header_without_maxprocs_breaks_valid_swf(tmp_path: Path) -> None:
    path = tmp_path / "headless.swf"
    path.write_text("1 0 -1 50 4 -1 -1 4 100 -1 1 7 -1 -1 -1 -1 -1 -1\n")
    report = check_trace(path)
    assert report.rule("valid_swf").violations == 1
    assert "MaxProcs" in report.rule("valid_swf").examples[0]


def test_real_sdsc_trace_breaks_the_kill_rule_the_generators_obey(shared_data: Path) -> None:
    # The checker is not written to pass: the real log has jobs that ran past their
    # request (4,081 cancelled, 53 completed), which a synthetic trace never has.
    report = check_trace(shared_data / "traces" / "SDSC-SP2-1998-4.2-cln.swf.gz")
    assert report.rule("killed_at_limit").violations == 4081
    assert report.rule("completed_run_within_request").violations == 53
    assert report.rule("integer_procs_within_machine").violations == 0


def test_header_is_checked_for_maxprocs_in_memory() -> None:
    report = check_jobs([_job(1, 0)], machine_procs=None, header_problem="no MaxProcs line")
    assert report.rule("valid_swf").violations == 1
