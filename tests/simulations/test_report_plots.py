"""The replay report tells runs apart and says when ``user`` and ``last2`` are one line."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from simulations.replay import Schedule, replay
from simulations.report import _styles, coincidence_note, write_report
from simulations.workload import Workload


def _workload(users: list[int]) -> Workload:
    n = len(users)
    return Workload(
        name="tiny",
        machine_procs=8,
        submit_s=np.arange(n, dtype=np.int64) * 10,
        run_s=np.array([50, 200, 30, 400, 80, 60][:n], dtype=np.int64),
        req_s=np.array([100, 400, 60, 800, 160, 120][:n], dtype=np.int64),
        procs=np.array([4, 8, 2, 4, 8, 2][:n], dtype=np.int64),
        user=np.array(users, dtype=np.int64),
        job_ids=np.arange(1, n + 1, dtype=np.int64),
    )


def _runs(users: list[int]) -> list[Schedule]:
    return [
        replay(_workload(users), policy=policy, estimate=estimate)
        for policy in ("easy", "conservative")
        for estimate in ("user", "last2")
    ]


def test_every_run_has_its_own_colour_and_style_pair() -> None:
    styles = _styles(_runs([0, 1, 0, 1, 0, 1]))
    pairs = {(str(s["color"]), str(s["linestyle"])) for s in styles}
    assert len(pairs) == len(styles) == 4
    # The same estimate draws the same style; the same policy the same colour.
    assert styles[0]["linestyle"] == styles[2]["linestyle"] != styles[1]["linestyle"]
    assert styles[0]["color"] == styles[1]["color"] != styles[2]["color"]


def test_a_trace_without_user_ids_says_user_and_last2_coincide(tmp_path: Path) -> None:
    runs = _runs([-1] * 6)
    note = coincidence_note(runs)
    assert note is not None and "no user ids" in note
    index = write_report(runs, tmp_path)
    assert "no user ids" in index.read_text()
    for name in ("wait.png", "bsld.png", "utilization.png"):
        assert (tmp_path / name).stat().st_size > 0


@pytest.mark.parametrize("users", [[0, 1, 0, 1, 0, 1], [0, -1, 0, -1, 0, -1]])
def test_no_note_when_the_trace_has_user_ids(users: list[int], tmp_path: Path) -> None:
    runs = _runs(users)
    assert coincidence_note(runs) is None
    assert "no user ids" not in write_report(runs, tmp_path).read_text()


def test_no_note_without_both_estimates() -> None:
    only_user = [replay(_workload([-1] * 6), policy="easy", estimate="user")]
    assert coincidence_note(only_user) is None
