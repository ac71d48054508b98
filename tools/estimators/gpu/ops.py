"""The GPU kernels of a traced step: each ATen operator as a kernel of a modelled class.

Matrix products become ``linear`` (``mm``/``addmm``: one [M, K] x [K, N] product) or
``bmm``; convolutions ``conv`` (a backward is one forward-sized convolution per gradient
it computes, and its bias gradient a reduction of its own, as CUDA runs it); layer norm
``ln`` (its backward twice a forward: it reads the input and the incoming gradient and
reduces for the affine gradients; batch norm's backward, an element-wise kernel, the
same); softmax and log-softmax
``softmax`` (backward 1.5x: three tensors moved instead of two); everything else that
moves data is an ``elementwise`` kernel over its largest tensor, with as many tensor
inputs as it reads (at most two) and transcendental math where the name says so. View
and bookkeeping operators launch nothing and cost nothing. Grouped convolutions are
memory-bound and priced as element-wise passes.
"""

from __future__ import annotations

import math
import operator
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray
from torch import Tensor
from torch.fx import GraphModule, Node

from tools.estimators.gpu.features import DIMS, OP_CLASSES
from tools.profiling.opgraph import ALIAS_OPS

__all__ = ["GpuKernels", "kernels_by_operator", "kernels_of"]

# Operators that launch no kernel: the aliases, and allocation without a fill.
_FREE = ALIAS_OPS | {
    "empty",
    "empty_like",
    "empty_strided",
    "new_empty",
    "new_empty_strided",
    "scalar_tensor",
    "sym_size",
    "sym_numel",
    "_assert_async",
    "_local_scalar_dense",
    "set_",
    "_to_copy_meta",
}
_HEAVY = (
    "gelu",
    "tanh",
    "pow",
    "exp",
    "log",
    "sigmoid",
    "silu",
    "erf",
    "sqrt",
    "rsqrt",
    "sin",
    "cos",
    "softplus",
    "elu",
    "mish",
)
# Backward kernels that are a multiple of a forward kernel's time.
_FACTOR = {
    "native_layer_norm_backward": 2.0,
    "native_batch_norm_backward": 2.0,
    "_softmax_backward_data": 1.5,
    "_log_softmax_backward_data": 1.5,
}


@dataclass(slots=True)
class GpuKernels:
    """Kernel shapes per operator class, their multiplier and phase, as columns."""

    dims: dict[str, dict[str, list[float]]] = field(
        default_factory=lambda: {c: {d: [] for d in DIMS[c]} for c in OP_CLASSES}
    )
    factor: dict[str, list[float]] = field(default_factory=lambda: {c: [] for c in OP_CLASSES})
    backward: dict[str, list[bool]] = field(default_factory=lambda: {c: [] for c in OP_CLASSES})
    operators: Counter[str] = field(default_factory=Counter)
    # A recurrent layer (nn.LSTM, nn.GRU...) traced: its loop is unrolled here, while on a
    # GPU cuDNN runs a layer as one call, so the count says nothing of the host's work.
    recurrent: bool = False

    def add(self, op_class: str, is_backward: bool, factor: float = 1.0, **dims: float) -> None:
        for key in DIMS[op_class]:
            self.dims[op_class][key].append(
                float(
                    max(dims[key], 1.0) if key not in ("Inputs", "Heavy", "Padding") else dims[key]
                )
            )
        self.factor[op_class].append(factor)
        self.backward[op_class].append(is_backward)

    def columns(self, op_class: str) -> dict[str, NDArray[np.float64]]:
        return {k: np.array(v, dtype=np.float64) for k, v in self.dims[op_class].items()}

    @property
    def count(self) -> int:
        return sum(len(v) for v in self.factor.values())

    @property
    def host_operators(self) -> int:
        """Operators the host dispatches one by one (0: not known, a recurrent model)."""
        return 0 if self.recurrent else self.count


def _name(node: Node) -> str:
    if node.target is operator.getitem:
        return "getitem"
    packet = getattr(node.target, "_overloadpacket", None)
    return (
        str(packet.__name__)
        if packet is not None
        else str(getattr(node.target, "__name__", node.target))
    )


