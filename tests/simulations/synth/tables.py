"""Job tables built by hand for the thinning tests (one builder for every test file)."""

from __future__ import annotations

import numpy as np

from simulations.synth.columns import JobTable


def job_table(
    submit_s: np.ndarray, procs: np.ndarray, run_s: np.ndarray, *, users: int = 1
) -> JobTable:
    """Jobs submitted at ``submit_s`` (sorted, the first at 0) asking exactly what they run,
    status 1, by ``users`` users in turn (job i by user i % users)."""
    n = submit_s.size
    return JobTable(
        interarrival_s=np.diff(submit_s, prepend=submit_s[:1]).astype(np.float64),
        procs=procs,
        requested_time_s=run_s.copy(),
        run_s=run_s,
        status=np.ones(n, dtype=np.int64),
        user=np.arange(n, dtype=np.int64) % users,
    )


def big_and_small(rng: np.random.Generator, *, users: int, n: int = 6000) -> JobTable:
    """``n`` jobs 1 s to 1 h apart, 5% of them 128 processors for 12 h (each 3.6% of a
    week of a 256-processor machine), the rest 2 for 1 h."""
    submit = np.cumsum(rng.integers(1, 3600, size=n)).astype(np.float64)
    submit -= submit[0]
    big = rng.random(n) < 0.05
    return job_table(submit, np.where(big, 128, 2), np.where(big, 43_200, 3600), users=users)
