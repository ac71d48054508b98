"""Every tensor storage one training step allocates and frees, in program order.

The step runs on fake tensors (``FakeTensorMode``: shapes, dtypes and storages, no
data), so a model of any size is traced in seconds with no memory. A
``TorchDispatchMode`` sees every ATen operator below autograd, forward, backward and
the optimizer's update alike: a storage an operator returns that was not live before is
an allocation (its ``nbytes``); a storage whose last tensor is gone (a weak reference
to the storage itself, so views and tensors autograd saves keep it alive as they do on
a GPU) is freed, noticed before the next operator runs, which is when the caching
allocator could first reuse it.

The fake tensors say device ``cpu``: a CPU-only PyTorch build aborts in autograd on a
fake ``cuda`` device (no CUDA device guard), so AMP is CPU autocast with the CUDA
dtype. Both autocasts run matrix multiplies and convolutions in half precision and
keep fp32 master weights; their fp32 lists differ in a few reductions and losses.
Kernels CUDA would pick instead of the CPU ones save tensors of nearly the same sizes
(batch norm), with one exception made good: recurrent layers, which the CPU runs as cell
loops and cuDNN as one call with a reserve space, run as cuDNN allocates
(``cudnn_rnn.use_cudnn_rnns``). cuDNN's convolution workspaces, taken from the caching
allocator during a call and given back after it, depend on the algorithm cuDNN picks:
each convolution records an approximation of one (``cudnn_conv.conv_workspace_bytes``).

One difference is emulated: under AMP, CUDA's log-softmax of the built-in cross-entropy
reads the half-precision logits and writes fp32 (``half_to_float``), and its backward
writes the gradient in the logits' dtype; CPU autocast copies the logits to fp32 first and
its backward writes fp32, then casts. Over a language model's vocabulary that is one more
half-precision logits tensor at the backward's peak: measured on an H100, the white-box
over-counted AMP steps by what that tensor holds (the Transformer LM 7.8 MiB a sample,
BERT-base 7.4, the LSTM LM 1.7: 32,000, 30,522 and 33,278 words). So a task whose loss is
the built-in cross-entropy runs it, under AMP, through ``_HalfToFloatLogSoftmax``, which
allocates what the CUDA kernels allocate (fake tensors: no values to compute).

A second: dropout. On the CPU, ``nn.functional.dropout`` multiplies by a noise tensor of
the input's dtype and autograd saves it; on a GPU it is one fused kernel that saves a
one-byte mask. Over a Hugging Face GPT-2's dropouts (attention probabilities, both
residual branches, embeddings) the CPU trace held 3 bytes an element more: the GPT-2 file
over by 5% at every batch, 0.62 MiB a sample. The step runs under
``cuda_ops.FusedDropout``, which takes CUDA's path.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Literal

import torch
from torch import Tensor, nn
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from knowledge_base.errors import InvalidInputError
from tools.estimators.gpu.memory.allocator import MemoryEvent
from tools.estimators.gpu.memory.cudnn_conv import conv_workspace_bytes
from tools.estimators.gpu.memory.cudnn_rnn import use_cudnn_rnns
from tools.profiling.cuda_ops import FusedDropout
from tools.profiling.zoo.registry import TrainingTask, loss_fn

__all__ = ["Optimizer", "Precision", "StepRecorder", "record_training_step"]

# Keys of the convolution workspaces' events: below the cuBLAS workspaces'
# (``context._FIRST_WORKSPACE_KEY``), far from any storage's address.
_WORKSPACE_KEY = -(1 << 41)

Optimizer = Literal["sgd", "adam"]
Precision = Literal["fp32", "amp_fp16", "amp_bf16"]


class StepRecorder(TorchDispatchMode):  # type: ignore[no-untyped-call]
    """A dispatch mode that turns storage lifetimes into ``MemoryEvent``s."""

    def __init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.events: list[MemoryEvent] = []
        self.last_op = "setup"
        self._live: dict[int, StorageWeakRef] = {}
        self._workspaces = 0

    def track(self, tensor: Tensor) -> None:
        """Record ``tensor``'s storage as allocated if it is not live already."""
        storage = tensor.untyped_storage()
        ref = StorageWeakRef(storage)  # type: ignore[no-untyped-call]
        if ref.cdata not in self._live:
            self._live[ref.cdata] = ref
            self.events.append(MemoryEvent("alloc", ref.cdata, storage.nbytes()))

    def collect(self) -> None:
        """Record a free for every storage no tensor holds any more."""
        expired = torch.UntypedStorage._expired  # StorageWeakRef.expired, minus a call
        gone = [key for key in self._live if expired(key)]
        for key in gone:
            del self._live[key]
            self.events.append(MemoryEvent("free", key))

    def __torch_dispatch__(
        self,
        func: Any,
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        self.last_op = str(func.overloadpacket.__name__)
        out = func(*args, **(kwargs or {}))
        # Frees are collected only when something new is allocated: that is the only
        # moment their order matters, and the operator's own inputs are still held
        # by ``args``, so nothing it reads is collected before its outputs are placed.
        fresh = [
            leaf
            for leaf in tree_leaves(out)
            if isinstance(leaf, Tensor) and leaf.untyped_storage()._cdata not in self._live
        ]
        if fresh:
            self.collect()
            for leaf in fresh:
                self.track(leaf)
        if self.last_op in ("convolution", "convolution_backward"):
            self._conv_workspace(args, out)
        return out

    def _conv_workspace(self, args: tuple[Any, ...], out: Any) -> None:
        """cuDNN's workspace for the call just recorded: held during it, then given back."""
        if self.last_op == "convolution":
            x, weight, result, groups = args[0], args[1], out, args[8]
        else:
            x, weight, result, groups = args[1], args[2], args[0], args[9]
        size = conv_workspace_bytes(x, weight, result, groups)
        if size > 0:
            self._workspaces += 1
            key = _WORKSPACE_KEY - self._workspaces
            self.events += [MemoryEvent("alloc", key, size), MemoryEvent("free", key)]


def _output_tensor(output: Any) -> Tensor:
    """A model's output as the tensor the built-in losses take (Hugging Face: logits)."""
    if isinstance(output, Tensor):
        return output
    for name in ("logits", "prediction_logits", "last_hidden_state"):
        value = getattr(output, name, None)
        if isinstance(value, Tensor):
            return value
    if isinstance(output, tuple | list) and output and isinstance(output[0], Tensor):
        return output[0]
    raise InvalidInputError(
        f"the model returned {type(output).__name__}, not a tensor or logits", field="model"
    )


def _fake_model(model: nn.Module, mode: FakeTensorMode) -> nn.Module:
    """A copy of ``model`` whose parameters and buffers are fake CPU tensors."""
    has_data = any(not t.is_meta for t in (*model.parameters(), *model.buffers()))
    model = copy.deepcopy(model).to("meta") if has_data else copy.deepcopy(model)
    cpu = torch.device("cpu")
    for module in model.modules():
        for name, param in list(module._parameters.items()):
            if param is not None:
                fake = FakeTensor(mode, param.detach(), cpu)
                module._parameters[name] = nn.Parameter(fake, requires_grad=param.requires_grad)
        for name, buffer in list(module._buffers.items()):
            if buffer is not None:
                module._buffers[name] = FakeTensor(mode, buffer.to("meta"), cpu)
    return model


def _optimizer(kind: Optimizer, params: list[nn.Parameter]) -> torch.optim.Optimizer:
    # foreach=True: what PyTorch picks by default when every parameter is on a GPU; its
    # list operators allocate temporaries for all parameters at once.
    if kind == "sgd":
        return torch.optim.SGD(params, lr=0.01, momentum=0.9, foreach=True)
    if kind == "adam":
        return torch.optim.Adam(params, lr=1e-3, foreach=True)
    raise InvalidInputError("must be 'sgd' or 'adam'", field="optimizer", value=kind)


class _HalfToFloatLogSoftmax(torch.autograd.Function):
    """CUDA's AMP log-softmax, for its allocations: an fp32 output from half-precision
    logits, with no fp32 copy of them, and a gradient in the logits' dtype."""

    @staticmethod
    def forward(ctx: Any, logits: Tensor, dim: int) -> Tensor:
        ctx.dim, ctx.dtype = dim, logits.dtype
        out = torch.empty(logits.shape, dtype=torch.float32, device=logits.device)
        ctx.save_for_backward(out)
        return out

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None]:
        (out,) = ctx.saved_tensors
        return torch.empty(out.shape, dtype=ctx.dtype, device=grad.device), None


