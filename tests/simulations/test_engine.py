"""The scheduling core against hand-computed schedules, and invariants over real traces."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from knowledge_base.errors import InvalidInputError
from simulations.engine import CONSERVATIVE, SCORE_FEATURES, simulate_arrays
from simulations.replay import Estimate, Order, Policy, replay
from simulations.workload import Workload, load_swf


def _workload(
    jobs: list[tuple[int, int, int, int]], machine: int = 10, users: list[int] | None = None
) -> Workload:
    """jobs: (submit, procs, run, request) in seconds and processors."""
    table = np.array(jobs, dtype=np.int64)
    return Workload(
        name="hand",
        machine_procs=machine,
        submit_s=table[:, 0],
        procs=table[:, 1],
        run_s=table[:, 2],
        req_s=table[:, 3],
        user=np.array(users if users is not None else [-1] * len(jobs), dtype=np.int64),
        job_ids=np.arange(1, len(jobs) + 1),
        dropped=Counter(),
    )


def _starts(workload: Workload, policy: Policy, **kwargs: object) -> list[int]:
    starts: list[int] = replay(workload, policy=policy, **kwargs).start_s.tolist()  # type: ignore[arg-type]
    return starts


def test_easy_backfills_a_short_job_that_ends_before_the_heads_reservation() -> None:
    # J1 holds 6 of 10 processors until 100; J2 (6) must wait for it; J3 (4 procs,
    # 50 s) fits now and ends at 52, before J2's reservation at 100.
    w = _workload([(0, 6, 100, 100), (1, 6, 50, 50), (2, 4, 50, 50)])
    assert _starts(w, "easy") == [0, 100, 2]
    assert _starts(w, "fcfs") == [0, 100, 100]  # no backfill: J3 waits for J2 to start


def test_easy_refuses_a_backfill_that_would_delay_the_head() -> None:
    # J2 needs 8: at its reservation (100) only 2 processors are spare, so J3 (4 procs,
    # 200 s) would push J2 back: it must wait until J2 is done.
    w = _workload([(0, 6, 100, 100), (1, 8, 50, 50), (2, 4, 200, 200)])
    assert _starts(w, "easy") == [0, 100, 150]


def test_conservative_protects_every_reservation_where_easy_protects_only_the_heads() -> None:
    # J4 (4 procs, 250 s) fits in the processors spare at J2's reservation, so EASY starts
    # it at once, which delays J3 to 253. Conservative also reserves J3 (at 200) and
    # starts J4 only after it.
    w = _workload([(0, 6, 100, 100), (1, 6, 100, 100), (2, 8, 100, 100), (3, 4, 250, 250)])
    assert _starts(w, "easy") == [0, 100, 253, 3]
    assert _starts(w, "conservative") == [0, 100, 200, 300]


def test_jobs_are_killed_at_their_request() -> None:
    schedule = replay(_workload([(0, 2, 500, 100), (10, 2, 50, 100)]), policy="easy")
    assert schedule.end_s.tolist() == [100, 60]
    assert schedule.killed.tolist() == [True, False]
    assert schedule.result.killed == 1


def test_last2_predicts_from_the_users_last_two_finished_jobs() -> None:
    # User 0's first two jobs ran 20 s and 40 s of 1000 requested; the third job's
    # estimate is 30 s, which lets it backfill before the head's reservation (t=100)
    # where the request (1000 s) would not.
    jobs = [
        (0, 1, 20, 1000),
        (0, 1, 40, 1000),
        (50, 10, 10, 10),
        (60, 6, 100, 100),
        (61, 10, 10, 10),
        (62, 4, 30, 1000),
    ]
    users = [0, 0, 1, 1, 1, 0]
    w = _workload(jobs, users=users)
    assert _starts(w, "easy", estimate="user")[5] == 170
    assert _starts(w, "easy", estimate="last2")[5] == 62


def test_sjbf_backfills_the_shortest_candidate_where_fcfs_takes_the_first() -> None:
    # J1 holds 6 of 10 until 100; the head J2 (8) waits for it. J3 (4 procs, 90 s) and
    # J4 (4 procs, 20 s) arrive together and both end before the reservation, but only
    # one fits: queue order starts J3, shortest-first J4 (then J3 would end after 100).
    w = _workload([(0, 6, 100, 100), (1, 8, 50, 50), (2, 4, 90, 90), (2, 4, 20, 20)])
    assert _starts(w, "easy") == [0, 100, 2, 150]
    assert _starts(w, "easy", order="sjbf") == [0, 100, 150, 2]


def test_saf_orders_candidates_by_estimate_times_processors() -> None:
    # J3 (1 proc, 90 s: area 90) and J4 (4 procs, 30 s: area 120) cannot start together
    # (4 free): smallest area first starts J3, shortest first J4 (J3 then backfills at 32
    # on the 2 processors spare at the head's reservation).
    w = _workload([(0, 6, 100, 100), (1, 8, 50, 50), (2, 1, 90, 90), (2, 4, 30, 30)])
    assert _starts(w, "easy", order="saf") == [0, 100, 2, 150]
    assert _starts(w, "easy", order="sjbf") == [0, 100, 32, 2]
    with pytest.raises(InvalidInputError, match="backfill order"):
        replay(w, policy="easy", order="lifo")  # type: ignore[arg-type]


def test_xf_queue_order_makes_the_job_with_the_largest_expansion_factor_the_head() -> None:
    # J1 fills the machine until 100. At 100 J2 (6 procs, 1000 s) has waited 99 s, its
    # expansion factor (99 + 1000) / 1000 = 1.1; J3 (6 procs, 10 s) waited 98 s: (98 + 10)
    # / 10 = 10.8. Arrival order starts J2 and J3 waits for it (4 free); xf starts J3 and
    # J2 follows at 110. Shortest-first as the queue order agrees here.
    w = _workload([(0, 10, 100, 100), (1, 6, 1000, 1000), (2, 6, 10, 10)])
    assert _starts(w, "easy") == [0, 100, 1100]
    assert _starts(w, "easy", queue_order="xf") == [0, 110, 100]
    assert _starts(w, "easy", queue_order="sjbf") == [0, 110, 100]
    assert _starts(w, "fcfs", queue_order="xf") == [0, 110, 100]
    with pytest.raises(InvalidInputError) as caught:
        replay(w, policy="easy", queue_order="lifo")  # type: ignore[arg-type]
    assert caught.value.field == "queue_order"
    with pytest.raises(InvalidInputError) as negative:
        replay(w, policy="easy", queue_order="xf", starve_s=-1)
    assert negative.value.field == "starve_s"


def test_a_job_past_the_starvation_bound_goes_first_in_arrival_order() -> None:
    # The same jobs: at 100 J2 has waited 99 s, J3 98 s. With a bound of 98 s J2 is
    # starved and goes first whatever xf says; with 99 s neither is, and xf decides.
    w = _workload([(0, 10, 100, 100), (1, 6, 1000, 1000), (2, 6, 10, 10)])
    assert _starts(w, "easy", queue_order="xf", starve_s=98) == [0, 100, 1100]
    assert _starts(w, "easy", queue_order="xf", starve_s=99) == [0, 110, 100]


def test_a_starved_head_is_protected_from_an_under_estimated_backfill() -> None:
    # J2 (8) waits for J1 (6 of 10, until 100). J3 (4 procs) is estimated at 90 s but asks
    # 1000: by its estimate it ends before J2's reservation and backfills at 2. Once J2
    # has waited past the bound, candidates are judged by their requests (kill times):
    # J3 could run to 1002, so it waits for J2.
    w = _workload([(0, 6, 100, 100), (1, 8, 50, 50), (2, 4, 90, 1000)])
    estimates = np.array([100, 50, 90])
    kwargs: dict[str, object] = {"estimate": "model", "model_estimates_s": estimates}
    assert _starts(w, "easy", queue_order="xf", **kwargs) == [0, 100, 2]
    assert _starts(w, "easy", queue_order="xf", starve_s=0, **kwargs) == [0, 100, 150]


def test_exact_estimates_are_the_run_times_and_say_they_are_an_oracle() -> None:
    # J3 asks for 1000 s but runs 30: with its run time known it backfills at once.
    w = _workload([(0, 6, 100, 100), (1, 8, 50, 50), (2, 4, 30, 1000)])
    assert _starts(w, "easy", estimate="user") == [0, 100, 150]
    schedule = replay(w, policy="easy", estimate="exact")
    assert schedule.start_s.tolist() == [0, 100, 2]
    assert schedule.result.oracle and not replay(w, policy="easy").result.oracle


def test_an_outlived_estimate_moves_to_the_next_conditional_quantile_not_the_request() -> None:
    # J1 (6 procs) is estimated at 50 s, asks 1000, runs 100. When J3 arrives at 60 J1 has
    # outlived its estimate. Raised to its request, the head J2 (8) is reserved at 1000
    # and J3 (4 procs, 100 s) backfills at 60, delaying J2 to 160. From J1's distribution
    # (50 s: 0.5, 120 s: 0.9, 1000 s: 1), the median of what is left past 60 s is 120 s:
    # J2 is reserved at 120, J3 would end after that, so it waits.
    w = _workload([(0, 6, 100, 1000), (1, 8, 50, 50), (60, 4, 100, 100)])
    estimates = np.array([50, 50, 100])
    values = np.array([[50, 120, 1000], [50, 50, 50], [100, 100, 100]])
    cover = np.array([[0.5, 0.9, 1.0], [1.0, 1.0, 1.0], [1.0, 1.0, 1.0]])
    raised = replay(w, policy="easy", estimate="model", model_estimates_s=estimates)
    assert raised.start_s.tolist() == [0, 160, 60]
    corrected = replay(
        w,
        policy="easy",
        estimate="model",
        model_estimates_s=estimates,
        distribution=(values, cover, 0.5),
    )
    assert corrected.start_s.tolist() == [0, 100, 150]
    assert corrected.result.corrected
    # Kill times stay the requests: every job ran its own run time.
    assert (corrected.end_s - corrected.start_s).tolist() == [100, 50, 100]


def _in_use_never_exceeds(
    start: np.ndarray, end: np.ndarray, procs: np.ndarray, machine: int
) -> bool:
    times = np.concatenate([start, end])
    deltas = np.concatenate([procs, -procs])
    order = np.lexsort((deltas, times))  # at equal times, ends (negative) first
    return bool(np.cumsum(deltas[order]).max() <= machine)


@pytest.fixture(scope="module")
def kth(shared_data: Path) -> Workload:
    return load_swf(shared_data / "traces" / "KTH-SP2-1996-2.1-cln.swf.gz")


@pytest.mark.parametrize("starve_s", [None, 72 * 3600])
def test_whole_trace_invariants_hold_with_the_queue_reordered(
    kth: Workload, starve_s: int | None
) -> None:
    schedule = replay(
        kth, policy="easy", order="xf", queue_order="xf", estimate="last2", starve_s=starve_s
    )
    assert (schedule.start_s >= kth.submit_s).all(), "a job started before it was submitted"
    assert _in_use_never_exceeds(schedule.start_s, schedule.end_s, kth.procs, kth.machine_procs)
    assert (schedule.end_s - schedule.start_s == np.minimum(kth.run_s, kth.req_s)).all()
    assert schedule.result.queue_order == "xf"


@pytest.mark.parametrize(
    ("policy", "order", "estimate"),
    [
        ("fcfs", "fcfs", "user"),
        ("easy", "fcfs", "user"),
        ("conservative", "fcfs", "user"),
        ("easy", "sjbf", "last2"),
        ("easy", "saf", "exact"),
    ],
)
def test_whole_trace_invariants_hold(
    kth: Workload, policy: Policy, order: Order, estimate: Estimate
) -> None:
    schedule = replay(kth, policy=policy, order=order, estimate=estimate)
    assert (schedule.start_s >= kth.submit_s).all(), "a job started before it was submitted"
    assert _in_use_never_exceeds(schedule.start_s, schedule.end_s, kth.procs, kth.machine_procs)
    assert (schedule.end_s - schedule.start_s == np.minimum(kth.run_s, kth.req_s)).all()
    assert 0 < schedule.result.utilization <= 1


def test_easy_with_exact_estimates_never_delays_a_head_past_its_reservation(
    kth: Workload,
) -> None:
    exact = np.minimum(kth.run_s, kth.req_s)
    schedule = replay(kth, policy="easy", estimate="model", model_estimates_s=exact)
    had = schedule.reservation_s >= 0
    assert had.sum() > 1000  # the trace really exercises reservations
    assert (schedule.start_s[had] <= schedule.reservation_s[had]).all()


def test_every_shared_trace_loads_with_drops_counted(shared_data: Path) -> None:
    theta = load_swf(shared_data / "traces" / "ALCF-Theta-2022.swf.gz")
    assert theta.jobs > 20000
    assert sum(theta.dropped.values()) + theta.jobs <= 23911


def test_a_scorer_orders_only_the_fcfs_and_easy_queue() -> None:
    one = np.ones(2, dtype=np.int64)
    scorer = (np.zeros((len(SCORE_FEATURES), 1)), np.zeros(1), np.zeros(1), 0.0)
    with pytest.raises(InvalidInputError, match="conservative"):
        simulate_arrays(
            submit_s=np.zeros(2, dtype=np.int64),
            run_s=one,
            req_s=one,
            procs=one,
            est_s=one,
            user=-one,
            machine_procs=1,
            policy=CONSERVATIVE,
            last2=False,
            scorer=scorer,
        )
