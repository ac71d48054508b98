"""The operator graph of one training step, for white-box estimators (HARP's graph input).

``trace_step`` records one training step (forward, loss, gradients of every parameter)
on fake tensors into a torch.fx graph of ATen operators (``atentrace.trace_aten``: the
graph ``make_fx`` records, without its machinery); with the model and batch on
the ``meta`` device nothing is computed, so tracing a full-size ResNet-50 takes about a
second and no memory. ``op_graph`` turns that graph into an ``OpGraph``:

- nodes: every operator that does work (views, ``detach`` and tuple ``getitem`` are
  folded into the tensor they alias), with its type, category, phase (forward if the
  loss depends on it, else backward), FLOPs (torch's flop formulas: matrix multiplies,
  convolutions, attention), bytes read, bytes written, and parameter bytes read;
- edges: data flow between those nodes (producer -> consumer);
- totals the analytic models use: parameter, buffer and batch bytes, activations saved
  for backward (forward outputs a backward operator reads), and the peak of live
  intermediate tensors when the step runs in graph order (tensors freed after their
  last reader; gradients and the loss kept to the end).

The optimizer update is not traced: its cost is per parameter and the estimators take
it from the parameter count and the optimizer's state (1 tensor for SGD with momentum,
2 for Adam).
"""

from __future__ import annotations

import copy
import math
import operator
from collections.abc import Callable, Iterable
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor, nn
from torch.func import functional_call
from torch.fx import GraphModule, Node
from torch.utils.flop_counter import flop_registry

from tools.profiling.atentrace import trace_aten
from tools.profiling.counting import RNN_FLOPS
from tools.profiling.rnnmarks import RNN_META, RnnMarker, mark_recurrent
from tools.profiling.zoo.registry import TrainingTask, loss_fn

__all__ = [
    "ALIAS_OPS",
    "CATEGORIES",
    "GEOMETRY_FIELDS",
    "GEOMETRY_VERSION",
    "RANDOM_OPS",
    "OpGraph",
    "OpNode",
    "category_of",
    "op_graph",
    "to_meta",
    "trace_step",
]

# Operators that only re-describe a tensor they receive (no work, no new memory).
ALIAS_OPS = frozenset(
    {
        "view",
        "_unsafe_view",
        "reshape",
        "t",
        "transpose",
        "permute",
        "expand",
        "unsqueeze",
        "squeeze",
        "select",
        "slice",
        "detach",
        "alias",
        "as_strided",
        "unbind",
        "split",
        "split_with_sizes",
        "chunk",
        "lift_fresh",
        "lift_fresh_copy",
        "_reshape_alias",
        "getitem",
        "expand_as",
        "view_as",
        "unfold",
        "unsafe_split",
        "unsafe_split_with_sizes",
        "unsafe_chunk",
        "diagonal",
        "flatten",
    }
)

CATEGORIES: tuple[str, ...] = (
    "conv",
    "matmul",
    "attention",
    "norm",
    "activation",
    "elementwise",
    "reduction",
    "pool",
    "embedding",
    "copy",
    "rnn",
    "loss",
    "other",
)

_CATEGORY_RULES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("conv", ("convolution", "conv")),
    ("attention", ("attention", "_softmax", "softmax")),
    ("rnn", ("rnn", "lstm", "gru")),
    ("matmul", ("mm", "addmm", "bmm", "baddbmm", "matmul", "linear", "addmv", "dot")),
    ("norm", ("batch_norm", "layer_norm", "group_norm", "native_norm", "rsqrt", "var_mean")),
    (
        "activation",
        ("relu", "threshold", "gelu", "hardtanh", "sigmoid", "tanh", "silu", "elu", "leaky"),
    ),
    ("pool", ("pool", "adaptive")),
    ("embedding", ("embedding", "index", "gather", "scatter", "take")),
    ("loss", ("nll_loss", "cross_entropy", "binary_cross_entropy", "mse_loss")),
    ("reduction", ("sum", "mean", "amax", "max", "min", "norm", "std", "var", "prod", "cumsum")),
    ("copy", ("cat", "stack", "clone", "copy", "contiguous", "_to_copy", "pad", "constant_pad")),
    (
        "elementwise",
        (
            "add",
            "sub",
            "mul",
            "div",
            "pow",
            "exp",
            "log",
            "sqrt",
            "neg",
            "where",
            "fill",
            "zero",
            "ones",
            "empty",
            "full",
            "clamp",
            "masked",
            "bernoulli",
            "native_dropout",
            "scalar",
            "reciprocal",
            "abs",
            "sign",
            "lerp",
            "addcmul",
            "addcdiv",
            "erf",
            "eq",
            "ne",
            "lt",
            "gt",
            "le",
            "ge",
            "logical",
            "to",
        ),
    ),
)


