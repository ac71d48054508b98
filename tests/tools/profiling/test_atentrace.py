"""``trace_aten`` records the graph ``make_fx`` records: node for node, on the zoo and on
the example model files (``examples/models``: unseen and held-out families too), for the
CPU op graph and the GPU trace alike."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import Tensor
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx import GraphModule, Node
from torch.fx.experimental.proxy_tensor import make_fx

import tools.estimators.gpu.trace as gpu_trace
import tools.profiling.opgraph as opgraph
from tools.estimators.model_file import load_user_model
from tools.profiling.atentrace import trace_aten
from tools.profiling.rnnmarks import RNN_META
from tools.profiling.zoo import family
from tools.profiling.zoo.registry import TrainingTask

REPO = Path(__file__).resolve().parents[3]
MODEL_FILES = [
    REPO / "examples/models/small_cnn.py",
    *sorted((REPO / "examples/models/unseen").glob("*.py")),
    *sorted((REPO / "examples/models/heldout").glob("*.py")),
]
ZOO = ["resnet", "mobilenet_v2", "vit", "transformer", "lstm", "mlp", "dlrm"]


def _make_fx_fake(fn: Callable[..., Any], args: tuple[Any, ...]) -> GraphModule:
    return make_fx(fn, tracing_mode="fake")(*args)


def _make_fx_real(fn: Callable[..., Any], args: tuple[Any, ...], fake: Any = None) -> GraphModule:
    return make_fx(fn, tracing_mode="real")(*args)


def _signature(graph: GraphModule) -> list[tuple[Any, ...]]:
    """How the module is called (its argument and result trees), then every node: kind,
    operator, arguments (as node positions), output shapes and strides, and the
    recurrent-layer tag."""
    nodes = list(graph.graph.nodes)
    position = {node: i for i, node in enumerate(nodes)}

    def arg(value: Any) -> Any:
        if isinstance(value, Node):
            return ("node", position[value])
        if isinstance(value, list | tuple):
            return tuple(arg(v) for v in value)
        if isinstance(value, dict):
            return tuple((k, arg(v)) for k, v in value.items())
        return repr(value)

    def val(value: Any) -> Any:
        if isinstance(value, Tensor):
            return (tuple(value.shape), value.stride(), value.dtype, value.device.type)
        if isinstance(value, list | tuple):
            return tuple(val(v) for v in value)
        return repr(value)

    info = getattr(graph.graph._codegen, "pytree_info", None)
    calling = None if info is None else (str(info.in_spec), str(info.out_spec))
    return [("called with", calling)] + [
        (
            node.op,
            node.op if node.op in ("placeholder", "get_attr") else str(node.target),
            arg(node.args),
            arg(node.kwargs),
            val(node.meta.get("val")),
            node.meta.get(RNN_META),
        )
        for node in nodes
    ]


def _cpu_graphs(task: TrainingTask, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, Any]:
    # The fake-tensor dispatch cache is global: a hit returns fresh tensors where a
    # first dispatch returned one tensor twice (autograd then hands out one gradient).
    FakeTensorMode.cache.clear()
    with monkeypatch.context() as patch:
        patch.setattr(opgraph, "trace_aten", _make_fx_fake)
        reference = opgraph.trace_step(task)
    FakeTensorMode.cache.clear()
    return reference, opgraph.trace_step(task)


def _zoo_task(name: str) -> TrainingTask:
    with torch.device("meta"):
        return family(name).task({}, 2)


def _builds_without_arguments(node: ast.ClassDef) -> bool:
    for item in node.body:
        if isinstance(item, ast.FunctionDef) and item.name == "__init__":
            spec = item.args
            return len(spec.defaults) >= len(spec.args) - 1 and None not in spec.kw_defaults
    return True


def _file_tasks() -> list[Any]:
    """Every ``nn.Module`` class of the model files that builds with no arguments (what
    ``--model-class`` can name; the others are their layers)."""
    found = []
    for path in MODEL_FILES:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in tree.body:
            if (
                isinstance(node, ast.ClassDef)
                and any(isinstance(b, ast.Attribute) and b.attr == "Module" for b in node.bases)
                and _builds_without_arguments(node)
            ):
                found.append(pytest.param(path, node.name, id=f"{path.name}:{node.name}"))
    return found


@pytest.mark.parametrize("name", ZOO)
def test_a_zoo_models_step_traces_to_make_fxs_graph(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    reference, graph = _cpu_graphs(_zoo_task(name), monkeypatch)
    assert _signature(graph) == _signature(reference)


@pytest.mark.parametrize(("path", "class_name"), _file_tasks())
def test_an_example_model_files_step_traces_to_make_fxs_graph(
    path: Path, class_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    task = load_user_model(path, class_name).task(2, meta=True)
    reference, graph = _cpu_graphs(task, monkeypatch)
    assert _signature(graph) == _signature(reference)


def test_the_op_graph_is_the_same_operators_flops_and_bytes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    task = load_user_model(REPO / "examples/models/unseen/lstm_lm.py", "LSTMWordLM").task(
        2, meta=True
    )
    FakeTensorMode.cache.clear()
    with monkeypatch.context() as patch:
        patch.setattr(opgraph, "trace_aten", _make_fx_fake)
        reference = opgraph.op_graph(task)
    FakeTensorMode.cache.clear()
    graph = opgraph.op_graph(task)
    assert graph.nodes == reference.nodes and graph.edges == reference.edges
    assert graph.summary() == reference.summary()
    assert any(node.rnn_call >= 0 for node in graph.nodes)  # the LSTM's loop is tagged


@pytest.mark.parametrize("name", ["transformer", "lstm"])
@pytest.mark.parametrize("backward", [True, False])
def test_the_gpu_trace_is_make_fxs_graph(
    name: str, backward: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    FakeTensorMode.cache.clear()
    with monkeypatch.context() as patch:
        patch.setattr(gpu_trace, "trace_aten", _make_fx_real)
        reference = gpu_trace.trace_training_step(_zoo_task(name), backward=backward)
    FakeTensorMode.cache.clear()
    graph = gpu_trace.trace_training_step(_zoo_task(name), backward=backward)
    assert _signature(graph) == _signature(reference)
    assert graph.meta["recurrent"] == reference.meta["recurrent"]


def test_tensors_made_outside_the_trace_or_by_torch_tensor_are_constants() -> None:
    table = torch.arange(6.0).reshape(2, 3)

    def step(x: Tensor) -> Tensor:
        return (x + table + torch.tensor(2.0)).sum()

    def traced(tracer: Callable[..., GraphModule]) -> GraphModule:
        mode = FakeTensorMode(allow_non_fake_inputs=True)
        x = mode.from_tensor(torch.ones(2, 3))
        with mode:
            return tracer(step, (x,), fake=mode)

    graph = traced(trace_aten)
    assert _signature(graph) == _signature(traced(_make_fx_real))
    assert [n.op for n in graph.graph.nodes].count("get_attr") == 2
    assert "aten.lift_fresh_copy.default" in {str(n.target) for n in graph.graph.nodes}


_READ_BACK = """
import sys
from pathlib import Path

