"""Resubmissions: the sequence model's processors, request and run-fraction heads may copy
the class's previous token (a copy gate), and a copied processors or request token repeats
the previous value, not a fresh one within its bin."""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from simulations.synth import sequence_history
from simulations.synth.columns import Trace
from simulations.synth.generator import generate, training_data
from simulations.synth.model_files import load_model, save_model
from simulations.synth.sequence import SequenceModel
from simulations.synth.sequence_network import _logits, _NumpyNet
from tests.simulations.synth.older_files import older_file


def _batch(sequence: SequenceModel, trace: Trace, n: int = 200) -> Any:
    data = training_data(trace, min_class_jobs=30)
    return sequence._features(data.matrix[:n].copy(), data.labels[:n], trace.table.user[:n])


def test_the_copy_gate_raises_the_class_previous_token_alone(
    sequence: SequenceModel, sdsc_trace: Trace
) -> None:
    assert sequence.network.repeat
    batch = _batch(sequence, sdsc_trace)
    raised = copy.deepcopy(sequence.network)
    with torch.no_grad():
        raised.copy["request"].bias += 5.0
        before = _logits(sequence.network, batch, sequence.users)["request"]
        after = _logits(raised, batch, sequence.users)["request"]
    last = batch.class_previous[:, 1]
    has = last < before.shape[1]  # the class had a previous job
    assert has.sum() > 100
    rows = torch.arange(last.numel())[has]
    expected = before.clone()
    expected[rows, last[has]] += 5.0
    torch.testing.assert_close(after, expected)


def test_the_numpy_sampler_computes_the_copy_gates_as_torch_does(
    sequence: SequenceModel,
) -> None:
    net = _NumpyNet(sequence.network)
    generator = torch.Generator().manual_seed(1)
    assert set(net.copy) == {"procs", "request", "fraction"}
    for name, gate in sequence.network.copy.items():
        assert isinstance(gate, torch.nn.Linear)
        z = torch.randn((4, gate.in_features), generator=generator)
        with torch.no_grad():
            np.testing.assert_allclose(
                net.mlp(net.copy[name], z.double().numpy()), gate(z).double().numpy(), atol=1e-5
            )


def test_a_repeated_request_token_repeats_the_value(
    sequence: SequenceModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Each drawn job's class and tokens, as the sampler pushes them into its history.
    pushed: list[tuple[int, int]] = []
    original = sequence_history._History.push

    def push(self: Any, gap_s: float, op_gap: float, tokens: dict[str, int], *rest: Any) -> None:
        pushed.append((tokens["class"], tokens["request"]))
        original(self, gap_s, op_gap, tokens, *rest)

    monkeypatch.setattr(sequence_history._History, "push", push)
    rows, _ = sequence.sample_sequence(1500, np.random.default_rng(3))
    column = {c.name: c for c in sequence.columns}["requested_time_s"]
    last: dict[int, int] = {}
    repeated_bins = 0
    for i, (label, token) in enumerate(pushed):
        before = last.get(label)
        if before is not None and pushed[before][1] == token:
            assert rows[i, 2] == rows[before, 2], (i, before)
            repeated_bins += int(token >= column.categories.size)
        last[label] = i
    # Tokens that are bins, not atoms, were repeated (a fresh draw would differ).
    assert repeated_bins >= 5


def test_a_model_file_from_before_the_copy_gates_still_samples(
    sequence: SequenceModel, tmp_path: Path
) -> None:
    old = older_file(sequence, tmp_path / "sequence.pt", option="repeat", repeat=False)
    assert not old.network.repeat
    assert len(generate(old, 300, seed=2).table) == 300


def test_a_trace_without_user_ids_gets_no_copy_gates_and_no_chains(
    sdsc_trace: Trace, tmp_path: Path
) -> None:
    # ALCF-Theta's log has no user ids: its classes are sizes alone, whose "previous job"
    # is anyone's, so resubmissions are not modelled (a draw of it read -28% with them).
    table = dataclasses.replace(sdsc_trace.table, user=np.full(len(sdsc_trace.table), -1))
    anonymous = dataclasses.replace(sdsc_trace, table=table)
    model = SequenceModel.fit(anonymous, seed=0, epochs=1)
    assert not model.network.repeat
    assert model.metadata.options["repeat"] is False
    assert model.run_classes is not None
    assert model.run_classes.shape == (len(model.metadata.classes.size_edges) + 1, 5)
    loaded = load_model(save_model(model, tmp_path / "anonymous.pt"))
    assert isinstance(loaded, SequenceModel) and not loaded.network.repeat
    assert len(generate(loaded, 300, seed=1).table) == 300
