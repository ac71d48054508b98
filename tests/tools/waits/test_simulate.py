"""Conservative backfilling over the free-processor profile."""

from __future__ import annotations

import numpy as np

from tools.waits.simulate import backfill_starts

I64 = np.int64


def _starts(overtaking: bool = True) -> list[float]:
    # 10 processors, 8 busy for 100 s; pending in order: 5 x 50 s, 2 x 50 s, 10 x 10 s
    return backfill_starts(
        10,
        np.array([100.0]),
        np.array([8], dtype=I64),
        np.array([50.0, 50.0, 10.0]),
        np.array([5, 2, 10], dtype=I64),
        np.array([0, 1, 2], dtype=I64),
        overtaking=overtaking,
    ).tolist()


def test_a_small_job_backfills_into_the_idle_processors() -> None:
    assert _starts() == [100.0, 0.0, 150.0]


def test_without_overtaking_no_job_starts_before_the_one_ahead() -> None:
    assert _starts(overtaking=False) == [100.0, 100.0, 150.0]


def test_a_reservation_is_kept_by_later_jobs() -> None:
    # a 4-proc job may not backfill into a hole that would delay the 10-proc reservation
    starts = backfill_starts(
        10,
        np.array([100.0]),
        np.array([8], dtype=I64),
        np.array([10.0, 500.0]),
        np.array([10, 2], dtype=I64),
        np.array([0, 1], dtype=I64),
    )
    assert starts.tolist() == [100.0, 110.0]


def test_a_job_wider_than_the_machine_still_gets_a_start() -> None:
    starts = backfill_starts(
        4,
        np.zeros(0),
        np.zeros(0, dtype=I64),
        np.array([60.0]),
        np.array([9], dtype=I64),
        np.array([0], dtype=I64),
    )
    assert starts.tolist() == [0.0]
