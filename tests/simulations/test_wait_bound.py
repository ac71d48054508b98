"""The starvation bound's guarantee, checked job by job on whole traces.

A job that has waited ``B`` goes before every younger job and, once it is the oldest
such, holds a reservation taken from the running jobs' requests (kill times) and
protected by them, so it starts within ``R_max`` (the longest request) of becoming the
head. Hence, with ``k`` older jobs still queued when it passes ``B``:
wait <= B + (k + 1) * R_max, whatever the estimates (here a quarter of each run time,
the under-estimates that delay an unprotected head).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from simulations.replay import replay
from simulations.workload import Workload, load_swf


def _bound_s(w: Workload, start_s: np.ndarray, bound_s: int) -> np.ndarray:
    """Each job's guaranteed latest wait: B + (k + 1) * R_max, k = older jobs still
    queued when the job passes B (jobs are sorted by submit, so every older job was
    submitted by then). Jobs that waited less than B keep B: nothing to count."""
    r_max = int(w.req_s.max())
    limits = np.full(w.jobs, float(bound_s))
    for j in np.flatnonzero(start_s - w.submit_s > bound_s):
        k = int((start_s[:j] > w.submit_s[j] + bound_s).sum())
        limits[j] = bound_s + (k + 1) * r_max
    return limits


def _under_estimated(w: Workload, bound_s: int | None) -> np.ndarray:
    estimates = np.maximum(1, np.minimum(w.run_s, w.req_s) // 4)
    schedule = replay(
        w,
        policy="easy",
        estimate="model",
        model_estimates_s=estimates,
        order="xf",
        queue_order="xf",
        starve_s=bound_s,
    )
    wait: np.ndarray = schedule.wait_s
    return wait


@pytest.mark.parametrize("trace", ["KTH-SP2-1996-2.1-cln", "SDSC-SP2-1998-4.2-cln"])
@pytest.mark.parametrize("bound_h", [12, 48])
def test_no_job_waits_past_the_bound_plus_its_elders_longest_requests(
    shared_data: Path, trace: str, bound_h: int
) -> None:
    w = load_swf(shared_data / "traces" / f"{trace}.swf.gz")
    bound_s = bound_h * 3600
    wait = _under_estimated(w, bound_s)
    limits = _bound_s(w, w.submit_s + wait, bound_s)
    late = np.flatnonzero(wait > limits)
    assert late.size == 0, f"jobs {late[:5]} waited {wait[late[:5]]} s past {limits[late[:5]]}"


def test_without_the_bound_the_same_estimates_starve_a_job_past_it(shared_data: Path) -> None:
    """The check can fail: the unbounded xf queue breaks the 12 h guarantee on SDSC-SP2."""
    w = load_swf(shared_data / "traces" / "SDSC-SP2-1998-4.2-cln.swf.gz")
    wait = _under_estimated(w, None)
    assert (wait > _bound_s(w, w.submit_s + wait, 12 * 3600)).any()