from tools.estimators.cpu.dataset import graph_data
from tools.estimators.model_file import load_user_model
from tools.planning.trace_cache import TraceCache

cache = TraceCache(Path(sys.argv[1]))
key = cache.key("cpu-graph", "small_cnn", 8)
if sys.argv[2] == "trace":
    user = load_user_model(Path("examples/models/small_cnn.py"), "SmallCNN")
    cache.get_or_make(key, lambda: graph_data(user.graph(8)))
else:
    def trace_again():
        raise AssertionError("traced again")

    cache.get_or_make(key, trace_again)
heavy = ("torch._dynamo", "torch._inductor", "torch.fx.experimental.symbolic_shapes")
print(",".join(name for name in heavy if name in sys.modules))
"""


def test_a_kept_trace_is_read_back_without_the_tracers_imports(tmp_path: Path) -> None:
    """A second ``estimate`` of the same file (a fresh process) reads the graph and
    imports neither fake tensors' shape machinery nor dynamo (measured in a child: this
    process has imported them)."""

    def child(mode: str) -> str:
        done = subprocess.run(
            [sys.executable, "-c", _READ_BACK, str(tmp_path), mode],
            cwd=REPO,
            env={**os.environ, "PYTHONPATH": str(REPO)},
            capture_output=True,
            text=True,
            timeout=300,
            check=True,
        )
        return done.stdout.strip()

    assert "torch.fx.experimental.symbolic_shapes" in child("trace")  # the check can fail
    assert child("read") == ""
