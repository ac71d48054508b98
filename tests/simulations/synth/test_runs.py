"""Runs of identical jobs: the sequence model sees how long the previous job's, each slot
user's and the class's run of identical jobs is, and an "again" head decides whether a
continued session's job repeats its user's last one (class, processors, request) whole."""

from __future__ import annotations

import copy
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch.nn import functional

from knowledge_base.errors import InvalidInputError
from simulations.synth import sequence_history, sequence_tokens
from simulations.synth.columns import Trace
from simulations.synth.generator import generate, training_data
from simulations.synth.model_files import load_model, save_model
from simulations.synth.sequence import SequenceModel
from simulations.synth.sequence_feedback import _AgainFeedback, again_shares, run_length_bucket
from simulations.synth.sequence_network import _logits, _loss, _NumpyNet
from simulations.synth.sequence_tokens import _SLOT_NUMERIC, _SLOTS, _run_number
from simulations.synth.temporal import SESSION_GAP_S
from tests.simulations.synth.older_files import older_file


def _batch(sequence: SequenceModel, trace: Trace, n: int = 1500) -> Any:
    data = training_data(trace, min_class_jobs=30)
    return sequence._features(data.matrix[:n].copy(), data.labels[:n], trace.table.user[:n])


def _tokens(label: int, procs: int, request: int) -> dict[str, int]:
    return {
        "gap": 0,
        "session": 0,
        "class": label,
        "procs": procs,
        "request": request,
        "fraction": 0,
    }


def test_the_history_counts_runs_of_identical_jobs(sequence: SequenceModel) -> None:
    history = sequence._history()
    assert history.runs
    user, other = 0, 1
    for _ in range(3):  # three identical jobs a minute apart
        history.push(60.0, 60.0, _tokens(2, 1, 1), user, 1.0)
    assert history.previous_run == 3
    assert history.context()[0][-1] == pytest.approx(_run_number(3))
    numbers, users, _ = history.slots(history.now_s)
    assert users[0] == user and numbers[_SLOTS * _SLOT_NUMERIC] == pytest.approx(_run_number(3))
    assert history.class_context(2, history.now_s)[0][3] == pytest.approx(_run_number(3))
    # Another user's job in between leaves the first user's run as it is.
    history.push(5.0, 5.0, _tokens(4, 2, 2), other, 1.0)
    assert history.previous_run == 1
    numbers, users, _ = history.slots(history.now_s)
    assert list(users[:2]) == [other, user]
    assert numbers[_SLOTS * _SLOT_NUMERIC + 1] == pytest.approx(_run_number(3))
    history.push(5.0, 5.0, _tokens(2, 1, 1), user, 1.0)
    assert history.previous_run == 4
    # Another request ends the run; so does a gap longer than a session's.
    history.push(5.0, 5.0, _tokens(2, 1, 3), user, 1.0)
    assert history.previous_run == 1
    assert history.class_context(2, history.now_s)[0][3] == pytest.approx(_run_number(1))
    history.push(5.0, 5.0, _tokens(2, 1, 3), user, 1.0)
    assert history.previous_run == 2
    history.push(SESSION_GAP_S + 1.0, 1.0, _tokens(2, 1, 3), user, 1.0)
    assert history.previous_run == 1
    assert history.last_shape(user) == (2, 1, 3)
    assert history.last_shape(99) is None
    # Training pushes no values, so there is no last job to repeat; sampling pushes them,
    # and the user's and the class's last values are the same job's.
    assert history.last_job(user) is None
    history.push(5.0, 5.0, _tokens(2, 1, 3), user, 1.0, (16.0, 3600.0))
    history.push(5.0, 5.0, _tokens(2, 1, 2), other, 1.0, (8.0, 600.0))
    assert history.last_job(user) == ((2, 1, 3), (16.0, 3600.0))
    assert history.last_job(other) == ((2, 1, 2), (8.0, 600.0))
    assert history.class_values[2] == (8.0, 600.0)


