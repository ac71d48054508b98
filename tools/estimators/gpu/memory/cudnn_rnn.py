"""What cuDNN's recurrent layers allocate in a training step, on fake tensors.

On a GPU, ``nn.LSTM``, ``nn.GRU`` and ``nn.RNN`` run as one cuDNN call per forward
(``_cudnn_rnn``) and one per backward; on the CPU the same modules run as a loop of cell
operators (GRU, RNN) or oneDNN's layer kernel (LSTM), which save tensors of other sizes
than cuDNN keeps. Measured on an H100, the CPU trace under-counted recurrent steps by up to
42% (the bidirectional GRU tagger at batch 512: 212 MiB against 368), so
``use_cudnn_rnns`` makes each recurrent module of the traced copy allocate what PyTorch's
cuDNN path allocates (``aten/src/ATen/native/cudnn/RNN.cpp``), in its order:

- **forward:** the input made time-major and contiguous (a copy when ``batch_first``),
  the output, the last hidden (and cell) state, cuDNN's workspace (given back at the end
  of the call) and its reserve space (kept for the backward);
- **backward, input part:** the incoming gradient made contiguous, the input's copy
  again, the input and state gradients and a workspace;
- **backward, weight part:** the input's copy once more, the weights' gradient as one
  flat buffer the parameters' gradients are views of, and a workspace;
- **mixed precision:** CUDA autocast's ``_cudnn_rnn_cast_reflatten`` copies the weights
  into one half-precision flat buffer every forward (kept for the backward) and runs in
  half precision; the gradients flow back through that copy to the fp32 weights.

cuDNN does not publish how large its reserve and workspace are; both are taken as
proportional to the recurrent work (layers x directions x steps x batch x hidden units x
element size) with per-cell constants fitted on the H100 measurements of
``data/gpu_measurements/`` (the first machine's rows; the second machine's, other
configurations, checked them: see docs/notebooks/estimators.md). A module with dropout
between layers (cuDNN's dropout state, not measured) is left to the CPU trace; a packed
sequence does not trace on fake tensors at all (its lengths are data).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn

__all__ = ["RESERVE_UNITS", "WORKSPACE_UNITS", "reserve_bytes", "use_cudnn_rnns"]

#: cuDNN's reserve space, in elements per (layer, direction, step, sample, hidden unit).
#: LSTM and GRU fitted (H100, cuDNN 9.19); the plain RNN cells were not measured and
#: are taken as an LSTM's per gate (one gate of four).
RESERVE_UNITS = {"LSTM": 6.0, "GRU": 14.0, "RNN_TANH": 1.5, "RNN_RELU": 1.5}
#: cuDNN's workspace, in the same units (a transient of each call) ...
WORKSPACE_UNITS = {"LSTM": 8.0, "GRU": 6.0, "RNN_TANH": 2.0, "RNN_RELU": 2.0}
#: ... plus these bytes per (layer, direction), whatever the sizes (fitted: 8 MiB).
WORKSPACE_FIXED_BYTES = 8 << 20


def reserve_bytes(
    mode: str, layers: int, directions: int, steps: int, batch: int, hidden: int, element: int
) -> int:
    """Bytes of cuDNN's reserve space for one training forward."""
    return int(RESERVE_UNITS[mode] * layers * directions * steps * batch * hidden * element)


def workspace_bytes(
    mode: str, layers: int, directions: int, steps: int, batch: int, hidden: int, element: int
) -> int:
    """Bytes of cuDNN's workspace for one call of a training step."""
    per_unit = WORKSPACE_UNITS[mode] * steps * batch * hidden * element
    return int(layers * directions * (per_unit + WORKSPACE_FIXED_BYTES))


