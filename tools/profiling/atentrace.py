"""The ATen graph of a function run on fake tensors, recorded by one dispatch mode.

``make_fx`` builds its graph with torch.fx's symbolic tracer, a proxy per tensor, a
torch-function metadata mode and dead-code elimination, and imports ``torch._inductor``
for its configuration; a training step on fake tensors needs none of it (no symbolic
shapes, no decomposition table, no pre-dispatch, no compiled regions). ``trace_aten``
records what ``make_fx``'s proxy mode records, as the same torch.fx graph, with 20-40%
less CPU time per trace (``op_graph`` of the example model files, 2-core host).
``FakeTensorMode`` itself still imports ``torch._dynamo`` (for its configuration), so the
first trace in a process pays that import either way. The graph:

- one ``placeholder`` per leaf of the (pytree-flattened) arguments, in order;
- one ``call_function`` node per ATen operator dispatched below autograd (forward, and
  backward where the function asks for gradients), with the operator's arguments (the
  nodes that produced its tensor arguments) and ``meta["val"]``, a fake snapshot of its
  output; ``lift_fresh`` recorded as ``lift_fresh_copy``, a CompositeImplicitAutograd
  operator as what it decomposes into; an operator that returns a tuple or list gets
  one ``getitem`` node per item;
- a tensor no operator produced and no argument holds (one built outside the trace) as
  a ``get_attr`` constant; an in-place operator's output as its own node (later readers
  read it, not the tensor before the write);
- the ``output`` node: the function's result (flattened where its arguments were
  containers, as ``make_fx`` does).

``tests/tools/profiling/test_atentrace.py`` checks it node for node against ``make_fx``
on zoo models and the example model files: the same operators, arguments, shapes and
strides in the same order.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn
from torch.fx import Graph, GraphModule, Node
from torch.fx.experimental.proxy_tensor import extract_val
from torch.fx.graph import _PyTreeCodeGen, _PyTreeInfo
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import (
    TorchDispatchMode,
    _get_current_dispatch_mode_stack,
    autograd_would_have_decomposed,
)
from torch.utils.weak import WeakTensorKeyDictionary

__all__ = ["AtenRecorder", "current_recorder", "trace_aten"]

_NO_DECOMPOSE = (
    torch.ops.aten.size.default,
    torch.ops.aten.stride.default,
    torch.ops.aten.storage_offset.default,
)


class AtenRecorder(TorchDispatchMode):  # type: ignore[no-untyped-call]
    """Records every ATen operator dispatched under it into ``graph`` (above fake mode)."""

    def __init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.graph = Graph()
        self.root = nn.Module()
        # Weak, as make_fx's proxy slots: a reference held here changes what autograd
        # dispatches (a gradient it may not reuse in place is detached first).
        self._nodes = WeakTensorKeyDictionary()
        self._constants = 0

    def placeholders(self, args: tuple[Any, ...]) -> None:
        """One placeholder per leaf of ``args`` (flattened)."""
        for index, value in enumerate(pytree.tree_leaves(args)):
            node = self.graph.placeholder(f"arg{index}_1")
            if isinstance(value, Tensor):
                node.meta["val"] = _snapshot(value)
                self._track(value, node)

    def output(self, args: tuple[Any, ...], result: Any) -> None:
        """The ``output`` node. Where the arguments are containers, ``result``'s leaves as
        a list and the graph module takes and returns the trees (as make_fx's does)."""
        if not any(isinstance(a, list | tuple | dict) for a in args):
            self.graph.output(pytree.tree_map(self._arg, result))
            return
        leaves, out_spec = pytree.tree_flatten(result)
        self.graph.output([self._arg(v) for v in leaves])
        names = [f"arg{i}" for i in range(len(args))]
        in_spec = pytree.tree_flatten(args)[1]
        self.graph._codegen = _PyTreeCodeGen(_PyTreeInfo(names, in_spec, out_spec))

    def module(self) -> GraphModule:
        return GraphModule(self.root, self.graph)

    def _track(self, tensor: Tensor, node: Node) -> None:
        self._nodes[tensor] = node

    def _arg(self, value: Any) -> Any:
        if not isinstance(value, Tensor):
            return value
        found = self._nodes.get(value)  # type: ignore[no-untyped-call]
        if found is not None:
            return found
        name = f"_tensor_constant{self._constants}"
        self._constants += 1
        setattr(self.root, name, value)
        node = self.graph.get_attr(name)
        node.meta["val"] = _snapshot(value)
        self._track(value, node)
        return node

    def __torch_dispatch__(
        self,
        func: Any,
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        kwargs = kwargs or {}
        if func is torch.ops.prim.device.default:  # a query, not an operator
            return func(*args, **kwargs)
        if func not in _NO_DECOMPOSE and _decomposes(func, args, kwargs):
            with self:
                decomposed = func.decompose(*args, **kwargs)
            if decomposed is not NotImplemented:
                return decomposed
        if func is torch.ops.aten.lift_fresh.default:
            func = torch.ops.aten.lift_fresh_copy.default
        node_args, node_kwargs = pytree.tree_map(self._arg, (args, kwargs))
        node = self.graph.create_node(
            "call_function",
            func,
            tuple(node_args),
            dict(node_kwargs),
            name=func.overloadpacket.__name__,
        )
        out = func(*args, **kwargs)
        node.meta["val"] = _snapshot(out)
        if isinstance(out, Tensor):
            self._track(out, node)
        elif isinstance(out, tuple | list):
            for index, item in enumerate(out):  # every item, as make_fx (None too)
                part = self.graph.call_function(operator.getitem, (node, index))
                if isinstance(item, Tensor):
                    part.meta["val"] = _snapshot(item)
                    self._track(item, part)
        return out


def current_recorder() -> AtenRecorder | None:
    """The recorder on the dispatch-mode stack, if one is recording."""
    for mode in reversed(_get_current_dispatch_mode_stack()):
        if isinstance(mode, AtenRecorder):
            return mode
    return None


def trace_aten(
    fn: Callable[..., Any], args: tuple[Any, ...], *, fake: Any | None = None
) -> GraphModule:
    """The ATen graph of ``fn(*args)``; tensors of ``args`` become fake tensors of a new
    ``FakeTensorMode`` (or of ``fake``, a mode the caller owns and has entered)."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    mode = fake
    if mode is None:
        mode = FakeTensorMode(allow_fallback_kernels=True, shape_env=ShapeEnv(), static_shapes=True)
    fake_args = pytree.tree_map_only(Tensor, mode.from_tensor, args) if fake is None else args
    recorder = AtenRecorder()
    recorder.placeholders(fake_args)
    with mode if fake is None else _Nothing(), recorder:
        result = fn(*fake_args)
    recorder.output(fake_args, result)
    return recorder.module()


class _Nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *_: object) -> None:
        return None


def _snapshot(value: Any) -> Any:
    return extract_val(value)


def _decomposes(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """Whether autograd would have run ``func``'s CompositeImplicitAutograd decomposition
    (as make_fx's proxy mode asks)."""
    flat = pytree.tree_leaves((args, kwargs))
    return bool(autograd_would_have_decomposed(func, flat))
