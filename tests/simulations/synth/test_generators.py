"""Both generators: every emitted trace obeys the constraints, round-trips through SWF,
is deterministic for a seed, and keeps per-user structure."""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scipy import stats

from knowledge_base.errors import InvalidInputError
from simulations.synth.columns import COLUMNS, JobTable, Trace, read_trace
from simulations.synth.constraints import check_trace
from simulations.synth.copula import CopulaModel
from simulations.synth.generator import TraceModel, generate, write_trace
from simulations.synth.load import offered_load
from simulations.synth.tvae import TVAEModel


@pytest.fixture(params=["copula", "tvae"])
def model(request: pytest.FixtureRequest, copula: CopulaModel, tvae: TVAEModel) -> TraceModel:
    return copula if request.param == "copula" else tvae


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    seed=st.integers(min_value=0, max_value=2**32 - 1),
    n_jobs=st.integers(min_value=1, max_value=3000),
    match_load=st.booleans(),
)
def test_every_emitted_row_passes_every_constraint(
    model: TraceModel, seed: int, n_jobs: int, match_load: bool
) -> None:
    sample = generate(model, n_jobs, seed=seed, match_load=match_load)
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "synthetic.swf"
        write_trace(path, sample, model.metadata)
        report = check_trace(path)
    assert report.rows == n_jobs
    assert report.passed, [r for r in report.rules if r.violations]
    assert report.share_of_rows_passing == 1.0


def test_trace_round_trips_through_swf(model: TraceModel, tmp_path: Path) -> None:
    sample = generate(model, 2000, seed=11)
    path = tmp_path / "synthetic.swf.gz"
    assert write_trace(path, sample, model.metadata) == 2000
    back = read_trace(path)
    assert back.machine_procs == model.metadata.machine_procs
    assert back.header.max_jobs == 2000
    assert "synthetic" in (back.header.computer or "")
    for name in ("procs", "requested_time_s", "run_s", "status", "user"):
        np.testing.assert_array_equal(back.table.column(name), sample.table.column(name))
    np.testing.assert_array_equal(back.table.submit_s, sample.table.submit_s)


def test_sampling_is_deterministic_for_a_seed(model: TraceModel) -> None:
    a, b = generate(model, 1500, seed=5), generate(model, 1500, seed=5)
    c = generate(model, 1500, seed=6)
    for name in COLUMNS:
        np.testing.assert_array_equal(a.table.column(name), b.table.column(name))
    assert not np.array_equal(a.table.run_s, c.table.run_s)


def test_tvae_training_is_deterministic_for_a_seed(sdsc_trace: Trace) -> None:
    small = Trace(
        name="slice",
        table=sdsc_trace.table.take(slice(0, 800)),
        machine_procs=sdsc_trace.machine_procs,
        header=sdsc_trace.header,
    )
    first = TVAEModel.fit(small, seed=3, epochs=2)
    second = TVAEModel.fit(small, seed=3, epochs=2)
    for key, tensor in first.network.state_dict().items():
        assert (tensor == second.network.state_dict()[key]).all(), key


def _per_user_median_run(real: JobTable, synthetic: JobTable) -> tuple[int, float]:
    """Spearman correlation of per-user median run times, users with >= 30 real jobs."""
    users, counts = np.unique(real.user, return_counts=True)
    pairs = [
        (np.median(real.run_s[real.user == u]), np.median(synthetic.run_s[synthetic.user == u]))
        for u in users[counts >= 30]
        if (synthetic.user == u).sum() >= 10
    ]
    a, b = zip(*pairs, strict=True)
    return len(pairs), float(stats.spearmanr(a, b).statistic)


@pytest.mark.parametrize(("kind", "floor"), [("copula", 0.8), ("tvae", 0.6)])
def test_conditioning_keeps_per_user_run_times(
    kind: str, floor: float, sdsc_trace: Trace, copula: CopulaModel, tvae: TVAEModel
) -> None:
    model: TraceModel = copula if kind == "copula" else tvae
    real = sdsc_trace.table
    synthetic = generate(model, len(real), seed=1).table
    users, rho = _per_user_median_run(real, synthetic)
    assert users >= 30
    assert rho >= floor
    # Contrast: with users assigned independently of the jobs, there is nothing left.
    shuffled = synthetic.take(slice(None))
    shuffled.user = np.random.default_rng(0).permutation(shuffled.user)
    assert abs(_per_user_median_run(real, shuffled)[1]) < 0.4


def test_marginals_of_a_slice_stay_within_the_ks_target(
    model: TraceModel, sdsc_trace: Trace
) -> None:
    real = sdsc_trace.table
    synthetic = generate(model, len(real), seed=2).table
    for name in COLUMNS:
        assert stats.ks_2samp(real.column(name), synthetic.column(name)).statistic < 0.15, name


def test_matching_load_reproduces_the_training_load(model: TraceModel) -> None:
    sample = generate(model, 4000, seed=4)
    load = offered_load(sample.table, model.metadata.machine_procs)
    assert load == pytest.approx(model.metadata.offered_load, rel=0.02)


def test_kde_marginals_smooth_gaps_but_keep_round_requests(sdsc_trace: Trace) -> None:
    model = CopulaModel.fit(sdsc_trace, seed=0, marginal="kde")
    real = sdsc_trace.table
    synthetic = generate(model, len(real), seed=0).table
    # Smoothed: gaps take values never seen in training...
    assert np.setdiff1d(synthetic.interarrival_s, real.interarrival_s).size > 100
    # ...while a request of exactly one hour keeps its share (an atom, not a smear).
    real_share = np.mean(real.requested_time_s == 3600)
    assert np.mean(synthetic.requested_time_s == 3600) == pytest.approx(real_share, abs=0.03)
    for name in COLUMNS:
        assert stats.ks_2samp(real.column(name), synthetic.column(name)).statistic < 0.15, name


def test_generate_refuses_an_empty_trace(copula: CopulaModel) -> None:
    with pytest.raises(InvalidInputError, match="jobs"):
        generate(copula, 0)
