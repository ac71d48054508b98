"""Recurrent layers traced as the kernels cuDNN launches, for the GPU time model.

On the CPU ``nn.LSTM`` is one oneDNN call per layer (which the trace priced as a single
element-wise kernel: the LSTM LM's step predicted at 0.46x what an H100 measured, small
LSTMs at 0.02-0.2x) and ``nn.GRU`` a loop of a dozen cell operators per step (2-4x
over). cuDNN's standard algorithm does, per layer and direction:

- **forward:** one matrix product for the input part of every step at once
  (``steps x batch`` rows, ``input -> gates x hidden``), then for each step one product of
  the previous hidden state (``batch`` rows, ``hidden -> gates x hidden``) and one fused
  element-wise kernel (the gates' activations and the new cell and hidden state);
- **backward:** for each step, last to first, one fused element-wise kernel (the gates'
  gradients) and one product back to the hidden state; then one product for the input's
  gradient of every step, two for the weights' gradients (input and recurrent, ``steps x
  batch`` deep) and a reduction for the biases.

``use_cudnn_rnn_kernels`` makes the recurrent modules of a model launch exactly those
operators while the step is traced (fake tensors: nothing is computed), so the per-operator
model prices them as it prices any product and element-wise kernel. The gate kernels are
stand-ins of their size (an ``add`` over ``batch x gates x hidden``, two inputs), not
cuDNN's code. An LSTM's projection (``proj_size``) narrows the state the per-step products
read; its own product is not priced. The modules are given back unchanged when the trace
ends.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import Tensor, nn

__all__ = ["GATES", "use_cudnn_rnn_kernels"]

#: Gate blocks per cell (rows of ``weight_ih``/``weight_hh`` over ``hidden_size``).
GATES = {"LSTM": 4, "GRU": 3, "RNN_TANH": 1, "RNN_RELU": 1}


class _CudnnLayer(torch.autograd.Function):
    """One layer (every direction) of a recurrent module, as cuDNN's kernels.

    ``params`` holds each direction's ``weight_ih``, ``weight_hh`` and, when the module
    has them, ``bias_ih``, ``bias_hh``: ``per_direction`` tensors a direction."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, hidden: int, per_direction: int, *params: Tensor) -> Tensor:
        steps, batch, width = x.shape
        directions = len(params) // per_direction
        ctx.save_for_backward(x, *params)
        ctx.hidden, ctx.per_direction = hidden, per_direction
        rows = x.reshape(steps * batch, width)
        for d in range(directions):
            w_ih, w_hh = params[d * per_direction], params[d * per_direction + 1]
            inputs = torch.mm(rows, w_ih.t()).view(steps, batch, -1)
            state = torch.zeros(batch, hidden, dtype=x.dtype, device=x.device)
            for t in range(steps):
                gates = torch.add(torch.mm(state, w_hh.t()), inputs[t])  # the fused cell
                state = gates[:, :hidden]
        return torch.empty(steps, batch, directions * hidden, dtype=x.dtype, device=x.device)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Any, ...]:
        x, *params = ctx.saved_tensors
        steps, batch, width = x.shape
        hidden, per_direction = ctx.hidden, ctx.per_direction
        directions = len(params) // per_direction
        rows = x.reshape(steps * batch, width)
        history = torch.empty(steps * batch, hidden, dtype=x.dtype, device=x.device)
        dx: Tensor | None = None
        grads: list[Tensor] = []
        for d in range(directions):
            w_ih, w_hh = params[d * per_direction], params[d * per_direction + 1]
            gate_rows = w_hh.shape[0]
            dgates = torch.empty(steps, batch, gate_rows, dtype=x.dtype, device=x.device)
            for t in reversed(range(steps)):
                cell = torch.add(dgates[t], dgates[t])  # the fused cell's gradient
                torch.mm(cell, w_hh)  # back to the previous hidden state
            flat = dgates.view(steps * batch, gate_rows)
            part = torch.mm(flat, w_ih)
            dx = part if dx is None else dx + part
            grads += [torch.mm(flat.t(), rows), torch.mm(flat.t(), history)]
            if per_direction == 4:
                bias = flat.sum(0)
                grads += [bias, bias]
        assert dx is not None
        return (dx.view(steps, batch, width), None, None, *grads)


def _params(module: nn.RNNBase, layer: int) -> list[Tensor]:
    """Layer ``layer``'s weights (and biases), direction by direction."""
    names = ("weight_ih", "weight_hh") + (("bias_ih", "bias_hh") if module.bias else ())
    out: list[Tensor] = []
    for d in range(2 if module.bidirectional else 1):
        suffix = f"_l{layer}" + ("_reverse" if d else "")
        out += [getattr(module, name + suffix) for name in names]
    return out


def _forward(module: nn.RNNBase, input: Tensor, hx: Any = None) -> tuple[Tensor, Any]:
    """``module``'s forward as cuDNN's kernels (a padded sequence). A given initial state
    launches no kernel of its own (cuDNN reads it in the first step), so ``hx`` is unused."""
    batched = input.dim() == 3
    if not batched:
        input = input.unsqueeze(0 if module.batch_first else 1)
    x = (input.transpose(0, 1) if module.batch_first else input).contiguous()
    batch = x.shape[1]
    directions = 2 if module.bidirectional else 1
    hidden = module.hidden_size
    out = module.proj_size or hidden  # the hidden state's width (an LSTM's projection)
    per_direction = 4 if module.bias else 2
    for layer in range(module.num_layers):
        params = _params(module, layer)
        x = _CudnnLayer.apply(x, out, per_direction, *params)  # type: ignore[no-untyped-call]
    y = x.transpose(0, 1) if module.batch_first else x
    layers = module.num_layers * directions
    h_n = torch.zeros(layers, batch, out, dtype=x.dtype, device=x.device)
    state: Any = h_n
    if module.mode == "LSTM":
        state = (h_n, torch.zeros(layers, batch, hidden, dtype=x.dtype, device=x.device))
    if not batched:
        y = y.squeeze(0 if module.batch_first else 1)
    return y, state


@contextmanager
def use_cudnn_rnn_kernels(model: nn.Module) -> Iterator[int]:
    """While the block runs, the recurrent modules of ``model`` launch cuDNN's kernels;
    yields how many modules that is."""
    changed: list[nn.RNNBase] = []
    for module in model.modules():
        if isinstance(module, nn.RNNBase) and "forward" not in module.__dict__:

            def forward(input: Any, hx: Any = None, *, _m: nn.RNNBase = module) -> Any:
                if not isinstance(input, Tensor):  # a PackedSequence: left as it is
                    return type(_m).forward(_m, input, hx)
                return _forward(_m, input, hx)

            module.forward = forward
            changed.append(module)
    try:
        yield len(changed)
    finally:
        for module in changed:
            del module.__dict__["forward"]
