"""What an eager step does that its operators' FLOPs and bytes do not say: the view
operators it dispatches (folded out of the traced graph) and the random numbers dropout
draws. The trace counts both per operator (geometry version 2: ``view_ops``,
``random_elements``); the step law prices views with a fitted seconds-per-view and
random numbers analytically (``RANDOM_S_PER_ELEMENT``).
"""

from __future__ import annotations

import math
import random
from collections import Counter
from typing import Any

import numpy as np
import pytest
import torch
from torch import Tensor, nn
from torch.utils._python_dispatch import TorchDispatchMode

from knowledge_base.errors import InvalidInputError
from tools.estimators.cpu.eager import RANDOM_S_PER_ELEMENT, eager_extras, raw_geometry
from tools.estimators.cpu.opcost import fit_opcost, node_rows
from tools.profiling.opgraph import ALIAS_OPS, GEOMETRY_FIELDS, GEOMETRY_VERSION, op_graph
from tools.profiling.opsweep import geometry_rows
from tools.profiling.zoo.registry import TrainingTask

VIEWS = GEOMETRY_FIELDS.index("view_ops")
DRAWN = GEOMETRY_FIELDS.index("random_elements")


class _Head(nn.Module):
    def __init__(self, reshapes: int, dropout: float) -> None:
        super().__init__()
        self.reshapes, self.drop, self.fc = reshapes, nn.Dropout(dropout), nn.Linear(32, 4)

    def forward(self, x: Tensor) -> Tensor:
        for _ in range(self.reshapes):
            x = x.view(x.shape[0], 8, 4).view(x.shape[0], 32)
        out: Tensor = self.fc(self.drop(x))
        return out


def _graph(reshapes: int, dropout: float) -> Any:
    task = TrainingTask(_Head(reshapes, dropout), (torch.randn(6, 32),), torch.randint(0, 4, (6,)))
    return op_graph(task)


def test_the_trace_counts_the_views_an_eager_step_dispatches() -> None:
    plain, reshaped = _graph(0, 0.0), _graph(3, 0.0)
    views = [sum(n.geometry[VIEWS] for n in g.nodes) for g in (plain, reshaped)]
    # three pairs of views forward; their gradients' views backward
    assert views[1] >= views[0] + 6
    # the working operators are the same: only views were added
    assert sorted(n.op for n in plain.nodes) == sorted(n.op for n in reshaped.nodes)
    assert all(n.geometry[DRAWN] == 0 for g in (plain, reshaped) for n in g.nodes)


def test_dropout_draws_one_random_number_per_element() -> None:
    graph = _graph(0, 0.3)
    drawn = sum(n.geometry[DRAWN] for n in graph.nodes)
    assert drawn == 6 * 32
    assert len(GEOMETRY_FIELDS) == 11 and GEOMETRY_VERSION == 2


def test_aggregated_rows_carry_the_mean_views_of_their_operators() -> None:
    graph = _graph(2, 0.0)
    nodes = [n for n in graph.nodes if n.op == "mm"]
    key = nodes[0]
    twins = [n for n in nodes if (n.flops, n.input_bytes) == (key.flops, key.input_bytes)]
    ops = [[key.op, key.category, key.backward, key.flops, key.input_bytes, key.output_bytes,
            key.param_bytes, len(twins), 0, 0, 0, 0]]  # fmt: skip
    rows, unmatched, _ = geometry_rows(ops, graph.nodes)
    assert unmatched == 0
    total = sum(n.geometry[VIEWS] for n in twins)
    assert rows[0][VIEWS] * len(twins) == pytest.approx(total)


def _geometry(views: float, drawn: float = 0.0) -> list[float]:
    row = [0.0] * len(GEOMETRY_FIELDS)
    row[VIEWS], row[DRAWN] = views, drawn
    return row


