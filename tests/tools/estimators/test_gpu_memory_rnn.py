"""cuDNN's recurrent layers in the white-box memory trace (``gpu/memory/cudnn_rnn.py``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

import pytest
import torch
from torch import nn

from knowledge_base.errors import InvalidInputError
from tools.estimators.gpu.memory.allocator import replay
from tools.estimators.gpu.memory.cudnn_rnn import reserve_bytes, use_cudnn_rnns
from tools.estimators.gpu.memory.estimate import estimate_gpu_memory
from tools.estimators.gpu.memory.recorder import record_training_step
from tools.estimators.model_file import load_user_model
from tools.profiling.zoo.registry import TrainingTask, named_model

ROOT = Path(__file__).resolve().parents[3]
MEASURED = ROOT / "data/gpu_measurements/h100-20261126-check-steps.jsonl"


class _Tagger(nn.Module):
    def __init__(self, cell: type[nn.LSTM | nn.GRU | nn.RNN], batch_first: bool = True) -> None:
        super().__init__()
        self.rnn = cell(16, 32, num_layers=2, batch_first=batch_first, bidirectional=True)
        self.out = nn.Linear(64, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        states, _ = self.rnn(x)
        out: torch.Tensor = self.out(states)
        return out.flatten(0, 1)


def _task(cell: type[nn.LSTM | nn.GRU | nn.RNN], batch: int = 8, steps: int = 12) -> TrainingTask:
    return TrainingTask(
        _Tagger(cell), (torch.randn(batch, steps, 16),), torch.randint(0, 5, (batch * steps,))
    )


@pytest.mark.parametrize("cell", [nn.LSTM, nn.GRU, nn.RNN])
def test_the_trace_allocates_cudnns_reserve_space_and_the_layers_shapes(
    cell: type[nn.LSTM | nn.GRU | nn.RNN],
) -> None:
    events = record_training_step(_task(cell), steps=1)
    mode = {nn.LSTM: "LSTM", nn.GRU: "GRU", nn.RNN: "RNN_TANH"}[cell]
    reserve = reserve_bytes(mode, 2, 2, 12, 8, 32, 4)
    sizes = [e.size_bytes for e in events if e.action == "alloc"]
    assert reserve in sizes
    output = 12 * 8 * 64 * 4  # (steps, batch, directions x hidden), fp32
    assert output in sizes


def test_the_weights_gradient_is_one_flat_buffer_as_cudnn_returns_it() -> None:
    model = _Tagger(nn.LSTM)
    task = TrainingTask(model, (torch.randn(8, 12, 16),), torch.randint(0, 5, (96,)))
    weights = sum(p.numel() for p in model.rnn.parameters()) * 4
    sizes = [e.size_bytes for e in record_training_step(task, steps=1) if e.action == "alloc"]
    assert weights in sizes


def test_a_packed_sequence_is_an_error_naming_the_packing_operator() -> None:
    # its lengths are data, which fake tensors do not have
    class Packed(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.rnn = nn.GRU(8, 8, batch_first=True)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            packed = nn.utils.rnn.pack_padded_sequence(x, [5, 3], batch_first=True)
            out, _ = self.rnn(packed)
            return nn.utils.rnn.pad_packed_sequence(out, batch_first=True)[0].sum(1)

    task = TrainingTask(Packed(), (torch.randn(2, 5, 8),), torch.randint(0, 8, (2,)))
    with pytest.raises(InvalidInputError, match="_pack_padded_sequence"):
        record_training_step(task, steps=1)


def test_unbatched_input_and_a_given_state_trace() -> None:
    class Unbatched(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.rnn = nn.LSTM(8, 8)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            state = (torch.zeros(1, 8), torch.zeros(1, 8))
            out: torch.Tensor = self.rnn(x, state)[0]
            return out

    task = TrainingTask(Unbatched(), (torch.randn(6, 8),), torch.randint(0, 8, (6,)))
    assert replay(record_training_step(task, steps=1)).peak_requested_bytes > 0


def test_only_recurrent_modules_without_inter_layer_dropout_are_changed() -> None:
    model = nn.Sequential(nn.LSTM(4, 4), nn.GRU(4, 4, num_layers=2, dropout=0.5), nn.Linear(4, 4))
    assert use_cudnn_rnns(model) == 1


def _measured(key: str) -> float:
    for line in MEASURED.read_text().splitlines():
        row = json.loads(line)
        if row["key"] == key:
            return float(row["max_memory_allocated_mib"])
    raise KeyError(key)


@pytest.mark.parametrize(
    ("key", "precision"),
    [("named:lstm[]:b256:sgd:fp32", "fp32"), ("named:lstm[]:b128:sgd:amp_bf16", "amp_bf16")],
)
def test_the_lstm_lm_is_within_3_percent_of_the_h100s_max_memory_allocated(
    key: str, precision: Literal["fp32", "amp_bf16"]
) -> None:
    # the second H100 machine's rows: configurations the constants were not fitted on
    found = named_model("lstm")
    assert found is not None
    family, params = found
    batch = int(key.split(":b")[1].split(":")[0])

    def build(b: int) -> TrainingTask:
        with torch.device("meta"):
            return family.task(params, b)

    est = estimate_gpu_memory(build, batch, precision=precision, generation="hopper")
    assert est.peak_allocated_mb == pytest.approx(_measured(key), rel=0.03)


def test_the_bidirectional_gru_file_is_within_3_percent_at_a_batch_not_fitted() -> None:
    user = load_user_model(ROOT / "examples/models/heldout/gru_tagger.py", "GRUTagger")
    est = estimate_gpu_memory(user, 512, generation="hopper")
    measured = _measured("file:examples/models/heldout/gru_tagger.py[]:b512:sgd:fp32")
    assert est.peak_allocated_mb == pytest.approx(measured, rel=0.03)  # the CPU trace: -42%
