"""The learned-priority scheduler: zero weights are EASY exactly; any weights keep the
schedule legal; training is deterministic for a seed and starts from EASY."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from simulations.learned.priority import FEATURES, PriorityPolicy
from simulations.learned.train import JobArrays, TrainingSettings, train_policy
from simulations.replay import replay
from simulations.workload import Workload, load_swf


@pytest.fixture(scope="module")
def kth(shared_data: Path) -> Workload:
    return load_swf(shared_data / "traces" / "KTH-SP2-1996-2.1-cln.swf.gz")


def test_no_policy_and_zero_weights_both_reproduce_the_simulators_easy(kth: Workload) -> None:
    reference = replay(kth, policy="easy", estimate="user")
    zero = PriorityPolicy.from_vector(np.zeros(PriorityPolicy.size(4)), 4)
    for policy in (None, zero):
        start, end = JobArrays.of(kth).schedule(policy)
        np.testing.assert_array_equal(start, reference.start_s)
        np.testing.assert_array_equal(end, reference.end_s)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_any_weights_give_a_legal_schedule(kth: Workload, seed: int) -> None:
    jobs = JobArrays.of(kth.slice(0, 5000))
    vector = np.random.default_rng(seed).normal(0, 2, PriorityPolicy.size(8))
    start, end = jobs.schedule(PriorityPolicy.from_vector(vector, 8))
    assert (start >= jobs.submit_s).all()
    np.testing.assert_array_equal(end - start, np.minimum(jobs.run_s, jobs.req_s))
    # Processors in use never exceed the machine: sweep starts (+) and ends (-).
    times = np.concatenate([start, end])
    deltas = np.concatenate([jobs.procs, -jobs.procs])
    order = np.lexsort((deltas, times))  # at equal times, ends before starts
    assert np.cumsum(deltas[order]).max() <= jobs.machine_procs


def test_training_is_deterministic_and_reports_against_easy(kth: Workload) -> None:
    jobs = JobArrays.of(kth.slice(0, 6000))
    settings = TrainingSettings(
        hidden=4, population=6, elite=2, generations=3, windows=2, window_jobs=1500, seed=7
    )
    first, second = train_policy(jobs, settings), train_policy(jobs, settings)
    assert first.policy == second.policy
    assert len(first.history) == 3
    assert first.easy_objective >= 1 and first.policy_objective >= 1


def test_a_policy_with_the_wrong_number_of_weights_is_refused() -> None:
    with pytest.raises(ValueError, match="weights"):
        PriorityPolicy(hidden=4, weights=[0.0] * 5)


def _shortest_request_first() -> PriorityPolicy:
    """One hidden unit that grows with the request: the shortest request scores lowest."""
    vector = np.zeros(PriorityPolicy.size(1))
    vector[1] = 1.0  # log_request -> the hidden unit
    vector[len(FEATURES) + 1] = 1.0  # the hidden unit -> the score
    return PriorityPolicy.from_vector(vector, 1)


def _hand(jobs: list[tuple[int, int, int, int]], machine: int) -> Workload:
    """jobs: (submit, procs, run, request)."""
    submit, procs, run, request = np.array(jobs, dtype=np.int64).T
    return Workload(
        name="hand",
        machine_procs=machine,
        submit_s=submit,
        run_s=run,
        req_s=request,
        procs=procs,
        user=np.full(len(jobs), -1),
        job_ids=np.arange(1, len(jobs) + 1),
    )


def _starts(jobs: Workload, policy: PriorityPolicy | None) -> list[int]:
    start, _ = JobArrays.of(jobs).schedule(policy)
    return [int(s) for s in start]


def test_the_scores_pick_the_head_where_easy_takes_the_oldest() -> None:
    # One processor, busy until 100; B (50 s) then C (10 s) wait. EASY runs B first; the
    # shortest-request scorer runs C first.
    jobs = _hand([(0, 1, 100, 100), (1, 1, 50, 50), (2, 1, 10, 10)], machine=1)
    assert _starts(jobs, None) == [0, 100, 150]
    assert _starts(jobs, _shortest_request_first()) == [0, 110, 100]


def test_a_scored_queue_backfills_with_easys_tie_rule() -> None:
    # 4 processors: A (1) and B (2) both end at 100. The head H needs 2: its reservation
    # is at 100, when A and B both free theirs, so 2 are spare then and C (1 proc, 500 s)
    # starts at once. Counting only A at the reservation would leave none spare.
    jobs = _hand([(0, 1, 100, 100), (0, 2, 100, 100), (1, 2, 50, 50), (2, 1, 500, 500)], 4)
    easy = replay(jobs, policy="easy", estimate="user").start_s.tolist()
    assert easy == [0, 0, 100, 2]
    assert _starts(jobs, _shortest_request_first()) == easy
