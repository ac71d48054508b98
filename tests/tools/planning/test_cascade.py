"""Cascades: every segment fits the limit, and the segments' work adds up to the run."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from tools.planning.cascade import Segment, cascade_length, split_run


def test_a_run_that_fits_is_one_job_without_restart_overhead() -> None:
    assert split_run(3000, max_walltime_s=3600, overhead_s=300) == [Segment(3000, 3000)]


def test_a_long_run_through_a_one_hour_queue_is_a_chain_of_short_jobs() -> None:
    segments = split_run(9 * 3600, max_walltime_s=3600, overhead_s=300)
    assert segments is not None
    assert len(segments) == 10  # 9 h of work in shares of at most 55 minutes
    assert sum(s.work_s for s in segments) == 9 * 3600
    assert all(s.walltime_s <= 3600 for s in segments)


def test_a_limit_shorter_than_the_overhead_leaves_no_cascade() -> None:
    assert split_run(7200, max_walltime_s=60, overhead_s=300) is None


def test_the_length_of_an_absurd_cascade_is_counted_without_building_it() -> None:
    # 10^12 samples of ResNet-50 once made a list of billions of segments (#9's fuzz OOM).
    assert cascade_length(10**15, max_walltime_s=3600, overhead_s=300) == 303_030_303_031
    assert cascade_length(3000, max_walltime_s=3600, overhead_s=300) == 1
    assert cascade_length(7200, max_walltime_s=60, overhead_s=300) is None


@settings(max_examples=200, deadline=None)
@given(
    run_s=st.integers(1, 60 * 86400),
    max_minutes=st.integers(1, 60 * 24 * 7),
    overhead_s=st.integers(0, 1800),
    min_minutes=st.integers(0, 30),
)
def test_segments_fit_and_add_up(
    run_s: int, max_minutes: int, overhead_s: int, min_minutes: int
) -> None:
    max_walltime_s = max_minutes * 60
    min_walltime_s = min(min_minutes, max_minutes) * 60
    segments = split_run(
        run_s, max_walltime_s=max_walltime_s, overhead_s=overhead_s, min_walltime_s=min_walltime_s
    )
    count = cascade_length(run_s, max_walltime_s=max_walltime_s, overhead_s=overhead_s)
    assert count == (None if segments is None else len(segments))
    if segments is None:
        assert run_s > max_walltime_s and overhead_s >= max_walltime_s
        return
    assert sum(s.work_s for s in segments) == run_s
    for segment in segments:
        assert min_walltime_s <= segment.walltime_s <= max_walltime_s
        assert segment.walltime_s % 60 == 0
        needed = segment.work_s + (overhead_s if len(segments) > 1 else 0)
        assert segment.walltime_s >= needed
