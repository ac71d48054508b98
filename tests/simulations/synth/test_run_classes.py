"""Run time per job size: the sequence model records the training trace's share of each run
class within each size class, and its sampling keeps them while the network blurs them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from knowledge_base.errors import InvalidInputError
from simulations.synth.columns import Trace
from simulations.synth.generator import generate
from simulations.synth.model_files import load_model, save_model
from simulations.synth.sequence import (
    SequenceModel,
    TokenColumn,
    _draw,
    _RunClassFeedback,
    run_class_shares,
)


def test_run_class_shares_count_each_size_class_on_its_own() -> None:
    # Size classes 1 | 2-4 | 5+; run classes <60 s | <600 | <3600 | longer.
    procs = np.array([1, 1, 1, 1, 3, 3, 8])
    run = np.array([10.0, 30.0, 700.0, 7200.0, 59.0, 60.0, 3600.0])
    shares = run_class_shares(procs, run, [2, 5])
    np.testing.assert_allclose(shares[0], [0.5, 0.0, 0.25, 0.25])
    np.testing.assert_allclose(shares[1], [0.5, 0.5, 0.0, 0.0])
    np.testing.assert_allclose(shares[2], [0.0, 0.0, 0.0, 1.0])
    # A size class without jobs takes the trace's overall shares.
    empty = run_class_shares(procs, run, [2, 5, 100])
    np.testing.assert_allclose(empty[3], [3 / 7, 1 / 7, 1 / 7, 2 / 7])


def test_the_feedback_brings_a_size_classs_short_jobs_back_to_the_training_share() -> None:
    # A network that makes 80% of its wide jobs (size class 1) run 3.6 s of a 1 h request,
    # where the training trace had 10%: the feedback brings the share down near 10%, and
    # leaves size class 0 (whose share the network gets right) alone.
    fraction = TokenColumn(
        "run_fraction", np.array([0.001, 0.5, 1.0]), False, np.zeros(0), np.zeros((0, 0))
    )
    shares = np.array([[0.8, 0.0, 0.2, 0.0], [0.1, 0.0, 0.9, 0.0]])
    logits = np.log(np.array([0.8, 0.2, 1e-9]))
    rng = np.random.default_rng(0)
    drawn: dict[int, list[bool]] = {0: [], 1: []}
    feedback = _RunClassFeedback(shares, fraction)
    for job in range(6000):
        size = job % 2
        token = _draw(logits, float(rng.random()), feedback.weights(size, 3600.0))
        run = float(fraction.categories[token]) * 3600.0
        feedback.drawn(size, run)
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
    expected = run_class_shares(
        table.procs,
        np.minimum(table.run_s, table.requested_time_s),
        sequence.metadata.classes.size_edges,
    )
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
    # Run classes of the wrong shape are named.
    payload["state"]["run_classes"] = torch.ones(2, 2, dtype=torch.float64)
    torch.save(payload, path)
    with pytest.raises(InvalidInputError, match="run classes of shape"):
        load_model(path)