def _amp_cross_entropy(logits: Tensor, targets: Tensor) -> Tensor:
    """The built-in cross-entropy as CUDA's AMP runs it (see the module's docstring)."""
    if logits.dtype not in (torch.float16, torch.bfloat16) or logits.dim() < 2:
        return nn.functional.cross_entropy(logits, targets)
    log_probs: Tensor = _HalfToFloatLogSoftmax.apply(logits, 1)  # type: ignore[no-untyped-call]
    return nn.functional.nll_loss(log_probs, targets)


@contextmanager
def _autocast(precision: Precision) -> Iterator[None]:
    if precision == "fp32":
        yield
        return
    dtype = torch.float16 if precision == "amp_fp16" else torch.bfloat16
    with torch.autocast("cpu", dtype=dtype):
        yield


def record_training_step(
    task: TrainingTask,
    *,
    optimizer: Optimizer = "sgd",
    precision: Precision = "fp32",
    steps: int = 2,
    setup: Callable[[StepRecorder, list[nn.Parameter]], list[Tensor]] | None = None,
) -> list[MemoryEvent]:
    """The allocation events of ``steps`` training steps of ``task`` on fake tensors.

    The model's parameters and buffers, then the batch, are allocated first (what
    ``model.to("cuda")`` and copying the batch do); each step is ``zero_grad`` (set to
    None), forward under ``precision``, loss, backward, optimizer update. Two steps: the
    first creates the optimizer's state, the second is the steady state a long run
    repeats. ``setup`` may allocate more before the first step (data-parallel buckets)
    and returns tensors to keep alive. InvalidInputError names the operator that failed.
    """
    if steps < 1:
        raise InvalidInputError("must be at least 1", field="steps", value=steps)
    if precision not in ("fp32", "amp_fp16", "amp_bf16"):
        raise InvalidInputError(
            "must be 'fp32', 'amp_fp16' or 'amp_bf16'", field="precision", value=precision
        )
    mode = FakeTensorMode(allow_non_fake_inputs=False)
    recorder = StepRecorder()
    model = _fake_model(task.model, mode)
    use_cudnn_rnns(model)
    cpu = torch.device("cpu")
    inputs = tuple(FakeTensor(mode, x.to("meta"), cpu) for x in task.inputs)
    targets = FakeTensor(mode, task.targets.to("meta"), cpu)
    params = [p for p in model.parameters() if p.requires_grad]
    for tensor in (*model.parameters(), *model.buffers(), *inputs, targets):
        recorder.track(tensor)
    opt = _optimizer(optimizer, params)
    criterion = task.criterion
    model.train()
    try:
        with mode, recorder, FusedDropout():
            kept = setup(recorder, params) if setup is not None else []
            for _ in range(steps):
                opt.zero_grad(set_to_none=True)
                with _autocast(precision):
                    output = model(*inputs)
                    if criterion is not None:
                        loss = criterion(output, targets)
                    elif precision != "fp32" and task.loss == "cross_entropy":
                        loss = _amp_cross_entropy(_output_tensor(output), targets)
                    else:
                        loss = loss_fn(task.loss)(_output_tensor(output), targets)
                loss.backward()  # type: ignore[no-untyped-call]
                opt.step()
                del output, loss
            recorder.collect()
    except InvalidInputError:
        raise
    except Exception as error:
        raise InvalidInputError(
            f"{type(task.model).__name__} could not be traced on fake tensors: operator "
            f"{recorder.last_op!r} failed: {type(error).__name__}: {str(error)[:300]}",
            field="model",
            value=type(task.model).__name__,
        ) from error
    del kept
    return recorder.events
