"""The per-operator CPU cost model: fit, leave-one-group-out validation, the service hook.

The timings here are synthetic with a known law (each operator's seconds a line in its
FLOPs and bytes, the step a known multiple of the sum plus a cost per operator and the
update), so what is checked is that the model recovers it and says where it answers.
"""

from __future__ import annotations

import math
import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tools.estimators.cpu.answer import HardwareOption, _opcost_answer, estimate
from tools.estimators.cpu.bundle import EstimatorBundle
from tools.estimators.cpu.dataset import GraphData
from tools.estimators.cpu.opcost import OpCostModel, fit_opcost, node_rows
from tools.profiling.analytic import cpu_spec

CATS = ("conv", "matmul", "elementwise", "norm")


def _op_seconds(category: str, flops: float, moved: float, threads: int) -> float:
    speed = {"conv": 2e10, "matmul": 3e10, "elementwise": 1e10, "norm": 5e9}[category]
    return (flops / speed + moved / 5e9) / (1.6 if threads == 2 else 1.0) + 3e-6


def _ops(rng: random.Random, n: int, threads: int) -> list[list[Any]]:
    rows = []
    for _ in range(n):
        cat = rng.choice(CATS)
        flops = 10 ** rng.uniform(4, 9) if cat in {"conv", "matmul"} else 0.0
        inp, out = 10 ** rng.uniform(3, 7), 10 ** rng.uniform(3, 7)
        count = rng.choice((1, 1, 2, 4))
        t = _op_seconds(cat, flops, inp + out, threads)
        rows.append([cat, cat, rng.random() < 0.5, flops, inp, out, 0.0, count, t, t, t, t])
    return rows


def _update(params: int, optimizer: str, threads: int) -> float:
    return 2e-5 + params * (3e-9 if optimizer == "adam" else 1.5e-9) / threads


def _items(seed: int = 0) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    items: list[dict[str, Any]] = []
    for fam in ("resnet", "vgg", "lstm", "mlp", "dlrm"):
        for k in range(8):
            threads = 1 + k % 2
            ops = _ops(rng, rng.randrange(10, 60), threads)
            params = rng.randrange(10_000, 2_000_000)
            opt = rng.choice(("sgd", "adam"))
            total = sum(o[7] * o[8] for o in ops)
            n = sum(o[7] for o in ops)
            step = 1.3 * total + 1e-5 * n + _update(params, opt, threads)
            items.append(
                {
                    "kind": "zoo",
                    "family": fam,
                    "threads": threads,
                    "optimizer": opt,
                    "parameters": params,
                    "measured_step_s": step * math.exp(rng.gauss(0, 0.03)),
                    "ops": ops,
                }
            )
    for k in range(30):
        threads = 1 + k % 2
        items.append({"kind": "probe", "threads": threads, "ops": _ops(rng, 40, threads)})
    for _ in range(8):
        params = rng.randrange(10_000, 5_000_000)
        for opt in ("sgd", "adam"):
            for threads in (1, 2):
                items.append(
                    {
                        "kind": "update",
                        "optimizer": opt,
                        "threads": threads,
                        "parameters": params,
                        "critical_s": _update(params, opt, threads),
                    }
                )
    return items


@pytest.fixture(scope="module")
def model() -> OpCostModel:
    return fit_opcost(_items(), provenance={"cpu_model": "AMD EPYC"}, rounds=80)


def test_a_known_cost_law_is_recovered_on_held_out_groups(model: OpCostModel) -> None:
    scores = model.meta["validation"]
    assert scores["all"]["rows"] == 40
    assert scores["all"]["mape"] < 0.12
    assert {"resnet+resnet_bottleneck", "vgg", "lstm", "mlp", "dlrm"} <= set(scores)
    assert model.log_q10 < 0 < model.log_q90


def test_a_new_step_is_predicted_within_its_interval(model: OpCostModel) -> None:
    rng = random.Random(42)
    ops = _ops(rng, 50, 1)
    truth = 1.3 * sum(o[7] * o[8] for o in ops) + 1e-5 * sum(o[7] for o in ops)
    truth += _update(500_000, "sgd", 1)
    x, counts = node_rows(ops)
    p10, p50, p90 = model.predict_s(x, counts, threads=1, optimizer="sgd", parameters=500_000)
    assert p10 < p50 < p90
    assert abs(p50 - truth) / truth < 0.2


