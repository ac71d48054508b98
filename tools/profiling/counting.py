"""FLOPs and sizes of one training step, counted by running it (torch's FlopCounterMode).

FlopCounterMode knows matrix multiplies, convolutions and CUDA attention; the CPU LSTM
kernels (oneDNN's ``mkldnn_rnn_layer``: 2 FLOPs per multiply-add over the input and
recurrent weights, backward twice the forward, Kaplan et al. 2020) and the CPU flash
attention kernels (torch's own attention formulas) are added here. The committed sweep
(``data/dnn_profiles/cpu_sweep.jsonl``) was counted before the attention formulas were
added: its ViT and Transformer ``flops`` exclude attention. The estimators read FLOPs
from the op graph (``tools.profiling.opgraph``), which includes them.
Element-wise work (activations, norms, optimizer updates) is not counted as FLOPs; the
op graph (``tools.profiling.opgraph``) carries its bytes instead.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor
from torch.utils.flop_counter import (
    FlopCounterMode,
    sdpa_backward_flop_count,
    sdpa_flop_count,
)

from tools.profiling.zoo.registry import TrainingTask

__all__ = [
    "RNN_FLOPS",
    "count_forward_flops",
    "count_training_flops",
    "parameter_count",
    "training_step",
]


def _rnn_forward(
    input_shape: torch.Size, w_ih: torch.Size, w_hh: torch.Size, *args: Any, **kwargs: Any
) -> int:
    tokens = math.prod(input_shape) // w_ih[1]
    return 2 * tokens * (w_ih[0] * w_ih[1] + w_hh[0] * w_hh[1])


def _rnn_backward(
    input_shape: torch.Size, w_ih: torch.Size, w_hh: torch.Size, *args: Any, **kwargs: Any
) -> int:
    return 2 * _rnn_forward(input_shape, w_ih, w_hh)


def _cpu_attention_forward(
    query: torch.Size, key: torch.Size, value: torch.Size, *args: Any, **kwargs: Any
) -> int:
    return int(sdpa_flop_count(query, key, value))  # type: ignore[no-untyped-call]


def _cpu_attention_backward(
    grad_out: torch.Size,
    query: torch.Size,
    key: torch.Size,
    value: torch.Size,
    *args: Any,
    **kwargs: Any,
) -> int:
    return int(sdpa_backward_flop_count(grad_out, query, key, value))  # type: ignore[no-untyped-call]


# Kernels torch's counter does not know: oneDNN's LSTM layer and the CPU flash attention
# (torch counts the CUDA attention kernels with the same formulas used here).
RNN_FLOPS: dict[Any, Callable[..., int]] = {
    torch.ops.aten.mkldnn_rnn_layer: _rnn_forward,
    torch.ops.aten.mkldnn_rnn_layer_backward: _rnn_backward,
    torch.ops.aten._scaled_dot_product_flash_attention_for_cpu: _cpu_attention_forward,
    torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward: _cpu_attention_backward,
}


def parameter_count(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def training_step(task: TrainingTask, optimizer: torch.optim.Optimizer | None) -> Tensor:
    """One step: zero the gradients, forward, loss, backward, update."""
    if optimizer is not None:
        optimizer.zero_grad(set_to_none=True)
    loss = task.loss_value(task.model(*task.inputs))
    loss.backward()  # type: ignore[no-untyped-call]
    if optimizer is not None:
        optimizer.step()
    return loss


def count_training_flops(task: TrainingTask, optimizer: torch.optim.Optimizer | None = None) -> int:
    """FLOPs of one training step (forward + backward), by running it once."""
    with FlopCounterMode(display=False, custom_mapping=RNN_FLOPS) as counter:
        training_step(task, optimizer)
    return int(counter.get_total_flops())


def count_forward_flops(task: TrainingTask) -> int:
    """FLOPs of one forward pass without gradients (cheap, to size a configuration)."""
    with torch.no_grad(), FlopCounterMode(display=False, custom_mapping=RNN_FLOPS) as counter:
        task.model(*task.inputs)
    return int(counter.get_total_flops())