def category_of(op: str) -> str:
    """The coarse category of an ATen operator name ("convolution_backward" is conv)."""
    name = op.lower()
    for category, needles in _CATEGORY_RULES:
        if any(needle in name for needle in needles):
            return category
    return "other"


@dataclass(frozen=True, slots=True)
class OpNode:
    """One operator of the training step."""

    op: str
    category: str
    backward: bool
    flops: float
    input_bytes: float
    output_bytes: float
    param_bytes: float
    rnn_call: int = -1  # which recurrent layer call's C++ loop dispatched it (-1: none)
    # the operator's shape geometry (``GEOMETRY_FIELDS`` order, ``node_geometry``)
    geometry: tuple[float, ...] = ()


@dataclass(slots=True)
class OpGraph:
    """The operator graph of one training step and its totals (bytes, FLOPs)."""

    nodes: list[OpNode]
    edges: list[tuple[int, int]]
    parameter_bytes: float
    buffer_bytes: float
    batch_bytes: float
    saved_activation_bytes: float
    peak_live_bytes: float
    parameters: int
    totals: dict[str, float] = field(default_factory=dict)
    # the live peak of the step's intermediate tensors without the step's outputs (the
    # gradients), each freed after its last reader: what the activations need on top of
    # the model state (``peak_live_bytes`` keeps every gradient to the end of the step)
    peak_activation_bytes: float = 0.0

    @property
    def flops(self) -> float:
        return sum(node.flops for node in self.nodes)

    def summary(self) -> dict[str, float]:
        """Graph-level features: totals per phase and category, sizes, op counts."""
        out: dict[str, float] = {
            "graph_nodes": float(len(self.nodes)),
            "graph_edges": float(len(self.edges)),
            "parameter_bytes": self.parameter_bytes,
            "buffer_bytes": self.buffer_bytes,
            "batch_bytes": self.batch_bytes,
            "saved_activation_bytes": self.saved_activation_bytes,
            "peak_live_bytes": self.peak_live_bytes,
            "peak_activation_bytes": self.peak_activation_bytes,
            "parameters": float(self.parameters),
        }
        for phase in ("forward", "backward"):
            out[f"{phase}_flops"] = 0.0
            out[f"{phase}_bytes"] = 0.0
            out[f"{phase}_ops"] = 0.0
        for category in CATEGORIES:
            out[f"flops_{category}"] = 0.0
            out[f"bytes_{category}"] = 0.0
            out[f"ops_{category}"] = 0.0
        for node in self.nodes:
            phase = "backward" if node.backward else "forward"
            moved = node.input_bytes + node.output_bytes
            out[f"{phase}_flops"] += node.flops
            out[f"{phase}_bytes"] += moved
            out[f"{phase}_ops"] += 1
            out[f"flops_{node.category}"] += node.flops
            out[f"bytes_{node.category}"] += moved
            out[f"ops_{node.category}"] += 1
        return out


def to_meta(task: TrainingTask) -> TrainingTask:
    """A copy of ``task`` whose model and batch live on the meta device (no data)."""
    model = copy.deepcopy(task.model).to("meta") if _has_data(task.model) else task.model

    def meta(tensor: Tensor) -> Tensor:
        return torch.empty_like(tensor, device="meta")

    return TrainingTask(
        model,
        tuple(meta(x) for x in task.inputs),
        meta(task.targets),
        task.loss,
        task.criterion,
    )


def _has_data(model: nn.Module) -> bool:
    return any(not t.is_meta for t in (*model.parameters(), *model.buffers()))


