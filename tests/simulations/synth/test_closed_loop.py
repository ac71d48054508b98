"""Users who wait for a short-run job's end: the share measured, and drawn jobs moved to it."""

from __future__ import annotations

import numpy as np
import pytest

from knowledge_base.errors import InvalidInputError
from simulations.synth.closed_loop import STRETCH_S, after_short_share, wait_for_short_runs
from simulations.synth.columns import JobTable
from simulations.synth.load import easy_wait_s, offered_load, short_run
from simulations.synth.thinning import thin_to_load
from tests.simulations.synth.tables import job_table


def _blocked_users() -> JobTable:
    """A 64-processor machine held by a machine-wide 50 minutes from t=0; two users each
    submit a machine-wide 30 s job behind it (they end at 3,030 s and 3,060 s), then a
    1-wide job: user 1 at 600 s (before the end), user 2 at 3,100 s (after it). User 1's
    third job comes 300 s after its second."""
    submit = np.array([0.0, 10.0, 20.0, 600.0, 900.0, 3100.0])
    procs = np.array([64, 64, 64, 1, 1, 1])
    run = np.array([3000.0, 30.0, 30.0, 600.0, 600.0, 600.0])
    table = job_table(submit, procs, run)
    table.user = np.array([0, 1, 2, 1, 1, 2])
    return table


def test_the_share_counts_next_jobs_within_the_hour_after_a_short_runs_end() -> None:
    table = _blocked_users()
    # Pairs after a short-run job: (1 -> 3) before its end, (2 -> 5) after: 1 of 2.
    assert after_short_share(table, 64) == pytest.approx(0.5)
    # A next job more than STRETCH_S later is not a pair: user 2's falls out.
    table.interarrival_s[5] = 20.0 + STRETCH_S + 100.0 - 900.0
    assert after_short_share(table, 64) == pytest.approx(0.0)
    # No short-run job followed by another of the same user: no share; users unknown
    # (below 0) pair with nothing.
    table.user = np.array([0, 1, 2, 3, 4, 5])
    assert after_short_share(table, 64) is None
    table.user = np.full(6, -1)
    assert after_short_share(table, 64) is None


def test_jobs_following_a_short_run_move_after_its_end_with_the_users_later_jobs() -> None:
    table = _blocked_users()
    moved = wait_for_short_runs(table, 64, 1.0, np.zeros(len(table)))
    # User 1's second job moves from 600 s to its short-run job's end (3,030 s), its third
    # keeps its 300 s gap (3,330 s); nothing else moves, nothing moves earlier.
    assert after_short_share(moved, 64) == pytest.approx(1.0)
    by_time = sorted(zip(moved.submit_s.tolist(), moved.user.tolist(), strict=True))
    assert by_time == [
        (0.0, 0),
        (10.0, 1),
        (20.0, 2),
        (3030.0, 1),
        (3100.0, 2),
        (3330.0, 1),
    ]
    assert moved.start_s == table.start_s
    # A uniform above the probability leaves the job where it was; a share the table has
    # already leaves it as it is.
    kept = wait_for_short_runs(table, 64, 1.0, np.ones(len(table)))
    assert np.array_equal(kept.submit_s, table.submit_s)
    assert wait_for_short_runs(table, 64, 0.5, np.zeros(len(table))) is table


def test_a_drawn_trace_is_moved_to_about_the_share_asked() -> None:
    # 200 users on a busy 64-processor machine, half their jobs short-run: the share
    # rises to about the one asked (0.67 -> 0.88 of 0.9; one pass: 0.85), and the first
    # job stays at t=0.
    rng = np.random.default_rng(0)
    n = 4000
    submit = np.sort(rng.uniform(0, 40 * 86_400, n))
    submit -= submit[0]
    run = np.where(rng.random(n) < 0.5, 30.0, rng.uniform(600, 7200, n))
    table = job_table(submit, rng.integers(1, 33, n), run)
    table.user = (np.arange(n) // 4) % 200  # runs of 4 jobs by one user
    before = after_short_share(table, 64)
    assert before is not None and before < 0.7
    moved = wait_for_short_runs(table, 64, 0.9, rng.random(n))
    after = after_short_share(moved, 64)
    assert after is not None and abs(after - 0.9) < 0.03
    assert moved.submit_s[0] == 0.0 and len(moved) == n
    assert np.all(np.diff(moved.submit_s) >= 0)
    assert sorted(moved.run_s.tolist()) == sorted(table.run_s.tolist())


@pytest.mark.parametrize(
    ("share", "u", "field"),
    [
        (1.5, np.zeros(6), "after_short_share"),
        (float("nan"), np.zeros(6), "after_short_share"),
        (0.5, np.zeros(5), "u"),
    ],
)
def test_a_bad_share_or_uniforms_are_refused_by_name(
    share: float, u: np.ndarray, field: str
) -> None:
    with pytest.raises(InvalidInputError) as caught:
        wait_for_short_runs(_blocked_users(), 64, share, u)
    assert caught.value.field == field


def test_thinning_judges_the_wait_on_the_moved_jobs() -> None:
    # Thinning a denser draw to a load and an EASY wait, with a share asked: the
    # survivors have about that share, and the wait asked is met on the moved jobs
    # (moving them after the search would shorten it).
    rng = np.random.default_rng(1)
    n = 6000
    submit = np.sort(rng.uniform(0, 36 * 86_400, n))
    submit -= submit[0]
    run = np.where(rng.random(n) < 0.4, 30.0, rng.uniform(1800, 4 * 3600, n))
    table = job_table(submit, rng.integers(1, 17, n), run)
    table.user = (np.arange(n) // 4) % 300  # runs of 4 jobs by one user
    target = offered_load(table, 64) / 1.5
    options = dict(
        target_load=target,
        machine_procs=64,
        n_jobs=n // 2,
        cap_load=10.0,
        backlog_scale_s=3 * 3600.0,
    )
    plain, _ = thin_to_load(table, rng=np.random.default_rng(2), **options)  # type: ignore[arg-type]
    wait_asked = easy_wait_s(plain, 64)
    plain_share = after_short_share(plain, 64)
    assert plain_share is not None
    asked = plain_share + 0.2
    unsearched, _ = thin_to_load(
        table,
        rng=np.random.default_rng(2),
        after_short_target=asked,
        **options,  # type: ignore[arg-type]
    )
    looped, _ = thin_to_load(
        table,
        rng=np.random.default_rng(2),
        easy_wait_target_s=wait_asked,
        after_short_target=asked,
        **options,  # type: ignore[arg-type]
    )
    share = after_short_share(looped, 64)
    assert share is not None and abs(share - asked) < 0.2 / 3
    # Here 0.68 of 0.73 asked (0.53 before), the wait 2,570 s of 2,564 s asked; moved
    # at the strength without the wait asked, 2,345 s.
    assert easy_wait_s(looped, 64) == pytest.approx(wait_asked, rel=0.05)
    assert easy_wait_s(unsearched, 64) < 0.95 * wait_asked
    assert offered_load(looped, 64) == pytest.approx(target, rel=0.07)
    assert short_run(looped).mean() == pytest.approx(short_run(plain).mean(), abs=0.05)
    with pytest.raises(InvalidInputError) as caught:
        thin_to_load(table, rng=np.random.default_rng(2), after_short_target=-0.1, **options)  # type: ignore[arg-type]
    assert caught.value.field == "after_short_share"