def _val(arg: Any) -> Any:
    return arg.meta.get("val") if isinstance(arg, Node) else arg


def _tensors(value: Any) -> list[Tensor]:
    if isinstance(value, Tensor):
        return [value]
    if isinstance(value, list | tuple):
        return [t for item in value for t in _tensors(item)]
    return []


def _backward_nodes(graph: GraphModule) -> set[Node]:
    """Nodes the loss (the first output of a training step) does not depend on."""
    nodes = list(graph.graph.nodes)
    output = next(n for n in nodes if n.op == "output")
    result = output.args[0]
    if not isinstance(result, tuple | list) or len(result) < 2:
        return set()  # a forward pass: one output
    forward: set[Node] = set()
    stack = [result[0]] if isinstance(result[0], Node) else []
    while stack:
        node = stack.pop()
        if node in forward:
            continue
        forward.add(node)
        stack.extend(node.all_input_nodes)
    return {n for n in nodes if n.op == "call_function" and n not in forward}


def _elementwise(
    kernels: GpuKernels, node: Node, name: str, is_backward: bool, factor: float = 1.0
) -> None:
    ins = [t for a in node.all_input_nodes for t in _tensors(_val(a))]
    outs = _tensors(node.meta.get("val"))
    sizes = [t.numel() for t in (*ins, *outs)]
    if not sizes or max(sizes) == 0:
        return
    heavy = 1.0 if any(h in name for h in _HEAVY) else 0.0
    kernels.add(
        "elementwise",
        is_backward,
        factor,
        N=max(sizes),
        Inputs=float(min(max(len(ins), 1), 2)),
        Heavy=heavy,
    )


def kernels_of(graph: GraphModule) -> GpuKernels:
    """Every kernel the traced step launches, by class, with shapes."""
    kernels = GpuKernels(recurrent=_recurrent(graph))
    backward = _backward_nodes(graph)
    for node in _launching(graph):
        _add_node(kernels, node, node in backward)
    return kernels


def kernels_by_operator(graph: GraphModule) -> dict[str, GpuKernels]:
    """The same kernels as ``kernels_of``, apart by the ATen operator that launches them
    (to put each operator's priced time beside a profiler's per-operator device time)."""
    out: dict[str, GpuKernels] = {}
    backward = _backward_nodes(graph)
    for node in _launching(graph):
        kernels = out.setdefault(_name(node), GpuKernels(recurrent=_recurrent(graph)))
        _add_node(kernels, node, node in backward)
    return out


def _recurrent(graph: GraphModule) -> bool:
    return bool(getattr(graph, "meta", {}).get("recurrent", False))


def _launching(graph: GraphModule) -> list[Node]:
    """The step's ATen calls that launch a kernel (views and allocations launch none)."""
    return [
        node
        for node in graph.graph.nodes
        if node.op == "call_function" and _name(node) not in _FREE
    ]