def _on_cpu(task: TrainingTask) -> TrainingTask:
    """Meta parts of ``task`` as uninitialised CPU tensors (never touched, so no memory)."""
    model = task.model
    if any(t.is_meta for t in (*model.parameters(), *model.buffers())):
        model = copy.deepcopy(model).to_empty(device="cpu")

    def cpu(tensor: Tensor) -> Tensor:
        return torch.empty_like(tensor, device="cpu") if tensor.is_meta else tensor

    return TrainingTask(
        model, tuple(cpu(x) for x in task.inputs), cpu(task.targets), task.loss, task.criterion
    )


def trace_step(
    task: TrainingTask, loss: Callable[[Tensor, Tensor], Tensor] | None = None
) -> GraphModule:
    """The ATen graph of one training step (forward, loss, parameter gradients).

    Traced with fake CPU tensors: the operators are the ones a CPU run dispatches to
    (one oneDNN kernel per LSTM layer, CPU attention kernels), and nothing is computed.
    """
    task = _on_cpu(task)
    model = task.model
    params = {name: p for name, p in model.named_parameters() if p.requires_grad}
    buffers = dict(model.named_buffers())
    criterion = loss or task.criterion or loss_fn(task.loss)

    marker: RnnMarker | None = None

    def step(
        params: dict[str, Tensor],
        buffers: dict[str, Tensor],
        inputs: tuple[Tensor, ...],
        targets: Tensor,
    ) -> tuple[Tensor, tuple[Tensor, ...]]:
        with marker if marker is not None else nullcontext():
            out = functional_call(model, (params, buffers), inputs)
            value = criterion(out, targets)
            grads = torch.autograd.grad(value, list(params.values()), allow_unused=True)
        return value, tuple(g for g in grads if g is not None)

    was_training = model.training
    model.train()
    try:
        # recurrent layers' loops tagged (node.meta[RNN_META]): rnnmarks module docstring
        with mark_recurrent(model) as marker:
            graph = trace_aten(step, (params, buffers, task.inputs, task.targets))
    finally:
        model.train(was_training)
    return graph


def _op_name(node: Node) -> str:
    target = node.target
    if target is operator.getitem:
        return "getitem"
    packet = getattr(target, "_overloadpacket", None)
    if packet is not None:
        return str(packet.__name__)
    return str(getattr(target, "__name__", target))


def _tensors(value: Any) -> Iterable[Tensor]:
    if isinstance(value, Tensor):
        yield value
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _tensors(item)


def _nbytes(value: Any) -> float:
    return float(sum(t.numel() * t.element_size() for t in _tensors(value)))


def _conv_backward_flops(node: Node) -> float:
    """Gradient FLOPs of a convolution: each requested gradient costs one forward pass.

    torch's own formula over-counts grouped (depthwise) convolutions' input gradient by
    the group count; this one is exact for any grouping.
    """
    grad_out, weight = node.args[0], node.args[2]
    mask = node.args[10] if len(node.args) > 10 else [True, True, True]
    if not isinstance(grad_out, Node) or not isinstance(weight, Node):
        return 0.0
    g, w = grad_out.meta.get("val"), weight.meta.get("val")
    if not isinstance(g, Tensor) or not isinstance(w, Tensor):
        return 0.0
    forward = 2.0 * g.numel() * math.prod(w.shape[1:])
    wanted = list(mask) if isinstance(mask, list | tuple) else [True, True]
    return forward * sum(bool(x) for x in wanted[:2])


def _flops(node: Node) -> float:
    target = node.target
    packet = getattr(target, "_overloadpacket", None)
    if packet is torch.ops.aten.convolution_backward:
        return _conv_backward_flops(node)
    formula = RNN_FLOPS.get(packet) or flop_registry.get(packet)
    if formula is None:
        return 0.0

    def value(arg: Any) -> Any:
        if isinstance(arg, Node):
            return arg.meta.get("val")
        if isinstance(arg, list | tuple):
            return type(arg)(value(a) for a in arg)
        return arg

    args = [value(a) for a in node.args]
    kwargs = {k: value(v) for k, v in node.kwargs.items()}
    try:
        if packet in RNN_FLOPS:
            shapes = [a.shape if isinstance(a, Tensor) else a for a in args]
            return float(formula(*shapes, **kwargs))
        return float(formula(*args, **kwargs, out_val=node.meta.get("val")))
    except Exception:  # a formula that does not accept these shapes: count no FLOPs
        return 0.0


