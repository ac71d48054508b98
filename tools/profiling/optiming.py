"""Per-operator CPU timings of a training step, measured one operator at a time.

``time_step_ops`` traces one training step (``opgraph.trace_step``: forward, loss,
every gradient) and runs that ATen graph on real tensors, operator by operator in graph
order, timing each operator that does work (the nodes of ``opgraph.op_graph``, in the
same order, so each timing sits beside the ``OpNode`` an estimate sees) in isolation:
its inputs are the real values the graph produced before it; it is called ``k`` times in
a row (``k`` so that one batch lasts about ``batch_s``), five batches, the least.

Why CPU time and not the wall clock: this machine is shared (load 5-15 on 2 cores while
other work runs), and a wall clock counts the time the process waited for a core. What
an operator costs on a machine with nothing else running is:

- 1 thread: the calling thread's CPU time (``time.thread_time_ns``), the intra-op work
  runs there;
- 2 threads: the critical path of the two threads, ``max(main, process - main)`` where
  ``main`` is the calling thread's CPU time and ``process`` the process's
  (``time.process_time_ns``, both intra-op threads; ``OMP_WAIT_POLICY=PASSIVE`` so a
  waiting thread does not spin and count): an operator split evenly gives half its CPU
  time, one that runs on one thread its whole. It misses the fork/join wake-up latency,
  which the whole-step calibration carries (a cost per operator).

The wall time of each batch is kept beside them, to check the CPU-time figures against
the wall clock of runs made while the machine was quiet (``loadavg_1m`` is recorded).

``time_training_step`` times whole eager training steps (zero_grad, forward, loss,
backward, update) the same way, so that a step and its operators are measured under
the same conditions. ``time_optimizer_update`` times ``optimizer.step()`` (SGD with
momentum or Adam, the profiler's settings) over a given set of parameter shapes.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import torch
from torch.fx import Interpreter, Node

from tools.profiling.opgraph import ALIAS_OPS, OpNode, _build, _op_name, trace_step
from tools.profiling.zoo.registry import TrainingTask

__all__ = [
    "OpTiming",
    "StepOpTimings",
    "UpdateTiming",
    "compute_nodes",
    "load_1m",
    "time_call",
    "time_optimizer_update",
    "time_step_ops",
    "time_training_step",
    "training_step_samples",
]

BATCH_S = 2e-4  # one timed batch of calls lasts about this long (thread CPU time)
MAX_CALLS = 64


@dataclass(frozen=True, slots=True)
class CallTiming:
    """Seconds per call: calling thread's CPU, process CPU, wall; and the critical path."""

    thread_s: float
    process_s: float
    wall_s: float
    calls: int

    def critical_s(self, threads: int) -> float:
        if threads <= 1:
            return self.thread_s
        return max(self.thread_s, self.process_s - self.thread_s)


@dataclass(frozen=True, slots=True)
class OpTiming:
    """One operator of a traced step: what the estimators see of it, and its cost here."""

    node: OpNode
    thread_s: float
    process_s: float
    wall_s: float
    critical_s: float


@dataclass(frozen=True, slots=True)
class StepOpTimings:
    """Every working operator of one training step, timed on ``threads`` threads."""

    ops: list[OpTiming]
    threads: int
    loadavg_1m: float
    parameters: int

    @property
    def total_s(self) -> float:
        return sum(op.critical_s for op in self.ops)


@dataclass(frozen=True, slots=True)
class UpdateTiming:
    optimizer: str
    tensors: int
    parameters: int
    threads: int
    thread_s: float
    process_s: float
    wall_s: float
    critical_s: float

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def load_1m() -> float:
    return os.getloadavg()[0]


def time_call(fn: Callable[[], Any], *, batch_s: float = BATCH_S, repeats: int = 5) -> CallTiming:
    """Per-call cost of ``fn`` (already warmed by the caller): the least of ``repeats`` batches.

    The least, not the median: on this shared VM even a thread's CPU time of a fixed
    kernel varies up to 2x between seconds (caches and the core's sibling shared with
    other processes); the quickest batch is the one least disturbed.
    """
    t0 = time.thread_time_ns()
    fn()
    first = max(time.thread_time_ns() - t0, 1)
    calls = max(1, min(MAX_CALLS, math.ceil(batch_s * 1e9 / first)))
    thread: list[float] = []
    others: list[float] = []
    wall: list[float] = []
    for _ in range(repeats):
        w0, p0, t0 = time.perf_counter_ns(), time.process_time_ns(), time.thread_time_ns()
        for _ in range(calls):
            fn()
        t1, p1, w1 = time.thread_time_ns(), time.process_time_ns(), time.perf_counter_ns()
        thread.append((t1 - t0) / calls / 1e9)
        others.append(max(0.0, (p1 - p0) - (t1 - t0)) / calls / 1e9)
        wall.append((w1 - w0) / calls / 1e9)
    return CallTiming(min(thread), min(thread) + min(others), min(wall), calls)