def _add_node(kernels: GpuKernels, node: Node, is_bw: bool) -> None:
    name = _name(node)
    kernels.operators[name] += 1
    args = [_val(a) for a in node.args]
    out = node.meta.get("val")
    if name in ("mm", "addmm"):
        a, b = (args[1], args[2]) if name == "addmm" else (args[0], args[1])
        kernels.add("linear", is_bw, B=1, M=a.shape[0], N=b.shape[1], K=a.shape[1])
    elif name in ("bmm", "baddbmm"):
        a, b = (args[1], args[2]) if name == "baddbmm" else (args[0], args[1])
        kernels.add("bmm", is_bw, B=a.shape[0], M=a.shape[1], N=b.shape[2], K=a.shape[2])
    elif name in ("convolution", "convolution_backward"):
        _conv(kernels, name, args, is_bw, node)
    elif name.startswith("_scaled_dot_product_") and "attention" in name:
        _attention(kernels, node, is_bw)
    elif name in ("native_layer_norm", "native_layer_norm_backward"):
        x = args[1] if name.endswith("backward") else args[0]
        shape = args[2] if name.endswith("backward") else args[1]
        width = math.prod(shape)
        kernels.add("ln", is_bw, _FACTOR.get(name, 1.0), B=x.numel() // width, H=width)
    elif name in (
        "_softmax",
        "_log_softmax",
        "_safe_softmax",
        "_softmax_backward_data",
        "_log_softmax_backward_data",
    ):
        x = out if isinstance(out, Tensor) else args[0]
        width = x.shape[-1] if x.dim() else 1
        kernels.add("softmax", is_bw, _FACTOR.get(name, 1.0), B=x.numel() // width, H=width)
    else:
        _elementwise(kernels, node, name, is_bw, factor=_FACTOR.get(name, 1.0))


def _argument(node: Node, name: str, default: Any = None) -> Any:
    """An ATen call's argument by its schema name (positional or keyword)."""
    schema = getattr(node.target, "_schema", None)
    if schema is None:
        return default
    for i, arg in enumerate(schema.arguments):
        if arg.name == name:
            if i < len(node.args):
                return _val(node.args[i])
            return _val(node.kwargs.get(name, default))
    return default


def _attention(kernels: GpuKernels, node: Node, is_bw: bool) -> None:
    """A fused attention kernel (scaled_dot_product_attention's flash, memory-efficient or
    cuDNN kernels, and the CPU's flash kernel the trace runs instead) as the matrix
    products it computes: S = Q K^T and O = P V forward; backward, S again (the fused
    kernels recompute it rather than keep it), dV = P^T dO, dP = dO V^T, dQ = dS K and
    dK = dS^T Q. The softmax is fused in them (no tensor of scores is written), so it adds
    no kernel. A causal mask skips about half the tiles."""
    q, k, v = (_argument(node, n) for n in ("query", "key", "value"))
    if not all(isinstance(t, Tensor) and t.dim() >= 2 for t in (q, k, v)):
        _elementwise(kernels, node, _name(node), is_bw)
        return
    heads = float(math.prod(q.shape[:-2]))
    tq, d, tk, dv = q.shape[-2], q.shape[-1], k.shape[-2], v.shape[-1]
    factor = 0.5 if _argument(node, "is_causal", False) else 1.0
    products = (
        [(tq, tk, d), (tk, dv, tq), (tq, tk, dv), (tq, d, tk), (tk, d, tq)]
        if is_bw
        else [(tq, tk, d), (tq, dv, tk)]
    )
    for m, n, inner in products:
        kernels.add("bmm", is_bw, factor, B=heads, M=m, N=n, K=inner)


def _conv(kernels: GpuKernels, name: str, args: list[Any], is_bw: bool, node: Node) -> None:
    if name == "convolution":
        x, w = args[0], args[1]
        stride, padding, groups = args[3], args[4], args[8]
        count = 1.0
    else:
        x, w = args[1], args[2]
        stride, padding, groups = args[4], args[5], args[9]
        mask = list(args[10]) if len(args) > 10 else [True, True, True]
        count = float(sum(bool(m) for m in mask[:2]))
        if len(mask) > 2 and mask[2] and isinstance(args[0], Tensor):
            # The bias gradient: CUDA sums the incoming gradient over batch and space in a
            # kernel of its own (the CPU's convolution_backward does it inside).
            kernels.add("elementwise", True, N=float(args[0].numel()), Inputs=1.0, Heavy=0.0)
    if x.dim() != 4 or groups != 1:
        _elementwise(kernels, node, name, is_bw, factor=max(count, 1.0))
        return
    size = math.sqrt(x.shape[2] * x.shape[3])
    if count > 0:
        kernels.add(
            "conv",
            is_bw,
            count,
            B=x.shape[0],
            Cin=x.shape[1],
            Cout=w.shape[0],
            Kernel=math.sqrt(w.shape[2] * w.shape[3]),
            Input=size,
            Stride=float(stride[0]),
            Padding=float(padding[0]),
        )