# What an operator's shapes say beyond its FLOPs and bytes (``node_geometry``). Bump
# GEOMETRY_VERSION whenever a field is added, removed or computed differently: files of
# geometry rows and models fitted on them carry it, and another version is refused.
GEOMETRY_VERSION = 2
GEOMETRY_FIELDS: tuple[str, ...] = (
    "spatial_rank",  # convolution/pooling: spatial dims of the input longer than 1
    "kernel",  # convolution/pooling: kernel elements (product of the kernel's sizes)
    "stride",  # convolution/pooling: product of the strides
    "groups",  # convolution: groups (depthwise: = input channels)
    "channels_in",  # convolution/pooling: input channels; matrix product: K
    "channels_out",  # convolution/pooling: output channels; matrix product: N
    "out_spatial",  # convolution/pooling: output positions per channel; matrix product: M
    "out_rank",  # dimensions of the (first) output tensor
    "out_inner",  # its innermost dimension (the vectorised loop's length)
    # version 2: what the eager step does around and inside the operator that its FLOPs
    # and bytes do not say (the per-operator CPU model's step law reads them)
    "random_elements",  # random numbers drawn (dropout's bernoulli_: ~6 ns each on a CPU)
    "view_ops",  # view operators (reshape, transpose, ...) first read by this operator
)
# Operators that draw random numbers, one per output element.
RANDOM_OPS = frozenset(
    {
        "bernoulli",
        "bernoulli_",
        "native_dropout",
        "rand",
        "rand_like",
        "randn",
        "randn_like",
        "normal",
        "normal_",
        "uniform",
        "uniform_",
        "exponential_",
        "geometric_",
        "cauchy_",
        "log_normal_",
        "randint",
        "randint_like",
        "randperm",
        "multinomial",
    }
)
# Alias operators that an eager step never dispatches as operators of their own (tuple
# indexing, the tracer's detaches and lifts): not counted in ``view_ops``.
_UNDISPATCHED = frozenset({"getitem", "detach", "lift_fresh", "lift_fresh_copy", "alias"})
_CONV_OPS = frozenset({"convolution", "convolution_backward"})
_MATMUL_OPS = frozenset({"mm", "addmm", "bmm", "baddbmm"})


def _shape(value: Any) -> tuple[int, ...]:
    first = next(iter(_tensors(value)), None)
    return tuple(int(d) for d in first.shape) if first is not None else ()


def _ints(value: Any, rank: int, default: int) -> list[int]:
    """A pooling/convolution size argument (an int or a list, possibly empty) per dim."""
    if isinstance(value, int):
        return [value] * rank
    if isinstance(value, list | tuple) and value:
        values = [int(v) for v in value]
        return values * rank if len(values) == 1 else values
    return [default] * rank


