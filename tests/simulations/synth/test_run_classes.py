"""Run time per job size: the sequence model records the training trace's share of each run
class within each size class (and after each run class of the class's previous job), and
its sampling keeps them while the network blurs them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from knowledge_base.errors import InvalidInputError
from simulations.synth.columns import Trace
from simulations.synth.generator import generate, training_data
from simulations.synth.model_files import load_model, save_model
from simulations.synth.sequence import SequenceModel
from simulations.synth.sequence_feedback import (
    _NO_PREVIOUS,
    _RunClassFeedback,
    previous_run_classes,
    request_class,
    run_class_shares,
)
from simulations.synth.sequence_network import _draw
from simulations.synth.sequence_tokens import TokenColumn


def test_run_class_shares_count_each_size_class_on_its_own() -> None:
    # Size classes 1 | 2-4 | 5+; run classes <10 s | <60 | <600 | <3600 | longer.
    procs = np.array([1, 1, 1, 1, 3, 3, 8])
    run = np.array([5.0, 30.0, 700.0, 7200.0, 59.0, 60.0, 3600.0])
    shares = run_class_shares(procs, run, [2, 5])
    np.testing.assert_allclose(shares[0], [0.25, 0.25, 0.0, 0.25, 0.25])
    np.testing.assert_allclose(shares[1], [0.0, 0.5, 0.5, 0.0, 0.0])
    np.testing.assert_allclose(shares[2], [0.0, 0.0, 0.0, 0.0, 1.0])
    # A size class without jobs takes the trace's overall shares.
    empty = run_class_shares(procs, run, [2, 5, 100])
    np.testing.assert_allclose(empty[3], [1 / 7, 2 / 7, 1 / 7, 1 / 7, 2 / 7])


def test_the_feedback_brings_a_size_classs_short_jobs_back_to_the_training_share() -> None:
    # A network that makes 80% of its wide jobs (size class 1) run 3.6 s of a 1 h request,
    # where the training trace had 10%: the feedback brings the share down near 10%, and
    # leaves size class 0 (whose share the network gets right) alone.
    fraction = TokenColumn(
        "run_fraction", np.array([0.001, 0.5, 1.0]), False, np.zeros(0), np.zeros((0, 0))
    )
    shares = np.array([[0.8, 0.0, 0.0, 0.2, 0.0], [0.1, 0.0, 0.0, 0.9, 0.0]])
    logits = np.log(np.array([0.8, 0.2, 1e-9]))
    rng = np.random.default_rng(0)
    drawn: dict[int, list[bool]] = {0: [], 1: []}
    feedback = _RunClassFeedback(shares, fraction)
    for job in range(6000):
        size = job % 2
        token = _draw(logits, float(rng.random()), feedback.weights(size, 3600.0, _NO_PREVIOUS))
        run = float(fraction.categories[token]) * 3600.0
        feedback.drawn(size, _NO_PREVIOUS, 3600.0, run)
        drawn[size].append(run < 60)
    assert np.mean(drawn[1][1000:]) == pytest.approx(0.1, abs=0.04)
    assert np.mean(drawn[0]) == pytest.approx(0.8, abs=0.03)
    # Without the feedback: 80% in both.
    plain = [_draw(logits, float(u)) == 0 for u in rng.random(3000)]
    assert np.mean(plain) == pytest.approx(0.8, abs=0.03)


def test_the_model_records_its_run_classes_and_a_file_without_them_still_loads(
    sequence: SequenceModel, sdsc_trace: Trace, tmp_path: Path
) -> None:
    table = sdsc_trace.table
    run = np.minimum(table.run_s, table.requested_time_s)
    labels = training_data(sdsc_trace, min_class_jobs=30).labels
    expected = run_class_shares(
        table.procs,
        run,
        sequence.metadata.classes.size_edges,
        previous=previous_run_classes(labels, run),
        request_s=table.requested_time_s,
    )
    assert expected.shape == (len(sequence.metadata.classes.size_edges) + 1, 6, 3, 5)
    assert sequence.run_classes is not None
    np.testing.assert_allclose(sequence.run_classes, expected)
    path = save_model(sequence, tmp_path / "sequence.pt")
    loaded = load_model(path)
    assert isinstance(loaded, SequenceModel) and loaded.run_classes is not None
    np.testing.assert_allclose(loaded.run_classes, expected)
    # A format-3 file written before the run classes samples without their feedback.
    payload = torch.load(path, weights_only=True)
    del payload["state"]["run_classes"]
    torch.save(payload, path)
    older = load_model(path)
    assert isinstance(older, SequenceModel) and older.run_classes is None
    assert len(generate(older, 200, seed=0).table) == 200
    # A file from before the previous run class keeps shares per size class only.
    sizes = len(sequence.metadata.classes.size_edges) + 1
    payload["state"]["run_classes"] = torch.full((sizes, 4), 0.25, dtype=torch.float64)
    torch.save(payload, path)
    per_size = load_model(path)
    assert isinstance(per_size, SequenceModel) and per_size.run_classes is not None
    assert per_size.run_classes.ndim == 2
    assert len(generate(per_size, 200, seed=0).table) == 200
    # A file from before the request classes keeps shares per previous run class.
    payload["state"]["run_classes"] = torch.full((sizes, 6, 5), 0.2, dtype=torch.float64)
    torch.save(payload, path)
    per_previous = load_model(path)
    assert isinstance(per_previous, SequenceModel) and per_previous.run_classes is not None
    assert per_previous.run_classes.shape == (sizes, 6, 5)
    assert len(generate(per_previous, 200, seed=0).table) == 200
    # Run classes of the wrong shape are named.
    payload["state"]["run_classes"] = torch.ones(2, 2, dtype=torch.float64)
    torch.save(payload, path)
    with pytest.raises(InvalidInputError, match="run classes of shape"):
        load_model(path)


def test_previous_run_classes_follow_each_class_in_submit_order() -> None:
    labels = np.array([0, 1, 0, 0, 1, 2])
    run = np.array([10.0, 7200.0, 700.0, 30.0, 59.0, 5.0])
    np.testing.assert_array_equal(
        previous_run_classes(labels, run),
        [_NO_PREVIOUS, _NO_PREVIOUS, 1, 3, 4, _NO_PREVIOUS],
    )


def test_run_class_shares_after_each_previous_run_class() -> None:
    # One size class; 40 jobs after a short-run one (30 short again), 60 after a long one
    # (3 short), 5 first jobs: too few for their own row, so they take the size class's.
    procs = np.ones(105, dtype=np.int64)
    previous = np.array([0] * 40 + [4] * 60 + [_NO_PREVIOUS] * 5)
    run = np.array([5.0] * 30 + [7200.0] * 10 + [5.0] * 3 + [7200.0] * 57 + [5.0] * 5)
    shares = run_class_shares(procs, run, [2], previous=previous)
    assert shares.shape == (2, 6, 5)
    np.testing.assert_allclose(shares[0, 0], [0.75, 0.0, 0.0, 0.0, 0.25])
    np.testing.assert_allclose(shares[0, 4], [0.05, 0.0, 0.0, 0.0, 0.95])
    np.testing.assert_allclose(shares[0, _NO_PREVIOUS], [38 / 105, 0.0, 0.0, 0.0, 67 / 105])
    np.testing.assert_allclose(shares[0, 1], shares[0, _NO_PREVIOUS])  # no jobs: same


def test_the_feedback_keeps_short_runs_in_chains() -> None:
    # A network that makes 30% of the jobs short-run whatever came before, where the
    # training trace's short-run jobs came in chains: 85% after a short-run job, 5% after
    # a long one. The feedback per previous run class brings both shares near the trace's;
    # per size class alone (the older file) it meets the share of the row given, 20%, after
    # either.
    fraction = TokenColumn(
        "run_fraction", np.array([0.001, 1.0]), False, np.zeros(0), np.zeros((0, 0))
    )
    logits = np.log(np.array([0.3, 0.7]))
    chains = np.zeros((1, 6, 5))
    chains[0, :, 0] = [0.85, 0.05, 0.05, 0.05, 0.05, 0.2]
    chains[0, :, 4] = 1.0 - chains[0, :, 0]
    for shares, expected in ((chains, (0.85, 0.05)), (chains[:, _NO_PREVIOUS], (0.2, 0.2))):
        feedback = _RunClassFeedback(shares, fraction)
        rng = np.random.default_rng(1)
        previous, after = _NO_PREVIOUS, {0: [], 4: []}
        for job in range(8000):
            token = _draw(logits, float(rng.random()), feedback.weights(0, 3600.0, previous))
            run = float(fraction.categories[token]) * 3600.0
            feedback.drawn(0, previous, 3600.0, run)
            if job > 2000 and previous != _NO_PREVIOUS:
                after[previous].append(run < 60)
            previous = 0 if run < 10 else 4
        assert np.mean(after[0]) == pytest.approx(expected[0], abs=0.05)
        assert np.mean(after[4]) == pytest.approx(expected[1], abs=0.05)


def test_run_class_shares_per_request_class() -> None:
    # One size class, every job after a long one: 40 asking an hour or less (all short-run),
    # 50 asking 4 h or more (10 short-run), 10 asking 2 h: too few for their own row, so
    # they take the (size, previous) row's.
    procs = np.ones(100, dtype=np.int64)
    previous = np.full(100, 4)
    request = np.array([1800.0] * 40 + [14_400.0] * 50 + [7200.0] * 10)
    run = np.array([5.0] * 40 + [5.0] * 10 + [10_000.0] * 40 + [5000.0] * 10)
    shares = run_class_shares(procs, run, [2], previous=previous, request_s=request)
    assert shares.shape == (2, 6, 3, 5)
    np.testing.assert_allclose(shares[0, 4, 0], [1.0, 0.0, 0.0, 0.0, 0.0])
    np.testing.assert_allclose(shares[0, 4, 2], [0.2, 0.0, 0.0, 0.0, 0.8])
    np.testing.assert_allclose(shares[0, 4, 1], [0.5, 0.0, 0.0, 0.0, 0.5])
    np.testing.assert_allclose(request_class(np.array([3599.0, 3600.0, 14_400.0])), [0, 1, 2])


def test_the_feedback_holds_run_classes_per_request_class() -> None:
    # A network that makes 30% of the jobs short-run whatever they ask, where the training
    # trace had 60% of those asking under an hour and 10% of those asking 4 h or more.
    fraction = TokenColumn(
        "run_fraction", np.array([0.0001, 1.0]), False, np.zeros(0), np.zeros((0, 0))
    )
    logits = np.log(np.array([0.3, 0.7]))
    shares = np.zeros((1, 6, 3, 5))
    shares[0, :, :, 0] = [0.6, 0.3, 0.1]
    shares[0, :, :, 4] = 1.0 - shares[0, :, :, 0]
    feedback = _RunClassFeedback(shares, fraction)
    rng = np.random.default_rng(2)
    short: dict[float, list[bool]] = {1800.0: [], 20_000.0: []}
    for job in range(8000):
        request = 1800.0 if job % 2 else 20_000.0
        weights = feedback.weights(0, request, _NO_PREVIOUS)
        run = float(fraction.categories[_draw(logits, float(rng.random()), weights)]) * request
        feedback.drawn(0, _NO_PREVIOUS, request, run)
        if job > 2000:
            short[request].append(run < 10)
    assert np.mean(short[1800.0]) == pytest.approx(0.6, abs=0.05)
    assert np.mean(short[20_000.0]) == pytest.approx(0.1, abs=0.05)
