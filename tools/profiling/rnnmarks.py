"""Which traced operators a recurrent layer's C++ loop dispatches.

On CPU, ``nn.GRU`` and ``nn.RNN`` (and ``nn.LSTM`` where oneDNN does not take it) run
as one C++ call that loops over time steps and dispatches each cell's matrix products
and element-wise operators itself; backward, autograd's engine runs those operators'
gradients. A trace sees every one of them (1,499 of the 1,517 working operators of a
bidirectional GRU tagger over 24 tokens), but none goes through Python modules or
splits across threads, so a per-operator cost of the eager step (Python, fork/join)
must not be charged to them. ``RnnMarker`` tags them while ``trace_aten`` (or
``make_fx``) traces:

- forward: the operators dispatched between a recurrent module's forward pre-hook and
  its forward hook;
- backward: the operators dispatched while autograd's engine runs a node created by
  such a forward (its sequence number lies in the range the hooks recorded).

Each tagged graph node gets ``node.meta[RNN_META]`` = the index of the layer call
(0, 1, ... in forward order; its backward nodes carry the same index).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import nn
from torch.fx import Graph
from torch.fx.experimental.proxy_tensor import get_proxy_mode
from torch.utils._python_dispatch import TorchDispatchMode

from tools.profiling.atentrace import current_recorder

__all__ = ["RNN_META", "RnnMarker", "has_recurrent", "mark_recurrent"]

RNN_META = "rightsize_rnn_call"


def has_recurrent(model: nn.Module) -> bool:
    return any(isinstance(m, nn.RNNBase) for m in model.modules())


class RnnMarker(TorchDispatchMode):  # type: ignore[no-untyped-call]
    """Tags the graph nodes a recurrent layer's loop dispatches (use inside a trace)."""

    def __init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.calls: list[tuple[int, int]] = []  # autograd sequence numbers [lo, hi) per call
        self._open: list[int] = []  # sequence number at each open call's start

    def enter(self) -> None:
        self._open.append(torch._C._autograd._get_sequence_nr())

    def leave(self) -> None:
        start = self._open.pop()
        self.calls.append((start, torch._C._autograd._get_sequence_nr()))

    def _call(self) -> int | None:
        if self._open:  # forward, inside a recurrent module (the outermost one counts)
            return len(self.calls) + len(self._open) - 1
        node = torch._C._current_autograd_node()
        if node is None:
            return None
        number = node._sequence_nr()
        for index, (lo, hi) in enumerate(self.calls):
            if lo <= number < hi:
                return index
        return None

    def __torch_dispatch__(
        self,
        func: Any,
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        graph = _recording_graph()
        if graph is None:
            return func(*args, **(kwargs or {}))
        last = next(iter(reversed(graph.nodes)), None)
        out = func(*args, **(kwargs or {}))
        call = self._call()
        if call is not None:
            node = last.next if last is not None else next(iter(graph.nodes), None)
            while node is not None and node.op != "root":
                node.meta[RNN_META] = call
                node = node.next
        return out


def _recording_graph() -> Graph | None:
    """The graph being recorded: ``trace_aten``'s, or ``make_fx``'s (the tests' reference)."""
    recorder = current_recorder()
    if recorder is not None:
        return recorder.graph
    proxy = get_proxy_mode()
    return None if proxy is None else proxy.tracer.graph


@contextmanager
def mark_recurrent(model: nn.Module) -> Iterator[RnnMarker | None]:
    """Hooks on ``model``'s recurrent modules and the marker (None without any)."""
    if not has_recurrent(model):
        yield None
        return
    marker = RnnMarker()
    handles = []
    for module in model.modules():
        if isinstance(module, nn.RNNBase):
            handles.append(module.register_forward_pre_hook(lambda _m, _a: marker.enter()))
            handles.append(module.register_forward_hook(lambda _m, _a, _o: marker.leave()))
    try:
        yield marker
    finally:
        for handle in handles:
            handle.remove()