def node_geometry(node: Node) -> tuple[float, ...]:
    """``GEOMETRY_FIELDS`` of one traced operator, from its arguments' shapes.

    A 1-D convolution and a 2-D one of equal FLOPs and bytes differ here (spatial rank,
    kernel, output positions), and so do a depthwise and a dense one; a 1-D pooling
    (dispatched as a 2-D one over a height of 1) has spatial rank 1. Fields that do not
    apply to an operator are 0. ``view_ops`` needs the graph around the node: 0 here,
    ``_build`` counts it.
    """
    name = _op_name(node)
    out = _shape(node.meta.get("val"))
    rank, kernel, stride, groups, c_in, c_out, positions = (0.0,) * 7
    args = list(node.args)

    def arg(i: int) -> Any:
        value = args[i] if i < len(args) else None
        return value.meta.get("val") if isinstance(value, Node) else value

    if name in _CONV_OPS:
        forward = name == "convolution"
        x, w = (arg(0), arg(1)) if forward else (arg(1), arg(2))
        y = node.meta.get("val") if forward else arg(0)
        xs, ws, ys = _shape(x), _shape(w), _shape(y)
        if len(xs) >= 3 and len(ws) >= 3 and len(ys) >= 3:
            spatial = len(xs) - 2
            rank = float(sum(d > 1 for d in xs[2:]))
            kernel = float(math.prod(ws[2:]))
            stride = float(math.prod(_ints(arg(3 if forward else 4), spatial, 1)))
            groups = float(arg(8 if forward else 9) or 1)
            c_in, c_out = float(xs[1]), float(ws[0])
            positions = float(math.prod(ys[2:]))
    elif category_of(name) == "pool":
        x = arg(0) if "backward" not in name else arg(1)
        y = node.meta.get("val") if "backward" not in name else arg(0)
        xs, ys = _shape(x), _shape(y)
        if len(xs) >= 3 and len(ys) >= 3:
            spatial = len(xs) - 2
            rank = float(sum(d > 1 for d in xs[2:]))
            if "adaptive" in name:
                kernel = float(math.prod(xs[2:]) / max(1, math.prod(ys[2:])))
                stride = kernel
            else:
                k_at = 1 if "backward" not in name else 2
                sizes = _ints(arg(k_at), spatial, 1)
                kernel = float(math.prod(sizes))
                stride = float(math.prod(_ints(arg(k_at + 1), spatial, 0)))
                if stride == 0.0:  # an empty stride means the kernel's
                    stride = kernel
            groups = 1.0
            c_in = c_out = float(xs[1])
            positions = float(math.prod(ys[2:]))
    elif name in _MATMUL_OPS:
        a, b = (arg(0), arg(1)) if name in {"mm", "bmm"} else (arg(1), arg(2))
        sa, sb = _shape(a), _shape(b)
        if len(sa) >= 2 and len(sb) >= 2:
            c_in, c_out = float(sa[-1]), float(sb[-1])
            positions = float(math.prod(sa[:-1]))
    drawn = float(math.prod(out)) if name in RANDOM_OPS and out else 0.0
    return (
        rank,
        kernel,
        stride,
        groups,
        c_in,
        c_out,
        positions,
        float(len(out)),
        float(out[-1]) if out else 0.0,
        drawn,
        0.0,
    )


def op_graph(task: TrainingTask, loss: Callable[[Tensor, Tensor], Tensor] | None = None) -> OpGraph:
    """The ``OpGraph`` of one training step of ``task`` (traced with fake tensors)."""
    graph = trace_step(task, loss)
    params = [p for p in task.model.parameters() if p.requires_grad]
    n_params, n_buffers = len(params), len(list(task.model.buffers()))
    return _build(graph, n_params, n_buffers, sum(p.numel() for p in params))