def test_again_marks_a_continued_sessions_repeat_of_its_users_last_job(
    sequence: SequenceModel, sdsc_trace: Trace
) -> None:
    batch = _batch(sequence, sdsc_trace)
    tokens = batch.tokens.numpy()
    users = sdsc_trace.table.user[: tokens.shape[0]]
    last: dict[int, tuple[int, int, int]] = {}
    expected = np.zeros(tokens.shape[0], dtype=bool)
    for i, user in enumerate(users):
        shape = (int(tokens[i, 2]), int(tokens[i, 3]), int(tokens[i, 4]))
        expected[i] = tokens[i, 1] < _SLOTS and last.get(int(user)) == shape
        last[int(user)] = shape
    np.testing.assert_array_equal(batch.again.numpy(), expected)
    # SDSC-SP2's users repeat themselves: a fifth of the rows or more, and not all of them.
    assert 0.2 < expected.mean() < 0.9


def test_a_repeated_jobs_class_processors_and_request_count_nothing_in_the_loss(
    sequence: SequenceModel, sdsc_trace: Trace
) -> None:
    batch = _batch(sequence, sdsc_trace, n=400)
    network = sequence.network
    with torch.no_grad():
        logits = _logits(network, batch, sequence.users)
        loss = float(_loss(network, batch, sequence.users))
    tokens, again = batch.tokens, batch.again.float()
    expected = 0.0
    for k, head in enumerate(("gap", "session", "class", "procs", "request", "fraction", "status")):
        each = functional.cross_entropy(logits[head], tokens[:, k], reduction="none")
        if head in ("class", "procs", "request"):
            each = each * (1.0 - again)
        expected += float(each.mean())
    continued = (tokens[:, 1] < _SLOTS).float()
    bce = functional.binary_cross_entropy_with_logits(logits["again"], again, reduction="none")
    expected += float((bce * continued).mean())
    assert loss == pytest.approx(expected, rel=1e-5)
    assert again.sum() > 50  # the masked rows are there


def _pushed(sequence: SequenceModel, monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, ...]]:
    """Each drawn job's session, class, processors and request tokens, and user index,
    as the sampler pushes them into its history."""
    pushed: list[tuple[Any, ...]] = []
    original = sequence_history._History.push

    def push(
        self: Any,
        gap_s: float,
        op_gap: float,
        tokens: dict[str, int],
        user: int,
        work: float,
        values: Any = None,
    ) -> None:
        shape = (tokens["class"], tokens["procs"], tokens["request"])
        pushed.append((tokens["session"], shape, user))
        original(self, gap_s, op_gap, tokens, user, work, values)

    monkeypatch.setattr(sequence_history._History, "push", push)
    return pushed


def _repeats(sequence: SequenceModel, bias: float, monkeypatch: pytest.MonkeyPatch) -> float:
    """The share of continued sessions' jobs that repeat their user's last job, shape and
    values alike, with ``bias`` added to the "again" head's logit."""
    model = copy.copy(sequence)
    model.network = copy.deepcopy(sequence.network)
    model._numpy = None
    with torch.no_grad():
        model.network.again[-1].bias += bias
    with monkeypatch.context() as patch:
        pushed = _pushed(model, patch)
        rows, _ = model.sample_sequence(1200, np.random.default_rng(5))
    last: dict[int, int] = {}
    continued = repeated = 0
    for i, (session, shape, user) in enumerate(pushed):
        before = last.get(user)
        if session < _SLOTS and before is not None:
            continued += 1
            same = pushed[before][1] == shape and np.array_equal(rows[i, 1:3], rows[before, 1:3])
            repeated += int(same)
        last[user] = i
    assert continued > 300
    return repeated / continued