def test_threads_outside_the_model_are_refused(model: OpCostModel) -> None:
    x, counts = node_rows(_ops(random.Random(1), 5, 1))
    with pytest.raises(ValueError, match="threads=4"):
        model.predict_s(x, counts, threads=4, optimizer="sgd", parameters=1)


def test_saved_and_loaded_the_model_predicts_the_same(model: OpCostModel, tmp_path: Path) -> None:
    model.save(tmp_path)
    again = OpCostModel.load(tmp_path)
    assert again.estimator_id.startswith("cpu-opcost-") and again.estimator_id == model.estimator_id
    x, counts = node_rows(_ops(random.Random(2), 30, 2))
    a = model.predict_s(x, counts, threads=2, optimizer="adam", parameters=1000)
    b = again.predict_s(x, counts, threads=2, optimizer="adam", parameters=1000)
    assert a == pytest.approx(b, rel=1e-5)


def _graph(seed: int = 3) -> GraphData:
    x, counts = node_rows(_ops(random.Random(seed), 30, 1))
    x = np.repeat(x, counts.astype(int), axis=0)
    return GraphData(
        x=x.astype(np.float32),
        edge_index=np.zeros((2, 0), dtype=np.int64),
        summary={"parameters": 100_000.0},
    )


def _local(cpu_model: str = "AMD EPYC", threads: int = 1) -> HardwareOption:
    return HardwareOption(
        name="local", spec=cpu_spec(cpu_model, threads), cpu_model=cpu_model, local=True
    )


def _with_heldout(model: OpCostModel, better: bool) -> OpCostModel:
    heldout = {"better_than_bundle": better, "opcost": {"mape": 0.11, "coverage_p10_p90": 0.8}}
    return OpCostModel(
        model.booster,
        model.step,
        model.updates,
        model.log_q10,
        model.log_q90,
        {**model.meta, "heldout": heldout},
    )


def test_the_per_operator_model_answers_only_where_it_was_better_held_out(
    model: OpCostModel,
) -> None:
    better, worse = _with_heldout(model, True), _with_heldout(model, False)
    answer = _opcost_answer(better, _local(), _graph(), "sgd")
    assert answer is not None
    quantiles, mape, note = answer
    assert quantiles.p10 < quantiles.p50 < quantiles.p90 and mape == 0.11
    assert "held-out model files: MAPE 11.0%" in note
    assert _opcost_answer(worse, _local(), _graph(), "sgd") is None
    assert _opcost_answer(better, _local("Intel Xeon"), _graph(), "sgd") is None
    assert _opcost_answer(better, _local(threads=4), _graph(), "sgd") is None
    assert _opcost_answer(None, _local(), _graph(), "sgd") is None


def test_estimate_takes_time_from_the_per_operator_model_and_memory_from_the_bundle(
    model: OpCostModel, tiny_bundle: EstimatorBundle
) -> None:
    cpu = next(iter(tiny_bundle.meta.domain.cpu_models)) if tiny_bundle.meta.domain else ""
    better = _with_heldout(model, True)
    better.meta["provenance"] = {"cpu_model": cpu}
    graphs = {8: _graph()}
    common: dict[str, Any] = {
        "epochs": 1,
        "samples": 80,
        "optimizer": "sgd",
        "options": [_local(cpu)],
        "bundle": tiny_bundle,
    }
    plain = estimate(graphs, **common)[0]
    ours = estimate(graphs, **common, opcost=better)[0]
    assert ours.estimator.startswith("cpu-opcost") and ours.validation_mape == 0.11
    assert ours.peak_memory_mb == plain.peak_memory_mb
    assert ours.iteration_time_s != plain.iteration_time_s
    assert not plain.estimator.startswith("cpu-opcost")


def test_a_fixed_cost_per_step_is_recovered_with_the_step_constant() -> None:
    items = _items(seed=5)
    for item in items:
        if item["kind"] == "zoo":
            item["measured_step_s"] += 0.05  # about 40% of the median step
    fitted = fit_opcost(items, rounds=40, step_constant=True)
    assert fitted.meta["step_constant"] is True
    for coef in fitted.step.values():
        # [a, o, b, c, r, fixed, v]
        assert len(coef) == 7 and coef[5] == pytest.approx(0.05, rel=0.3)
    plain = fit_opcost(items, rounds=40)
    assert all(len(coef) == 7 and coef[5] == 0.0 for coef in plain.step.values())
    assert fitted.meta["validation"]["all"]["mape"] < plain.meta["validation"]["all"]["mape"]