def compute_nodes(graph: torch.fx.GraphModule) -> list[Node]:
    """The graph's working operators in the order ``opgraph.op_graph`` lists them."""
    found: list[Node] = []
    for node in graph.graph.nodes:
        if node.op != "call_function":
            continue
        first = next((a for a in node.args if isinstance(a, Node)), None)
        if _op_name(node) in ALIAS_OPS and first is not None:
            continue
        found.append(node)
    return found


class _OpTimer(Interpreter):
    """Runs the graph on real tensors and times each working operator as it comes."""

    def __init__(self, graph: torch.fx.GraphModule, timed: set[Node], threads: int) -> None:
        super().__init__(graph)
        self.timed = timed
        self.threads = threads
        self.timings: dict[Node, CallTiming] = {}

    def run_node(self, n: Node) -> Any:
        if n not in self.timed:
            return super().run_node(n)
        with self._set_current_node(n):
            args, kwargs = self.fetch_args_kwargs_from_env(n)
            target: Callable[..., Any] = n.target  # type: ignore[assignment]
            result = target(*args, **kwargs)  # the value the graph goes on with
            self.timings[n] = time_call(lambda: target(*args, **kwargs))
            return result


def time_step_ops(task: TrainingTask, threads: int) -> StepOpTimings:
    """Trace one training step of ``task`` and time each working operator on ``threads``.

    The task must hold real tensors (not meta); the caller sets nothing: the thread count
    is set here and left so.
    """
    torch.set_num_threads(threads)
    graph = trace_step(task)
    params = {n: p for n, p in task.model.named_parameters() if p.requires_grad}
    buffers = dict(task.model.named_buffers())
    n_params, n_buffers = len(params), len(buffers)
    parameters = sum(p.numel() for p in params.values())
    nodes = _build(graph, n_params, n_buffers, parameters).nodes
    order = compute_nodes(graph)
    if len(order) != len(nodes):  # the two walks must agree, or timings sit on wrong nodes
        raise RuntimeError(f"{len(order)} timed operators against {len(nodes)} graph nodes")
    timer = _OpTimer(graph, set(order), threads)
    load = load_1m()
    # Detached copies: nothing requires grad, so no autograd graph is recorded, while
    # grad mode stays on (oneDNN's LSTM keeps the workspace its backward reads only then).
    weights = {k: v.detach().clone() for k, v in params.items()}
    # Two passes: the first warms caches and the allocator, the second is kept.
    for _ in range(2):
        timer.timings.clear()
        timer.run(weights, {k: v.clone() for k, v in buffers.items()}, task.inputs, task.targets)
    ops = []
    for node, op in zip(order, nodes, strict=True):
        timing = timer.timings[node]
        ops.append(
            OpTiming(
                op, timing.thread_s, timing.process_s, timing.wall_s, timing.critical_s(threads)
            )
        )
    return StepOpTimings(ops, threads, load, parameters)


def time_optimizer_update(
    shapes: Sequence[tuple[int, ...]], optimizer: str, threads: int
) -> UpdateTiming:
    """Seconds of one ``optimizer.step()`` over parameters of ``shapes`` (gradients set)."""
    torch.set_num_threads(threads)
    params = [torch.nn.Parameter(torch.randn(*s)) for s in shapes]
    for p in params:
        p.grad = torch.randn_like(p)
    opt: torch.optim.Optimizer = (
        torch.optim.Adam(params, lr=1e-4)
        if optimizer in {"adam", "adamw"}
        else torch.optim.SGD(params, lr=1e-3, momentum=0.9)
    )
    opt.step()  # creates the state: the steady-state step is what a run repeats
    timing = time_call(opt.step, batch_s=2e-3)
    count = sum(math.prod(s) for s in shapes)
    return UpdateTiming(
        optimizer,
        len(shapes),
        count,
        threads,
        timing.thread_s,
        timing.process_s,
        timing.wall_s,
        timing.critical_s(threads),
    )


def training_step_samples(
    task: TrainingTask, optimizer: str, threads: int, *, warmup: int = 2, steps: int = 5
) -> list[float]:
    """Critical-path CPU seconds of each of ``steps`` eager training steps of ``task``
    (after ``warmup``), in the order they ran."""
    from tools.profiling import counting

    torch.set_num_threads(threads)
    model = task.model.train()
    opt: torch.optim.Optimizer = (
        torch.optim.Adam(model.parameters(), lr=1e-4)
        if optimizer in {"adam", "adamw"}
        else torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
    )
    for _ in range(warmup):
        counting.training_step(task, opt)
    samples = []
    for _ in range(steps):
        p0, t0 = time.process_time_ns(), time.thread_time_ns()
        counting.training_step(task, opt)
        t1, p1 = time.thread_time_ns(), time.process_time_ns()
        main = (t1 - t0) / 1e9
        samples.append(main if threads <= 1 else max(main, (p1 - p0) / 1e9 - main))
    return samples


def time_training_step(
    task: TrainingTask, optimizer: str, threads: int, *, warmup: int = 2, steps: int = 5
) -> float:
    """Median critical-path CPU seconds of ``steps`` eager training steps of ``task``."""
    samples = sorted(training_step_samples(task, optimizer, threads, warmup=warmup, steps=steps))
    return samples[len(samples) // 2]