def test_the_again_head_repeats_the_users_last_job_whole(
    sequence: SequenceModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    always = _repeats(sequence, 50.0, monkeypatch)
    never = _repeats(sequence, -50.0, monkeypatch)
    assert always == 1.0
    # Left to the class, processors and request heads, a job repeats far less often (the
    # copy gates still repeat some).
    assert never < 0.9


def test_the_numpy_sampler_computes_the_again_head_as_torch_does(
    sequence: SequenceModel,
) -> None:
    net = _NumpyNet(sequence.network)
    assert net.again is not None
    first = sequence.network.again[0]
    assert isinstance(first, torch.nn.Linear)
    z = torch.randn((4, first.in_features), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        expected = sequence.network.again(z).double().numpy()
    np.testing.assert_allclose(net.mlp(net.again, z.double().numpy()), expected, atol=1e-5)


def test_a_model_file_from_before_the_runs_still_samples(
    sequence: SequenceModel, tmp_path: Path
) -> None:
    old = older_file(
        sequence, tmp_path / "sequence.pt", option="runs", state=("again_shares",), runs=False
    )
    assert not old.network.runs and old.network.repeat
    assert old._history().widths == (
        sequence_tokens._NUMERIC_BEFORE_RUNS,
        _SLOTS * _SLOT_NUMERIC,
        sequence_tokens._CLASS_NUMERIC_BEFORE_RUNS,
    )
    assert len(generate(old, 300, seed=2).table) == 300
    assert math.isfinite(float(old.sample_sequence(50, np.random.default_rng(0))[0].sum()))


def test_again_shares_count_repeats_per_run_length_of_continued_sessions() -> None:
    # Continued sessions (session < slots): runs of 1 repeat in 1 of 2, runs of 3 in 2 of
    # 2, runs of 60 in 0 of 1; a new session's job (session == slots) counts nowhere.
    again = np.array([True, False, True, True, False, True])
    session = np.array([0, 1, 0, 2, 0, _SLOTS])
    user_run = np.array([1, 1, 3, 4, 60, 1])
    shares = again_shares(again, session, user_run)
    np.testing.assert_allclose(shares, [0.5, 1.0, 0.6, 0.6, 0.0])  # 5-9, 10-49: overall
    np.testing.assert_array_equal(
        run_length_bucket(np.array([0, 1, 2, 4, 5, 9, 10, 50])), [0, 0, 1, 1, 2, 2, 3, 4]
    )


def test_the_again_feedback_holds_repeats_per_run_length() -> None:
    # A head that repeats 99.5% of the time whatever the run, where the training trace
    # repeated 30% of runs of 1 and 90% of runs of 50 or more: the feedback brings both
    # near their shares; without it a run, once started, goes on for ~200 jobs.
    feedback = _AgainFeedback(np.array([0.3, 0.6, 0.8, 0.85, 0.9]))
    rng = np.random.default_rng(4)
    logit = math.log(0.995 / 0.005)
    repeats: dict[int, list[bool]] = {1: [], 60: []}
    for job in range(20_000):
        run = 1 if job % 2 else 60
        repeated = bool(rng.random() < feedback.probability(logit, run))
        feedback.drawn(run, repeated)
        if job > 4000:
            repeats[run].append(repeated)
    assert np.mean(repeats[1]) == pytest.approx(0.3, abs=0.05)
    assert np.mean(repeats[60]) == pytest.approx(0.9, abs=0.03)
    assert feedback.probability(-1000.0, 1) == 0.0  # no overflow
    # It only holds repeats back: a head that repeats less than the trace did is left as
    # it is (pushing it up made HPC2N-2002's runs heavier and its draws wider apart).
    shy = _AgainFeedback(np.array([0.5, 0.5, 0.5, 0.5, 0.5]))
    shy_logit = math.log(0.1 / 0.9)
    for _ in range(2000):
        shy.drawn(1, bool(rng.random() < shy.probability(shy_logit, 1)))
    assert shy.probability(shy_logit, 1) == pytest.approx(0.1)


def test_the_model_records_its_again_shares_and_refuses_bad_ones(
    sequence: SequenceModel, tmp_path: Path
) -> None:
    assert sequence.again_shares is not None and sequence.again_shares.shape == (5,)
    assert 0.0 < sequence.again_shares[0] < sequence.again_shares[2] <= 1.0
    path = save_model(sequence, tmp_path / "sequence.pt")
    loaded = load_model(path)
    assert isinstance(loaded, SequenceModel) and loaded.again_shares is not None
    np.testing.assert_allclose(loaded.again_shares, sequence.again_shares)
    payload = torch.load(path, weights_only=True)
    for bad, message in (
        (torch.full((3,), 0.5, dtype=torch.float64), "again shares of shape"),
        (torch.full((5,), 1.5, dtype=torch.float64), "outside"),
    ):
        payload["state"]["again_shares"] = bad
        torch.save(payload, path)
        with pytest.raises(InvalidInputError, match=message):
            load_model(path)
    # A file from before the shares were recorded samples with the head alone.
    del payload["state"]["again_shares"]
    torch.save(payload, path)
    older = load_model(path)
    assert isinstance(older, SequenceModel) and older.again_shares is None
    assert len(generate(older, 300, seed=1).table) == 300
