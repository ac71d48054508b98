"""Pricing models nobody profiled: the booster's work target extrapolates with the work,
the pricing coverage says what was priced how, and a user file whose example_batch does
not fit its model is refused naming ``example_batch``.

Timings are synthetic with a known law (seconds linear in FLOPs and bytes), so what is
checked is the model's shape past its data, not a recorded figure.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from knowledge_base.errors import InvalidInputError
from tools.estimators.cpu.coverage import (
    Coverage,
    pricing_coverage,
    require_priced,
    timed_domain,
)
from tools.estimators.cpu.dataset import GraphData
from tools.estimators.cpu.opcost import _fit_ops, node_rows, op_seconds
from tools.estimators.model_file import load_user_model
from tools.profiling.opgraph import CATEGORIES

REPO = Path(__file__).resolve().parents[4]


def _seconds(flops: float, moved: float) -> float:
    return flops / 4e10 + moved / 8e9 + 3e-6


def _items(seed: int = 0) -> list[dict[str, Any]]:
    """Matrix products and additions up to 1e8 FLOPs / 1e7 bytes, timed by the law."""
    rng = random.Random(seed)
    items = []
    for k in range(20):
        ops = []
        for _ in range(30):
            mm = rng.random() < 0.5
            flops = 10 ** rng.uniform(4, 8) if mm else 0.0
            inp, out = 10 ** rng.uniform(3, 7), 10 ** rng.uniform(3, 7)
            t = _seconds(flops, inp + out)
            name, cat = ("mm", "matmul") if mm else ("add", "elementwise")
            ops.append([name, cat, False, flops, inp, out, 0.0, 1, t, t, t, t])
        items.append({"kind": "zoo", "family": "mlp", "threads": 1 + k % 2, "ops": ops})
    return items


def _row(name: str, cat: str, flops: float, inp: float, out: float) -> list[Any]:
    return [name, cat, False, flops, inp, out, 0.0, 1]


def test_work_target_grows_with_the_work_past_the_timings_and_seconds_does_not() -> None:
    items = _items()
    big = [_row("mm", "matmul", 1e10, 1e8, 1e8), _row("mm", "matmul", 1e11, 1e9, 1e9)]
    x, _ = node_rows(big)
    truth = np.array([_seconds(o[3], o[4] + o[5]) for o in big])
    work = op_seconds(_fit_ops(items, set(), 60, None, "work"), x, 1, "work")
    seconds = op_seconds(_fit_ops(items, set(), 60, None, "seconds"), x, 1, "seconds")
    # 100x and 1000x the largest timed product: the work target within a factor 2 of the
    # law and ten times as long for ten times the work; log seconds saturates
    assert np.all(np.abs(np.log(work / truth)) < np.log(2.0))
    assert work[1] / work[0] == pytest.approx(10.0, rel=0.2)
    assert seconds[1] / seconds[0] < 1.5
    assert np.all(seconds < truth / 10)


def _graph(ops: list[tuple[str, str, float, float]]) -> GraphData:
    x = np.zeros((len(ops), len(CATEGORIES) + 5), dtype=np.float32)
    for i, (_, cat, flops, moved) in enumerate(ops):
        x[i, CATEGORIES.index(cat)] = 1.0
        x[i, len(CATEGORIES) + 1] = np.log1p(flops) / 20.0
        x[i, len(CATEGORIES) + 2] = np.log1p(moved / 2) / 20.0
        x[i, len(CATEGORIES) + 3] = np.log1p(moved / 2) / 20.0
    return GraphData(x=x, edge_index=np.zeros((2, 0), dtype=np.int64), ops=tuple(o[0] for o in ops))


def test_coverage_classes_and_shares() -> None:
    domain = timed_domain(_items())
    assert "mm" in domain["ops"] and "matmul" in domain["categories"]
    data = _graph(
        [
            ("mm", "matmul", 1e7, 1e5),  # timed, within
            ("mm", "matmul", 3e9, 1e5),  # timed, 30x past the FLOPs timed
            ("bmm", "matmul", 1e7, 1e5),  # never timed, its category was
            ("my_op", "other", 0.0, 2e5),  # neither
        ]
    )
    cov = pricing_coverage(data, domain)
    assert cov is not None
    total = 1e7 + 3e9 + 1e7
    assert cov.flops["learned"] == pytest.approx(1e7 / total, rel=1e-3)
    assert cov.flops["analytic"] == pytest.approx((3e9 + 1e7) / total, rel=1e-3)
    assert cov.bytes["none"] == pytest.approx(0.4, rel=1e-3)
    assert cov.unpriced_ops == ("my_op",)
    assert cov.extrapolated_ops[0] == "mm"
    line = cov.line()
    assert "WARNING" in line and "mm" in line
    assert sum(cov.flops.values()) == pytest.approx(1.0)


def test_coverage_needs_a_domain_and_operator_names() -> None:
    data = _graph([("mm", "matmul", 1e7, 1e5)])
    assert pricing_coverage(data, None) is None
    unnamed = GraphData(x=data.x, edge_index=data.edge_index)
    assert pricing_coverage(unnamed, timed_domain(_items())) is None
    cov = pricing_coverage(data, timed_domain(_items()))
    assert cov is not None and "WARNING" not in cov.line()


def test_an_operator_nobody_can_price_is_refused_by_name() -> None:
    mostly = Coverage(
        flops={"learned": 0.0, "analytic": 0.0, "none": 0.0},
        bytes={"learned": 0.2, "analytic": 0.1, "none": 0.7},
        unpriced_ops=("my_op",),
        extrapolated_ops=(),
    )
    with pytest.raises(InvalidInputError) as caught:
        require_priced(mostly)
    assert caught.value.field == "operator" and "my_op" in str(caught.value)
    require_priced(None)
    require_priced(
        Coverage(
            flops=dict(mostly.flops),
            bytes={"learned": 0.9, "analytic": 0.0, "none": 0.1},
            unpriced_ops=("my_op",),
            extrapolated_ops=(),
        )
    )


BAD_TARGETS = """
import torch
from torch import nn
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 4)
    def forward(self, x):
        return self.lin(x)
