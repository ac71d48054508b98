"""The queue state a sequence model conditions on: the fluid backlog and trailing loads,
and the same numbers in training (from the real trace) as in sampling (from the jobs
drawn so far)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from knowledge_base.errors import InvalidInputError
from simulations.synth.closed_loop import after_short_share
from simulations.synth.columns import Trace
from simulations.synth.generator import SynthMetadata, generate, hour_of_day_shares
from simulations.synth.intensity import OperationalTime
from simulations.synth.load import (
    easy_queue_s,
    easy_wait_s,
    mean_backlog_s,
    short_backlog_ratio,
    short_wait_ratio,
)
from simulations.synth.model_files import load_model, save_model
from simulations.synth.queue_state import (
    QUEUE_NUMBERS,
    QueueState,
    backlog_time_mean_s,
    found_backlog_s,
    job_work,
    machine_work_s,
)
from simulations.synth.sequence import SequenceModel
from simulations.synth.sequence_history import _History
from simulations.synth.sequence_tokens import _QUEUE_AT
from simulations.synth.temporal import time_profile


def test_the_backlog_drains_at_the_machines_rate_and_never_goes_negative() -> None:
    queue = QueueState(10)
    queue.submit(0.0, 10 * 7200.0)  # two machine-hours
    assert queue.backlog_s == pytest.approx(7200.0)
    queue.submit(3600.0, 10 * 1800.0)  # one hour drained, half an hour added
    assert queue.backlog_s == pytest.approx(5400.0)
    queue.submit(3600.0 + 86_400.0, 0.0)  # drained to empty, not below
    assert queue.backlog_s == 0.0
    numbers = queue.numbers()
    assert numbers[0] == 0.0
    # The trailing day holds only the last (empty) job; the 3 days and the week hold all
    # 2.5 machine-hours over the 25 hours since t=0.
    assert numbers[1] == pytest.approx(0.0)
    assert numbers[2] == pytest.approx(2.5 / 25, rel=1e-6)
    assert numbers[3] == pytest.approx(2.5 / 25, rel=1e-6)


def test_work_scale_counts_the_share_of_work_kept_after_thinning() -> None:
    full, kept = QueueState(4), QueueState(4, work_scale=0.8)
    for at, work in ((0.0, 4000.0), (100.0, 800.0), (5000.0, 40_000.0)):
        full.submit(at, work)
        kept.submit(at, work * 1.25)
    np.testing.assert_allclose(kept.numbers(), full.numbers(), rtol=1e-6)


def test_job_work_is_what_offered_load_counts() -> None:
    # At most its request, on at most the machine's processors.
    assert job_work(64, 1000.0, 1.4, 32) == 32 * 1000.0
    assert job_work(8, 1000.0, 0.5, 32) == 8 * 500.0


@pytest.mark.parametrize(
    ("field", "procs", "scale"), [("machine_procs", 0, 1.0), ("work_scale", 4, -1.0)]
)
def test_bad_queue_settings_are_named(field: str, procs: float, scale: float) -> None:
    with pytest.raises(InvalidInputError) as caught:
        QueueState(procs, work_scale=scale)
    assert caught.value.field == field


def test_training_and_sampling_see_the_same_queue_state(
    sequence: SequenceModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Sampled jobs, read back as if they were a training trace, must give the network the
    # queue numbers it was given while they were drawn.
    seen: list[np.ndarray] = []
    context = _History.context

    def recording(self: _History) -> tuple[np.ndarray, list[int], int, int]:
        out = context(self)
        seen.append(out[0][_QUEUE_AT : _QUEUE_AT + QUEUE_NUMBERS].copy())
        return out

    monkeypatch.setattr(_History, "context", recording)
    rows, users = sequence.sample_sequence(400, np.random.default_rng(3))
    sampled = np.array(seen)
    assert sampled[:, 0].max() > 0 and sampled[:, 3].max() > 0  # the queue was not empty
    seen.clear()
    submit = np.cumsum(rows[:, 0])
    operational = OperationalTime(sequence.clock, sequence.rates).forward_many(submit)
    matrix = rows.copy()
    matrix[:, 0] = np.diff(operational, prepend=operational[:1])
    sequence._features(matrix, np.zeros(len(rows), dtype=np.int64), users)
    np.testing.assert_allclose(np.array(seen), sampled, rtol=1e-5, atol=1e-6)


def test_a_sequence_model_file_from_before_the_queue_state_is_refused(
    sequence: SequenceModel, tmp_path: Path
) -> None:
    path = save_model(sequence, tmp_path / "sequence.pt")
    payload = torch.load(path, weights_only=True)
    payload["format_version"] = 1
    torch.save(payload, path)
    with pytest.raises(InvalidInputError, match="predates the queue-state") as caught:
        load_model(path)
    assert caught.value.field == "format_version"
    assert caught.value.value == 1
    # A version-2 file whose metadata lacks the queue numbers (fitted by an older build
    # and relabelled) is refused by the model itself.
    payload["format_version"] = 2
    del payload["metadata"]["options"]["queue_numbers"]
    torch.save(payload, path)
    with pytest.raises(InvalidInputError, match="queue-state numbers"):
        load_model(path)


def test_the_model_remembers_the_backlog_its_trace_found(
    sequence: SequenceModel, sdsc_trace: Trace
) -> None:
    # generate thins a sampled trace to this mean backlog as well as to the load.
    recorded = float(sequence.metadata.options["mean_backlog_s"])
    assert recorded == pytest.approx(mean_backlog_s(sdsc_trace.table, sdsc_trace.machine_procs))
    assert recorded > 0
    # and to the work its EASY queue held, which takes precedence.
    queue = float(sequence.metadata.options["easy_queue_s"])
    assert queue == pytest.approx(easy_queue_s(sdsc_trace.table, sdsc_trace.machine_procs))
    assert queue > 0
    # and to how much backlog its short-run jobs found against every job.
    ratio = float(sequence.metadata.options["short_backlog_ratio"])
    assert ratio == pytest.approx(short_backlog_ratio(sdsc_trace.table, sdsc_trace.machine_procs))
    assert ratio > 0
    # and to its jobs' mean EASY wait and its short-run jobs' share of it, which take the
    # place of the queue and the backlog ratio.
    wait = float(sequence.metadata.options["easy_wait_s"])
    assert wait == pytest.approx(easy_wait_s(sdsc_trace.table, sdsc_trace.machine_procs))
    short = float(sequence.metadata.options["short_wait_ratio"])
    assert short == pytest.approx(short_wait_ratio(sdsc_trace.table, sdsc_trace.machine_procs))
    assert wait > 0 and 0 < short < 1
    # and the share of the jobs following a short-run job that come after its end.
    after = float(sequence.metadata.options["after_short_share"])
    assert after == after_short_share(sdsc_trace.table, sdsc_trace.machine_procs)
    assert 0 < after < 1


def test_generate_thins_to_the_recorded_wait_or_an_older_files_queue(
    sequence: SequenceModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    import simulations.synth.generator as generator

    given: list[dict[str, object]] = []
    thin = generator.thin_to_load

    def spy(*args: object, **kwargs: object) -> object:
        given.append(kwargs)
        return thin(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(generator, "thin_to_load", spy)
    generate(sequence, 300, seed=0)
    options = sequence.metadata.options
    assert given[-1]["easy_wait_target_s"] == options["easy_wait_s"]
    assert given[-1]["short_wait_target"] == options["short_wait_ratio"]
    assert given[-1]["after_short_target"] == options["after_short_share"]
    # A file fitted before the wait was recorded thins to its queue and backlog ratio,
    # and moves no job after a short-run one's end.
    older = dict(options)
    del older["easy_wait_s"], older["short_wait_ratio"], older["after_short_share"]
    monkeypatch.setattr(
        sequence, "metadata", sequence.metadata.model_copy(update={"options": older})
    )
    generate(sequence, 300, seed=0)
    assert given[-1]["easy_wait_target_s"] is None and given[-1]["short_wait_target"] is None
    assert given[-1]["after_short_target"] is None
    assert given[-1]["easy_queue_target_s"] == options["easy_queue_s"]
    assert given[-1]["short_ratio_target"] == options["short_backlog_ratio"]


def test_the_model_remembers_its_traces_hour_profile_and_thinning_keeps_it(
    sequence: SequenceModel, sdsc_trace: Trace, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The shares the fidelity check's hour-of-day profile counts on the training trace.
    shares = sequence.metadata.hour_of_day_shares
    assert shares is not None
    profile = time_profile(sdsc_trace.table, sdsc_trace.clock).hour_of_day
    np.testing.assert_allclose(shares, profile, atol=1e-5)
    np.testing.assert_allclose(hour_of_day_shares(sdsc_trace.table, sdsc_trace.clock), shares)
    # generate hands them to the thinning.
    import simulations.synth.generator as generator

    given: list[object] = []
    thin = generator.thin_to_load

    def spy(*args: object, **kwargs: object) -> object:
        given.append(kwargs.get("hour_shares"))
        return thin(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(generator, "thin_to_load", spy)
    generate(sequence, 300, seed=0)
    np.testing.assert_allclose(np.asarray(given[0]), shares)
    # A format-2 file, written before the shares were recorded, loads without them
    # (thinning then keeps the drawn profile, as it did).
    path = save_model(sequence, tmp_path / "sequence.pt")
    payload = torch.load(path, weights_only=True)
    payload["format_version"] = 2
    del payload["metadata"]["hour_of_day_shares"]
    torch.save(payload, path)
    assert load_model(path).metadata.hour_of_day_shares is None
    generate(load_model(path), 300, seed=0)
    assert given[-1] is None


def test_hour_shares_that_are_not_shares_are_refused(sequence: SequenceModel) -> None:
    data = sequence.metadata.model_dump(mode="json")
    for bad in ([1 / 24] * 23, [0.5] * 24, [-1 / 24] + [2 / 24] + [1 / 24] * 22):
        data["hour_of_day_shares"] = bad
        with pytest.raises(ValueError, match="hour_of_day_shares"):
            SynthMetadata.model_validate(data)


def test_the_backlogs_time_mean_integrates_its_draining() -> None:
    """One job of 2 machine-hours at t=0, the next 4 hours later: the backlog drains
    from 2 h to 0 over the first 2 hours (area 2 h x 2 h / 2) and is empty for the next
    2, so its time mean is 0.5 h; the second job finds nothing."""
    submit = np.array([0.0, 4 * 3600.0])
    work = np.array([2 * 3600.0, 3600.0])
    assert found_backlog_s(submit, work).tolist() == [0.0, 0.0]
    assert backlog_time_mean_s(submit, work) == pytest.approx(0.5 * 3600)
    # Submitted an hour apart, the second finds an hour left; mean (2+1)/2 h over 1 h.
    close = np.array([0.0, 3600.0])
    assert found_backlog_s(close, work).tolist() == [0.0, 3600.0]
    assert backlog_time_mean_s(close, work) == pytest.approx(1.5 * 3600)
    assert backlog_time_mean_s(np.array([5.0]), np.array([9.0])) == 0


def test_machine_work_counts_at_most_the_request_on_at_most_the_machine() -> None:
    work = machine_work_s(np.array([50, 500]), np.array([100, 100]), np.array([4, 20]), 10)
    assert work.tolist() == [50 * 4 / 10, 100 * 10 / 10]