class _CudnnRnn(torch.autograd.Function):
    """One ``_cudnn_rnn`` call and its backward, for their allocations (fake tensors)."""

    @staticmethod
    def forward(
        ctx: Any, shape: dict[str, Any], x: Tensor, hx: Tensor, cx: Tensor | None, *weights: Tensor
    ) -> tuple[Tensor, ...]:
        steps, batch, _ = x.shape
        dtype = weights[0].dtype
        x_c = x.contiguous()
        y = torch.empty((steps, batch, shape["out"]), dtype=dtype, device=x.device)
        hy = torch.empty(hx.shape, dtype=dtype, device=x.device)
        cy = torch.empty(cx.shape, dtype=dtype, device=x.device) if cx is not None else None
        sizes = (
            shape["mode"],
            shape["layers"],
            shape["directions"],
            steps,
            batch,
            shape["hidden"],
            dtype.itemsize,
        )
        workspace = torch.empty(workspace_bytes(*sizes), dtype=torch.uint8, device=x.device)
        reserve = torch.empty(reserve_bytes(*sizes), dtype=torch.uint8, device=x.device)
        del workspace, x_c
        ctx.shape, ctx.sizes, ctx.has_cell = shape, sizes, cx is not None
        ctx.weight_shapes = [w.shape for w in weights]
        ctx.save_for_backward(x, hx, cx if cx is not None else hx, y, reserve)
        return (y, hy, cy) if cy is not None else (y, hy)

    @staticmethod
    def backward(
        ctx: Any, dy: Tensor | None, dhy: Tensor | None, dcy: Tensor | None = None
    ) -> tuple[Any, ...]:
        x, hx, cx, y, _reserve = ctx.saved_tensors
        device = x.device
        dy = torch.zeros_like(y) if dy is None else dy
        dhy = torch.zeros_like(hx) if dhy is None else dhy
        if ctx.has_cell and dcy is None:
            dcy = torch.zeros_like(cx)
        # the input part: x and dy contiguous, the gradients, a workspace
        x_c, dy_c = x.contiguous(), dy.contiguous()
        dx = torch.empty(x.shape, dtype=y.dtype, device=device)
        dhx = torch.empty(hx.shape, dtype=y.dtype, device=device)
        dcx = torch.empty(cx.shape, dtype=y.dtype, device=device) if ctx.has_cell else None
        workspace = torch.empty(workspace_bytes(*ctx.sizes), dtype=torch.uint8, device=device)
        del workspace, x_c, dy_c
        # the weight part: x contiguous again, the flat weight gradient, a workspace
        x_c = x.contiguous()
        total = sum(shape.numel() for shape in ctx.weight_shapes)
        flat = torch.zeros(total, dtype=y.dtype, device=device)
        workspace = torch.empty(workspace_bytes(*ctx.sizes), dtype=torch.uint8, device=device)
        del workspace, x_c
        grads, start = [], 0
        for shape in ctx.weight_shapes:
            grads.append(flat[start : start + shape.numel()].view(shape))
            start += shape.numel()
        del flat
        return (None, dx, dhx, dcx, *grads)


def _half_weights(weights: list[Tensor], dtype: torch.dtype) -> list[Tensor]:
    """CUDA autocast's re-flatten: the weights copied into one flat buffer of ``dtype``."""
    flat = torch.zeros(sum(w.numel() for w in weights), dtype=dtype, device=weights[0].device)
    views, start = [], 0
    for w in weights:
        view = flat[start : start + w.numel()].view(w.shape)
        view.copy_(w)
        views.append(view)
        start += w.numel()
    return views


def _forward(module: nn.RNNBase, input: Tensor, hx: Any = None) -> tuple[Tensor, Any]:
    """``module``'s forward as cuDNN runs it (a padded, not packed, sequence)."""
    batched = input.dim() == 3
    if not batched:
        input = input.unsqueeze(0 if module.batch_first else 1)
        if hx is not None:
            hx = tuple(h.unsqueeze(1) for h in hx) if isinstance(hx, tuple) else hx.unsqueeze(1)
    x = input.transpose(0, 1) if module.batch_first else input
    batch = x.shape[1]
    directions = 2 if module.bidirectional else 1
    out = module.proj_size or module.hidden_size
    is_lstm = module.mode == "LSTM"
    weights = [getattr(module, name) for name in module._flat_weights_names]
    if hx is None:
        h0 = torch.zeros(module.num_layers * directions, batch, out, dtype=x.dtype, device=x.device)
        c0 = (
            torch.zeros(
                module.num_layers * directions,
                batch,
                module.hidden_size,
                dtype=x.dtype,
                device=x.device,
            )
            if is_lstm
            else None
        )
    else:
        h0, c0 = hx if is_lstm else (hx, None)
    shape = _shape(module, directions, out)
    if torch.is_autocast_enabled("cpu"):
        dtype = torch.get_autocast_dtype("cpu")
        with torch.autocast("cpu", enabled=False):
            weights = _half_weights(weights, dtype)
            x, h0 = x.to(dtype), h0.to(dtype)
            c0 = c0.to(dtype) if c0 is not None else None
            results = _CudnnRnn.apply(shape, x, h0, c0, *weights)  # type: ignore[no-untyped-call]
    else:
        results = _CudnnRnn.apply(shape, x, h0, c0, *weights)  # type: ignore[no-untyped-call]
    y: Tensor = results[0].transpose(0, 1) if module.batch_first else results[0]
    states: tuple[Tensor, ...] = tuple(results[1:])
    if not batched:
        y = y.squeeze(0 if module.batch_first else 1)
        states = tuple(s.squeeze(1) for s in states)
    state: Any = states if is_lstm else states[0]
    return y, state


def _shape(module: nn.RNNBase, directions: int, out: int) -> dict[str, Any]:
    return {
        "mode": module.mode,
        "layers": module.num_layers,
        "directions": directions,
        "hidden": module.hidden_size,
        "out": directions * out,
    }


def use_cudnn_rnns(model: nn.Module) -> int:
    """Make every recurrent module of ``model`` (a traced copy) allocate as cuDNN does;
    the number of modules changed."""
    changed = 0
    for module in model.modules():
        if not isinstance(module, nn.RNNBase) or (module.dropout and module.num_layers > 1):
            continue
        original: Callable[..., Any] = module.forward

        def forward(
            input: Any,
            hx: Any = None,
            *,
            _m: nn.RNNBase = module,
            _original: Callable[..., Any] = original,
        ) -> Any:
            if not isinstance(input, Tensor):  # a PackedSequence
                return _original(input, hx)
            return _forward(_m, input, hx)

        module.forward = forward
        changed += 1
    return changed
