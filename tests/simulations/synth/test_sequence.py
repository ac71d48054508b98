"""The sequence generator: constraints, t=0 on the real trace's, time of day kept,
determinism, model files, and load matching that never slides the clock."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from knowledge_base.errors import InvalidInputError
from simulations.synth import generator
from simulations.synth.clock import TraceClock
from simulations.synth.columns import Trace, read_trace
from simulations.synth.constraints import check_trace
from simulations.synth.copula import CopulaModel
from simulations.synth.generator import generate, training_data, write_trace
from simulations.synth.load import offered_load
from simulations.synth.model_files import load_model, save_model
from simulations.synth.sequence import SequenceModel
from simulations.synth.sequence_network import _WHEN, _logits, _NumpyNet
from simulations.synth.temporal import compare_time
from simulations.synth.thinning import ThinningReport, thin_to_load
from tests.simulations.synth.tables import big_and_small, job_table


def test_sampled_traces_obey_the_constraints_and_start_at_the_real_t0(
    sequence: SequenceModel, sdsc_trace: Trace, tmp_path: Path
) -> None:
    path = tmp_path / "sequence.swf"
    sample = generate(sequence, 1500, seed=3)
    assert write_trace(path, sample, sequence.metadata) == 1500
    report = check_trace(path)
    assert report.passed, [r for r in report.rules if r.violations]
    back = read_trace(path)
    assert back.header.unix_start_time_s == sdsc_trace.header.unix_start_time_s
    assert back.header.time_zone_string == sdsc_trace.header.time_zone_string
    # The first synthetic job is submitted when the first real one was.
    assert back.table.start_s == sdsc_trace.table.start_s > 0
    assert back.clock == sdsc_trace.clock


@pytest.mark.parametrize(
    ("ratios", "draws", "kept"),
    [
        ((0.40, 0.30), 1, 0),  # 8% off: one draw
        ((0.60, 0.40), 2, 1),  # 62% off: drawn again, the second (8% off) kept
        ((0.50, 0.80), 2, 0),  # drawn again, the first still the closer
        ((0.60, None), 2, 0),  # the second has no short-run jobs: the first kept
        ((None, 0.36), 2, 1),  # nor the first: drawn again
    ],
)
def test_a_draw_whose_short_run_jobs_miss_their_wait_is_drawn_once_more(
    sequence: SequenceModel,
    monkeypatch: pytest.MonkeyPatch,
    ratios: tuple[float | None, ...],
    draws: int,
    kept: int,
) -> None:
    # The thinning reports the survivors' short-run wait ratio against the target (0.37
    # here); further than _SHORT_MISS off, generate draws once more, on a fresh stream at
    # the same density, and keeps the closer of the two.
    real_thin = generator.thin_to_load
    tables: list[Any] = []

    def thin(table: Any, **options: Any) -> tuple[Any, float]:
        report = options.get("report")
        out = real_thin(table, **options)
        if report is not None:
            report.held_back_by_load = False
            report.short_ratio, report.short_target = ratios[len(tables)], 0.37
        tables.append(out[0])
        return out

    monkeypatch.setattr(generator, "thin_to_load", thin)
    sample = generate(sequence, 300, seed=1)
    assert len(tables) == draws
    assert sample.table is tables[kept]


def test_the_thinning_reports_the_short_run_ratio_it_left() -> None:
    report = ThinningReport(short_ratio=0.5, short_target=0.4)
    assert report.short_miss == pytest.approx(0.25)
    assert ThinningReport(short_ratio=None, short_target=0.4).short_miss == math.inf
    assert ThinningReport(short_ratio=0.5).short_miss == 0.0  # none asked
    assert ThinningReport().short_miss == 0.0


def test_a_sequence_model_gives_as_many_jobs_as_asked(sequence: SequenceModel) -> None:
    # Thinning to the load may keep less than 1 / margin of a draw (600 asked: 573 came
    # back, kept share 0.56 of a 1.7x draw); the model then draws again, larger.
    for n in (200, 600, 1500):
        assert len(generate(sequence, n, seed=0).table) == n


def test_a_draw_that_stays_short_is_a_clear_error(
    sequence: SequenceModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    # No margin and no second draw: thinning keeps fewer jobs than asked, and says so (the
    # denser draw, made when the load held the thinning back, without a margin either).
    monkeypatch.setattr(generator, "_SEQUENCE_MARGIN", 1.0)
    monkeypatch.setattr(generator, "_DENSE_MARGIN", 1.0)
    monkeypatch.setattr(generator, "_SHORT_DRAWS", 0)
    with pytest.raises(InvalidInputError, match="kept .* of the jobs asked") as caught:
        generate(sequence, 600, seed=0)
    assert caught.value.field == "jobs"


def test_the_same_seed_gives_the_same_trace_and_a_saved_model_too(
    sequence: SequenceModel, tmp_path: Path
) -> None:
    loaded = load_model(save_model(sequence, tmp_path / "sequence.pt"))
    assert loaded.metadata == sequence.metadata
    a, b = generate(sequence, 600, seed=5), generate(loaded, 600, seed=5)
    other = generate(sequence, 600, seed=6)
    for name in ("interarrival_s", "procs", "requested_time_s", "run_s", "status", "user"):
        np.testing.assert_array_equal(a.table.column(name), b.table.column(name))
    assert not np.array_equal(a.table.procs, other.table.procs)


def test_the_numpy_sampler_computes_what_the_torch_network_does(
    sequence: SequenceModel,
) -> None:
    # Sampling runs the weights in numpy; a layer read wrong there (the trunk's final
    # ReLU was once dropped) skewed every head, e.g. half the jobs cancelled, not 20%.
    net = _NumpyNet(sequence.network)
    generator = torch.Generator().manual_seed(0)
    first = sequence.network.trunk[0]
    assert isinstance(first, torch.nn.Linear)
    x = torch.randn((5, first.in_features), generator=generator)
    with torch.no_grad():
        expected = sequence.network.trunk(x).double().numpy()
        np.testing.assert_allclose(
            net.mlp(net.trunk, x.double().numpy(), last_relu=True), expected, atol=1e-5
        )
        for name, head in sequence.network.heads.items():
            layer = head[0]  # type: ignore[index]
            assert isinstance(layer, torch.nn.Linear)
            z = torch.randn((5, layer.in_features), generator=generator)
            np.testing.assert_allclose(
                net.mlp(net.heads[name], z.double().numpy()),
                head(z).double().numpy(),
                atol=1e-5,
            )


def test_arrivals_keep_the_time_of_day_that_independent_rows_lose(
    sequence: SequenceModel, copula: CopulaModel, sdsc_trace: Trace, tmp_path: Path
) -> None:
    n = len(sdsc_trace.table)
    tv = {}
    for name, model in (("sequence", sequence), ("copula", copula)):
        path = tmp_path / f"{name}.swf"
        write_trace(path, generate(model, n, seed=1), model.metadata)
        synthetic = read_trace(path)
        tv[name] = compare_time(
            sdsc_trace.table, sdsc_trace.clock, synthetic.table, synthetic.clock
        ).hour_of_day_tv
    # On 6,000 jobs (a month) and 12 epochs; on whole traces the sequence model's TV is
    # 0.02-0.05 (docs/synthetic.md). Independent gaps spread arrivals round the clock.
    assert tv["sequence"] < 0.2
    assert tv["sequence"] < tv["copula"] - 0.1


def test_a_state_that_does_not_fit_its_metadata_is_refused(
    sequence: SequenceModel, tmp_path: Path
) -> None:
    path = save_model(sequence, tmp_path / "sequence.pt")
    payload = torch.load(path, weights_only=True)
    payload["state"]["token_shares"] = payload["state"]["token_shares"][:-1]
    torch.save(payload, path)
    with pytest.raises(InvalidInputError, match="sequence model's state") as caught:
        load_model(path)
    assert caught.value.field == "state"
    assert caught.value.source == str(path)


def test_the_job_heads_see_the_new_jobs_hour(sequence: SequenceModel, sdsc_trace: Trace) -> None:
    # LANL-CM5's night jobs run 5x as long as its afternoon ones (median 2,464 s against
    # 432 s). Heads that saw only the last submission's hour put the long jobs in the
    # afternoon, and thinning to the real queue then flattened the daily cycle (whole
    # trace: hour TV 0.088); docs/synthetic.md "Jobs that know their hour".
    assert sequence.network.job_when
    n = 64
    data = training_data(sdsc_trace, min_class_jobs=30)
    batch = sequence._features(data.matrix[:n].copy(), data.labels[:n], sdsc_trace.table.user[:n])
    moved = batch.rows(slice(None))
    moved.when = batch.when.clone()
    moved.when[:, 2] = (batch.when[:, 2] + 12) % 24  # the new job's hour only
    users = sequence.users
    with torch.no_grad():
        before, after = (
            _logits(sequence.network, batch, users),
            _logits(sequence.network, moved, users),
        )
    for head in ("procs", "request", "fraction", "status"):
        assert not torch.allclose(before[head], after[head]), head
    # The trunk's history (the last submission's hour) is untouched.
    torch.testing.assert_close(before["gap"], after["gap"])


def test_a_model_file_from_before_the_job_heads_saw_the_hour_still_samples(
    sequence: SequenceModel, tmp_path: Path
) -> None:
    path = save_model(sequence, tmp_path / "sequence.pt")
    payload = torch.load(path, weights_only=True)
    del payload["metadata"]["options"]["job_when"]
    state = payload["state"]["network"]
    # The hour and weekday were the last _WHEN inputs of the processors head, and sit at
    # the same place in each later head's inputs (after them come the tokens drawn).
    width = state["heads.procs.0.weight"].shape[1]
    # The copy gates see the same inputs as their heads.
    layers = [f"heads.{head}.0.weight" for head in ("procs", "request", "fraction", "status")]
    layers += [f"copy.{head}.weight" for head in ("procs", "request", "fraction")]
    for layer in layers:
        weight = state[layer]
        state[layer] = torch.cat([weight[:, : width - _WHEN], weight[:, width:]], dim=1)
    torch.save(payload, path)
    old = load_model(path)
    assert isinstance(old, SequenceModel)
    assert not old.network.job_when
    sample = generate(old, 300, seed=2)
    assert len(sample.table) == 300


def test_bad_training_options_are_named(sdsc_trace: Trace) -> None:
    with pytest.raises(InvalidInputError) as caught:
        SequenceModel.fit(sdsc_trace, epochs=0)
    assert caught.value.field == "epochs"
    with pytest.raises(InvalidInputError) as caught:
        SequenceModel.fit(sdsc_trace, validation=1.5)
    assert caught.value.field == "validation"


def test_thinning_to_the_load_keeps_every_survivors_submit_time() -> None:
    rng = np.random.default_rng(0)
    n = 4000
    submit = np.cumsum(rng.integers(1, 600, size=n)).astype(np.int64)
    submit -= submit[0]
    procs = rng.integers(1, 9, size=n)
    run = rng.integers(60, 4000, size=n)
    # A 3-day burst at four times the rate: an overloaded spell a model might make.
    table = job_table(submit.astype(np.float64), procs, run)
    load = offered_load(table, 8)
    thinned, kept = thin_to_load(
        table, target_load=load * 0.8, machine_procs=8, n_jobs=3000, rng=rng
    )
    assert len(thinned) == 3000
    assert 0.7 < kept < 0.9
    assert offered_load(thinned, 8) == pytest.approx(load * 0.8, rel=0.06)
    # Survivors keep their submit times: the clock does not slide.
    assert np.isin(thinned.submit_s, table.submit_s).all()
    assert thinned.start_s == 0


def test_thinning_caps_an_overloaded_week() -> None:
    day = 86_400
    # Six quiet weeks, then one week submitting five times the work.
    submit = np.concatenate([np.arange(0, 42 * day, 3600), np.arange(42 * day, 49 * day, 720)])
    n = submit.size
    table = job_table(submit.astype(np.float64), np.full(n, 4), np.full(n, 1800))
    target = offered_load(table.take(slice(0, 42 * 24)), 8)
    thinned, _ = thin_to_load(
        table, target_load=target, machine_procs=8, n_jobs=n, rng=np.random.default_rng(0)
    )
    late = thinned.submit_s >= 42 * day
    work_last_week = (thinned.procs * thinned.run_s)[late].sum()
    # Sessions dropped at random: the cap (1.1 x target) holds on average, not exactly;
    # without it the last week would offer 5 x the target before thinning.
    assert 0.6 * 1.1 * target * 8 * 7 * day <= work_last_week <= 1.4 * 1.1 * target * 8 * 7 * day


def test_thinning_drops_whole_sessions_so_they_keep_their_length() -> None:
    # 60 users, each submitting sessions of four jobs a minute apart, hours between.
    rng = np.random.default_rng(2)
    starts = np.sort(rng.uniform(0, 60 * 86_400, size=1500))
    submit = (starts[:, None] + np.arange(4)[None, :] * 60).ravel()
    user = np.repeat(rng.integers(0, 60, size=starts.size), 4)
    order = np.argsort(submit, kind="stable")
    table = job_table(submit[order], np.full(submit.size, 2), np.full(submit.size, 3600))
    table.user = user[order]
    load = offered_load(table, 8)
    thinned, _ = thin_to_load(
        table, target_load=load * 0.5, machine_procs=8, n_jobs=2500, rng=rng, cap_load=10 * load
    )
    assert offered_load(thinned, 8) == pytest.approx(load * 0.5, rel=0.1)
    real = compare_time(table, TraceClock(epoch_s=0), thinned, TraceClock(epoch_s=0))
    # Dropping jobs one by one at random (the code before) left 3.52 jobs a session.
    assert real.real.mean_session_jobs == pytest.approx(4.0, rel=0.05)
    assert real.synthetic.mean_session_jobs > 3.85


def test_users_sessions_keep_their_length(sequence: SequenceModel, sdsc_trace: Trace) -> None:
    # Sessions are a user's jobs less than 20 minutes apart. Drawing each job's class on
    # its own (before the session head) gave 1.24 jobs a session here against 2.11 real,
    # session-length KS 0.22; with it 2.08-2.14 and 0.07 (seeds 1, 2). With the runs of
    # identical jobs and the "again" head, 2.58 / 2.18 / 2.25, KS 0.18 / 0.10 / 0.13
    # (seeds 1-3; before them 1.97-2.05, KS 0.07-0.09): drawn at the model's own pace,
    # 1.99-2.00 (before 1.82-1.90), so on this 6,000-job slice the longer sessions come
    # with the denser draw that thinning takes (fewer users with a single job: 47-55% of
    # the sessions, real 65%); on the whole of SDSC-SP2 2.31 and 2.32 against 2.33 real,
    # KS 0.08 / 0.09 (fit 0, draws 0 and 1), KTH-SP2 2.11 / 2.16 of 2.18, CTC-SP2 2.40 /
    # 2.50 of 2.41.
    fidelity = [
        compare_time(
            sdsc_trace.table,
            sdsc_trace.clock,
            generate(sequence, len(sdsc_trace.table), seed=seed).table,
            sdsc_trace.clock,
        )
        for seed in (1, 2, 3)
    ]
    real = fidelity[0].real.mean_session_jobs
    synthetic = float(np.mean([f.synthetic.mean_session_jobs for f in fidelity]))
    assert synthetic == pytest.approx(real, rel=0.2)
    assert float(np.mean([f.session_jobs_ks for f in fidelity])) < 0.15
    assert max(f.session_jobs_ks for f in fidelity) < 0.2


def test_thinning_keeps_the_mix_of_big_and_small_jobs() -> None:
    # A trace at 1.25 times its target, 5% of its jobs 128 processors for 12 h (each
    # 3.6% of a week's capacity), the rest 2 for 1 h. The code before admitted jobs one
    # by one while the trailing week had room, which kept small jobs and dropped big ones:
    # work per job 0.78 of the source's here.
    rng = np.random.default_rng(3)
    table = big_and_small(rng, users=1)
    target = offered_load(table, 256) / 1.25
    thinned, _ = thin_to_load(table, target_load=target, machine_procs=256, n_jobs=4000, rng=rng)
    per_job = (thinned.procs * thinned.run_s).mean() / (table.procs * table.run_s).mean()
    assert per_job == pytest.approx(1.0, abs=0.08)
    assert offered_load(thinned, 256) == pytest.approx(target, rel=0.08)


def test_a_draw_held_back_by_the_load_is_drawn_again_denser(
    sequence: SequenceModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    # When the thinning reports that only admissions leaving too little load came near
    # the queue asked, generate draws again at the dense density, a fresh stream.
    densities: list[float] = []
    real_sample = sequence.sample_sequence
    real_thin = generator.thin_to_load

    def sample(n_jobs: int, rng: np.random.Generator, *, load: float | None = None) -> Any:
        densities.append(float(load or 0.0) / sequence.metadata.offered_load)
        return real_sample(n_jobs, rng, load=load)

    def thinning_that_reports(held_back: bool) -> Any:
        def thin(table: Any, **options: Any) -> tuple[Any, float]:
            report = options.get("report")
            out = real_thin(table, **options)
            if report is not None:
                report.held_back_by_load = held_back
                report.short_target = None  # no short-run wait asked: no third draw
            return out

        return thin

    monkeypatch.setattr(sequence, "sample_sequence", sample)
    monkeypatch.setattr(generator, "thin_to_load", thinning_that_reports(True))
    sample_out = generate(sequence, 300, seed=1)
    assert densities == pytest.approx([generator._SEQUENCE_DENSITY, generator._DENSE_DENSITY])
    assert len(sample_out.table) == 300
    # Not held back: one draw (whether a 300-job draw of this small model is held back
    # depends on the model, so the report is set here too).
    densities.clear()
    monkeypatch.setattr(generator, "thin_to_load", thinning_that_reports(False))
    generate(sequence, 300, seed=1)
    assert len(densities) == 1