def _build(graph: GraphModule, n_params: int, n_buffers: int, parameters: int) -> OpGraph:
    nodes = list(graph.graph.nodes)
    placeholders = [n for n in nodes if n.op == "placeholder"]
    kinds: dict[Node, str] = {}
    for index, node in enumerate(placeholders):
        kinds[node] = (
            "param" if index < n_params else "buffer" if index < n_params + n_buffers else "batch"
        )
    base: dict[Node, Node] = {}  # alias -> the node whose memory it shares

    def root(node: Node) -> Node:
        while node in base:
            node = base[node]
        return node

    compute: list[Node] = []
    for node in nodes:
        if node.op != "call_function":
            continue
        name = _op_name(node)
        first = next((a for a in node.args if isinstance(a, Node)), None)
        if name in ALIAS_OPS and first is not None:
            base[node] = first
        else:
            compute.append(node)
    index_of = {node: i for i, node in enumerate(compute)}

    def sources(node: Node) -> list[Node]:
        found: list[Node] = []
        for arg in node.all_input_nodes:
            origin = root(arg)
            if origin not in found:
                found.append(origin)
        return found

    output = next(n for n in nodes if n.op == "output")
    result = output.args[0]
    loss_node = root(result[0]) if isinstance(result, list | tuple) else None
    forward: set[Node] = set()
    stack = [loss_node] if loss_node is not None else []
    while stack:
        node = stack.pop()
        if node in forward:
            continue
        forward.add(node)
        stack.extend(sources(node))

    op_nodes: list[OpNode] = []
    edges: set[tuple[int, int]] = set()
    readers: dict[Node, list[int]] = {}
    counted: set[Node] = set()  # view operators already given to a reader
    for position, node in enumerate(compute):
        name = _op_name(node)
        ins = list(node.all_input_nodes)
        views = _first_views(ins, base, counted)
        input_bytes = sum(_nbytes(a.meta.get("val")) for a in ins)
        param_bytes = sum(_nbytes(a.meta.get("val")) for a in ins if kinds.get(root(a)) == "param")
        op_nodes.append(
            OpNode(
                op=name,
                category=category_of(name),
                backward=node not in forward,
                flops=_flops(node),
                input_bytes=input_bytes,
                output_bytes=_nbytes(node.meta.get("val")),
                param_bytes=param_bytes,
                rnn_call=int(node.meta.get(RNN_META, -1)),
                geometry=(*node_geometry(node)[:-1], float(views)),
            )
        )
        for origin in sources(node):
            readers.setdefault(origin, []).append(position)
            if origin in index_of:
                edges.add((index_of[origin], position))

    def placeholder_bytes(kind: str) -> float:
        return sum(_nbytes(n.meta.get("val")) for n in placeholders if kinds[n] == kind)

    def storage(node: Node) -> Node:
        # In-place operators (relu_, add_) write into their first argument's memory.
        while node.op == "call_function" and _op_name(node).endswith("_"):
            first = next((a for a in node.args if isinstance(a, Node)), None)
            if first is None:
                break
            node = root(first)
        return node

    # Saved for backward: forward outputs (and the batch) that a backward operator reads,
    # each storage once.
    saved_storage: set[Node] = set()
    for origin, positions in readers.items():
        is_forward_output = origin in forward and origin.op == "call_function"
        if (is_forward_output or kinds.get(origin) == "batch") and any(
            op_nodes[p].backward for p in positions
        ):
            saved_storage.add(storage(origin))
    saved = sum(_nbytes(n.meta.get("val")) for n in saved_storage)

    kept = {storage(root(n)) for n in output.all_input_nodes}
    # An in-place result keeps its storage alive as long as it is read.
    storage_readers: dict[Node, list[int]] = {}
    for origin, positions in readers.items():
        storage_readers.setdefault(storage(origin), []).extend(positions)
    peak = _peak_live(compute, storage_readers, kept)
    return OpGraph(
        nodes=op_nodes,
        edges=sorted(edges),
        parameter_bytes=placeholder_bytes("param"),
        buffer_bytes=placeholder_bytes("buffer"),
        batch_bytes=placeholder_bytes("batch"),
        saved_activation_bytes=saved,
        peak_live_bytes=peak,
        parameters=parameters,
        peak_activation_bytes=_peak_live(compute, storage_readers, set()),
    )


def _first_views(inputs: list[Node], base: dict[Node, Node], counted: set[Node]) -> int:
    """View operators on the alias chains of ``inputs`` that no earlier operator read
    (each eager view is dispatched once, before its first reader); marks them counted."""
    found = 0
    for node in inputs:
        while node in base:
            if node not in counted:
                counted.add(node)
                found += _op_name(node) not in _UNDISPATCHED
            node = base[node]
    return found


def _peak_live(compute: list[Node], readers: dict[Node, list[int]], kept: set[Node]) -> float:
    """Peak bytes of intermediate tensors alive when the step runs in graph order; those
    in ``kept`` (the step's outputs) stay alive to its end, the others are freed after
    their last reader (an unread one right after it is made)."""
    last_read = {node: max(positions) for node, positions in readers.items()}
    frees: dict[int, float] = {}
    live = peak = 0.0
    for position, node in enumerate(compute):
        # In-place operators (relu_, add_) write into a tensor that is already counted.
        size = 0.0 if _op_name(node).endswith("_") else _nbytes(node.meta.get("val"))
        live += size
        peak = max(peak, live)
        if node not in kept:
            end = last_read.get(node, position)
            frees[end] = frees.get(end, 0.0) + size
        live -= frees.pop(position, 0.0)
    return peak