def _items(per_view_s: float) -> tuple[list[dict[str, Any]], dict[str, dict[str, Any]]]:
    """Steps whose time is their operators' plus ``per_view_s`` per view operator."""
    rng = random.Random(3)
    items: list[dict[str, Any]] = []
    lines: dict[str, dict[str, Any]] = {}
    for fam in ("resnet", "vgg", "lstm", "mlp", "dlrm", "transformer"):
        for k in range(8):
            ops: list[list[Any]] = []
            geometry: list[list[float]] = []
            for _ in range(rng.randrange(10, 40)):
                flops, moved = 10 ** rng.uniform(6, 8), 10 ** rng.uniform(4, 6)
                t = flops / 2e10 + moved / 5e9 + 3e-6
                ops.append(["mm", "matmul", False, flops, moved, moved, 0.0, 1, t, t, t, t])
                geometry.append(_geometry(rng.choice((0.0, 1.0, 4.0, 12.0))))
            views = sum(g[VIEWS] for g in geometry)
            step = sum(o[8] for o in ops) + 1e-5 * len(ops) + per_view_s * views
            item_id = f"zoo-{fam}-{k}"
            items.append(
                {
                    "id": item_id,
                    "kind": "zoo",
                    "family": fam,
                    "threads": 1,
                    "optimizer": "sgd",
                    "parameters": 1000,
                    "measured_step_s": step * math.exp(rng.gauss(0, 0.01)),
                    "ops": ops,
                }
            )
            lines[item_id] = {"geometry_version": GEOMETRY_VERSION, "geometry": geometry}
    return items, lines


def test_the_step_law_fits_seconds_per_view_and_adds_random_numbers_analytically() -> None:
    items, lines = _items(per_view_s=2e-4)
    model = fit_opcost(items, rounds=40, geometry=lines)
    assert model.step["t1"][6] == pytest.approx(2e-4, rel=0.3)
    ops = [["mm", "matmul", False, 1e7, 1e5, 1e5, 0.0, 1, 0, 0, 0, 0]] * 4
    x, counts = node_rows(ops)
    kw: dict[str, Any] = {"threads": 1, "optimizer": "sgd", "parameters": 1000}
    none = model.predict_s(x, counts, **kw, geometry=np.array([_geometry(0.0)] * 4))[1]
    viewed = model.predict_s(x, counts, **kw, geometry=np.array([_geometry(5.0)] * 4))[1]
    drawn = model.predict_s(x, counts, **kw, geometry=np.array([_geometry(0.0, 1e6)] * 4))[1]
    assert viewed - none == pytest.approx(20 * model.step["t1"][6])
    assert drawn - none == pytest.approx(4e6 * RANDOM_S_PER_ELEMENT)


def test_rows_of_an_older_geometry_count_no_views_and_are_not_read_as_this_versions() -> None:
    assert eager_extras([[0.0] * 9] * 3) == (0.0, 0.0)
    with pytest.raises(InvalidInputError, match="trace the step again") as caught:
        raw_geometry([[1.0] * 9] * 11)  # 99 values: 9 rows of 11 if reshaped blindly
    assert caught.value.field == "geometry"
    assert eager_extras(None) == (0.0, 0.0)
    assert eager_extras([_geometry(2.0, 10.0)] * 3, np.array([1.0, 2.0, 3.0])) == (12.0, 60.0)


class _Counting(TorchDispatchMode):  # type: ignore[no-untyped-call]
    """Counts every ATen operator an eager step dispatches."""

    def __init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.seen: Counter[str] = Counter()

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        self.seen[func._overloadpacket.__name__] += 1
        return func(*args, **(kwargs or {}))


def test_the_trace_holds_every_working_operator_an_eager_transformer_step_dispatches() -> None:
    """The profiler's many ``copy_``/``fill_``/``add_`` of an encoder step are calls nested
    in traced operators (or the optimizer's): forward and backward dispatch exactly the
    traced working operators."""
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(32, nhead=4, dim_feedforward=64, batch_first=True)
    model = nn.Sequential(nn.TransformerEncoder(layer, 2, enable_nested_tensor=False))
    model.append(nn.Flatten()).append(nn.Linear(32 * 6, 3))
    task = TrainingTask(model, (torch.randn(4, 6, 32),), torch.randint(0, 3, (4,)))
    traced = Counter(n.op for n in op_graph(task).nodes)
    model.train()
    with _Counting() as counting:
        task.loss_value(model(*task.inputs)).backward()  # type: ignore[no-untyped-call]
    eager = Counter({k: v for k, v in counting.seen.items() if k not in ALIAS_OPS})
    assert eager == traced
    assert traced["bernoulli_"] > 0  # dropout, drawn in the step