def example_batch(b):
    return torch.randn(b, {features}), torch.randint(0, 4, {targets})
"""


@pytest.mark.parametrize(
    ("features", "targets", "says"),
    [(8, "(b, 3, 5)", "targets of shape (4, 3, 5)"), (7, "(b,)", "inputs of shape (4, 7)")],
)
def test_example_batch_that_does_not_fit_names_example_batch(
    tmp_path: Path, features: int, targets: str, says: str
) -> None:
    path = tmp_path / "bad.py"
    path.write_text(BAD_TARGETS.format(features=features, targets=targets))
    with pytest.raises(InvalidInputError) as caught:
        load_user_model(path, "M").graph(4)
    assert caught.value.field == "example_batch"
    assert says in str(caught.value)


@pytest.mark.parametrize(
    ("stem", "cls"),
    [
        ("lstm_lm", "LSTMWordLM"),
        ("unet", "UNet"),
        ("gru_seq2seq", "GRUSeq2Seq"),
        ("text_encoder", "TextEncoder"),
        ("vit_small", "SmallViT"),
    ],
)
def test_held_out_files_trace_and_are_named_by_no_training_code(stem: str, cls: str) -> None:
    graph = load_user_model(REPO / "examples" / "models" / "unseen" / f"{stem}.py", cls).graph(2)
    assert graph.flops > 0 and graph.nodes
    # held out: nothing that fits a model reads them
    for fitter in (
        "tools/estimators/cpu/opcost.py",
        "tools/estimators/cpu/host_calibration.py",
        "tools/profiling/opsweep.py",
        "tools/profiling/opprobes.py",
        "benchmarks/cpu_opcost.py",
    ):
        assert "unseen" not in (REPO / fitter).read_text()


def test_hybrid_prices_inside_the_timed_sizes_by_seconds_and_past_them_by_work(
    tmp_path: Path,
) -> None:
    from tools.estimators.cpu.opboost import HybridBooster, within_bounds
    from tools.estimators.cpu.opcost import OpCostModel

    items = _items()
    pair = _fit_ops(items, set(), 40, None, "hybrid")
    assert isinstance(pair, HybridBooster)
    x, _ = node_rows([_row("mm", "matmul", 1e6, 1e4, 1e4), _row("mm", "matmul", 1e11, 1e9, 1e9)])
    assert within_bounds(x, pair.bounds).tolist() == [True, False]
    got = op_seconds(pair, x, 1, "hybrid")
    assert got[0] == pytest.approx(op_seconds(pair.seconds, x[:1], 1, "seconds")[0])
    assert got[1] == pytest.approx(op_seconds(pair.work, x[1:], 1, "work")[0])
    model = OpCostModel(pair, {"t1": [1.0, 1.0, 0.0, 1.0]}, {}, -0.2, 0.2, {"op_target": "hybrid"})
    model.save(tmp_path)
    again = OpCostModel.load(tmp_path)
    assert isinstance(again.booster, HybridBooster)
    assert op_seconds(again.booster, x, 1, "hybrid") == pytest.approx(got, rel=1e-5)
