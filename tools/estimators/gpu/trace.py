"""Tracing one training step (or one forward pass) for the GPU estimator, without memory.

The model is built on the meta device and its tensors become fake tensors: a
multi-billion-parameter Hugging Face model traces in seconds and allocates nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn
from torch.fx import GraphModule

from knowledge_base.errors import InvalidInputError
from tools.estimators.gpu.rnn_kernels import use_cudnn_rnn_kernels
from tools.profiling.atentrace import trace_aten
from tools.profiling.cuda_ops import FusedDropout
from tools.profiling.opgraph import to_meta
from tools.profiling.zoo.registry import TrainingTask, loss_fn

__all__ = ["logits_of", "trace_training_step"]


def logits_of(output: Any) -> Tensor:
    """A model's output tensor: itself, a Hugging Face output's ``logits``, or item 0."""
    if isinstance(output, Tensor):
        return output
    for name in ("logits", "prediction_logits", "last_hidden_state"):
        logits = getattr(output, name, None)
        if isinstance(logits, Tensor):
            return logits
    if isinstance(output, tuple | list) and output and isinstance(output[0], Tensor):
        return output[0]
    raise TypeError(f"cannot find the output tensor in {type(output).__name__}")


def trace_training_step(task: TrainingTask, *, backward: bool = True) -> GraphModule:
    """The ATen graph of forward, loss and every parameter gradient (or forward only)."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.func import functional_call

    task = to_meta(task) if _has_data(task) else task
    model: nn.Module = task.model
    mode = FakeTensorMode(allow_non_fake_inputs=True)
    cpu = torch.device("cpu")

    def fake(t: Tensor) -> Tensor:
        return mode.fake_tensor_converter.from_meta_and_device(mode, t, cpu)

    params = {n: fake(p) for n, p in model.named_parameters() if p.requires_grad}
    buffers = {n: fake(b) for n, b in model.named_buffers()}
    inputs = tuple(fake(x) for x in task.inputs)
    targets = fake(task.targets)
    criterion: Callable[[Tensor, Tensor], Tensor] = task.criterion or loss_fn(task.loss)

    def step(
        params: dict[str, Tensor],
        buffers: dict[str, Tensor],
        inputs: tuple[Tensor, ...],
        targets: Tensor,
    ) -> Any:
        out = functional_call(model, (params, buffers), inputs)
        if not backward:
            return logits_of(out)
        value = criterion(logits_of(out) if task.criterion is None else out, targets)
        grads = torch.autograd.grad(value, list(params.values()), allow_unused=True)
        return value, tuple(g for g in grads if g is not None)

    was_training = model.training
    model.train(backward)
    try:
        # CUDA's one dropout kernel, not the CPU's three; recurrent layers as cuDNN's kernels
        with mode, FusedDropout(), use_cudnn_rnn_kernels(model):
            if backward:
                graph = trace_aten(step, (params, buffers, inputs, targets), fake=mode)
            else:
                with torch.no_grad():
                    graph = trace_aten(step, (params, buffers, inputs, targets), fake=mode)
        # Recurrent layers' steps are launched by cuDNN, not dispatched by the host one by one.
        graph.meta["recurrent"] = any(isinstance(m, nn.RNNBase) for m in model.modules())
        return graph
    except InvalidInputError:
        raise
    except Exception as error:
        raise InvalidInputError(
            f"{type(model).__name__} does not trace (one training step on fake tensors): "
            f"{type(error).__name__}: {str(error)[:300]}",
            field="model",
            value=type(model).__name__,
        ) from error
    finally:
        model.train(was_training)


def _has_data(task: TrainingTask) -> bool:
    tensors = [*task.model.parameters(), *task.model.buffers(), *task.inputs, task.targets]
    return any(not t.is_meta for t in tensors)
