"""Recurrent layers' loops in the per-operator CPU model: their cells' operators are
dispatched from C++, so the eager step's per-operator cost (Python, fork/join) is paid
once per layer call, not per cell operator; their own cost is a coefficient fitted on
probe steps that have such loops.

Synthetic law: step = 1.3 x operators' sum + 2e-5 s per eager operator + 2e-6 s per
loop operator + the update. The formula before charged every loop operator the eager cost.
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pytest

from tools.estimators.cpu.answer import _opcost_answer
from tools.estimators.cpu.dataset import GraphData
from tools.estimators.cpu.eager import eager_operators
from tools.estimators.cpu.opcost import OpCostModel, fit_opcost, node_rows

from .test_opcost import _items, _local, _op_seconds, _ops, _update, _with_heldout

EAGER_S, LOOP_S = 2e-5, 2e-6


def _law(ops: list[list[Any]], rnn_ops: int, rnn_calls: int, params: int, threads: int) -> float:
    total = float(sum(o[7] * o[8] for o in ops))
    count = sum(o[7] for o in ops)
    eager = count - rnn_ops + 2 * rnn_calls
    update = _update(params, "sgd", threads)
    return float(1.3 * total + EAGER_S * eager + LOOP_S * rnn_ops + update)


def _cell_ops(rng: random.Random, n: int, threads: int) -> list[list[Any]]:
    """A recurrent loop's operators: small matrix products and element-wise ones."""
    rows = []
    for _ in range(n):
        cat = rng.choice(("matmul", "elementwise"))
        flops = 10 ** rng.uniform(3, 4.5) if cat == "matmul" else 0.0
        inp, out = 10 ** rng.uniform(3, 4), 10 ** rng.uniform(3, 4)
        t = _op_seconds(cat, flops, inp + out, threads)
        rows.append([cat, cat, rng.random() < 0.5, flops, inp, out, 0.0, 1, t, t, t, t])
    return rows


def _recurrent(rng: random.Random, threads: int) -> tuple[list[list[Any]], int, int]:
    loop = _cell_ops(rng, rng.randrange(150, 400), threads)
    ops = loop + _cell_ops(rng, rng.randrange(4, 12), threads)
    return ops, len(loop), rng.choice((1, 2))


def _training() -> tuple[list[dict[str, Any]], dict[str, float], dict[str, dict[str, Any]]]:
    rng = random.Random(7)
    items = _items()
    truth: dict[str, float] = {}
    extra: dict[str, dict[str, Any]] = {}
    for i, item in enumerate(items):
        if item["kind"] == "zoo":
            item["id"] = f"zoo-{i}"
            count = sum(o[7] for o in item["ops"])
            truth[item["id"]] = (
                1.3 * sum(o[7] * o[8] for o in item["ops"])
                + EAGER_S * count
                + _update(item["parameters"], item["optimizer"], item["threads"])
            )
    for k in range(12):
        threads = 1 + k % 2
        ops, rnn_ops, calls = _recurrent(rng, threads)
        params = rng.randrange(1_000, 200_000)
        item_id = f"probe-recurrent-{k}-t{threads}"
        items.append(
            {"id": item_id, "kind": "probe", "probe": "recurrent", "threads": threads, "ops": ops}
        )
        truth[item_id] = _law(ops, rnn_ops, calls, params, threads)
        extra[item_id] = {"rnn_ops": rnn_ops, "rnn_calls": calls, "parameters": params}
    return items, truth, extra


@pytest.fixture(scope="module")
def fitted() -> tuple[OpCostModel, OpCostModel]:
    items, truth, extra = _training()
    apart = fit_opcost(items, truth=truth, extra=extra, rounds=80)
    # the same steps, the loops' operators counted as eager ones (the formula before)
    counts_only = {k: {"parameters": v["parameters"]} for k, v in extra.items()}
    together = fit_opcost(items, truth=truth, extra=counts_only, rounds=80)
    return apart, together


def test_eager_operators_count_a_loop_once_each_way() -> None:
    assert eager_operators(1517, 1499, 1) == 20
    assert eager_operators(40, 0, 0) == 40


def test_probe_steps_train_the_step_law_and_are_not_scored(
    fitted: tuple[OpCostModel, OpCostModel],
) -> None:
    apart, _ = fitted
    assert apart.meta["probe_step_rows"] == 12 and apart.meta["step_rows"] == 40
    assert apart.meta["validation"]["all"]["rows"] == 40
    for coef in apart.step.values():
        assert len(coef) == 7  # [a, o, b, c, r, fixed, v]
        assert coef[4] < coef[2]  # a loop's operator costs less than an eager one


def test_a_new_recurrent_step_is_predicted_with_its_loops_apart(
    fitted: tuple[OpCostModel, OpCostModel],
) -> None:
    apart, _ = fitted
    rng = random.Random(99)
    for threads in (1, 2):
        ops, rnn_ops, calls = _recurrent(rng, threads)
        truth = _law(ops, rnn_ops, calls, 50_000, threads)
        x, counts = node_rows(ops)
        common: dict[str, Any] = {"threads": threads, "optimizer": "sgd", "parameters": 50_000}
        _, p50, _ = apart.predict_s(x, counts, **common, rnn_ops=rnn_ops, rnn_calls=calls)
        assert abs(p50 - truth) / truth < 0.15


def test_a_model_saved_with_four_coefficients_predicts_as_before(
    fitted: tuple[OpCostModel, OpCostModel],
) -> None:
    _, together = fitted
    four = OpCostModel(
        together.booster,
        {k: v[:4] for k, v in together.step.items()},
        together.updates,
        together.log_q10,
        together.log_q90,
        together.meta,
    )
    x, counts = node_rows(_ops(random.Random(5), 300, 1))
    common: dict[str, Any] = {"threads": 1, "optimizer": "sgd", "parameters": 1000}
    # old files know no loops: every operator is an eager one, whatever the counts say
    assert four.predict_s(x, counts, **common, rnn_ops=290, rnn_calls=1) == pytest.approx(
        together.predict_s(x, counts, **common)
    )


def test_the_service_passes_a_graphs_recurrent_loops_to_the_model(
    fitted: tuple[OpCostModel, OpCostModel],
) -> None:
    apart, _ = fitted
    model = _with_heldout(apart, True)
    model.meta["provenance"] = {"cpu_model": "AMD EPYC"}
    ops, rnn_ops, _ = _recurrent(random.Random(3), 1)
    x, counts = node_rows(ops)
    x = np.repeat(x, counts.astype(int), axis=0)
    plain = GraphData(x=x.astype(np.float32), edge_index=np.zeros((2, 0), dtype=np.int64))
    plain.summary["parameters"] = 50_000.0
    tagged = GraphData(x=plain.x, edge_index=plain.edge_index, summary=plain.summary)
    tagged.rnn_call = np.array([0] * rnn_ops + [-1] * (len(x) - rnn_ops), dtype=np.int64)
    assert tagged.rnn_counts == (rnn_ops, 1)
    answered = _opcost_answer(model, _local(), tagged, "sgd")
    assert answered is not None
    _, p50, _ = model.predict_s(
        x, None, threads=1, optimizer="sgd", parameters=50_000, rnn_ops=rnn_ops, rnn_calls=1
    )
    assert answered[0].p50 == pytest.approx(p50)
    untagged = _opcost_answer(model, _local(), plain, "sgd")
    assert untagged is not None and untagged[0].p50 != pytest.approx(p50)


def test_intervals_are_calibrated_on_probe_families_left_out_too() -> None:
    """A probe family the zoo's law misses (its steps take twice the law) widens the
    interval: each probe family is predicted by a booster and a step law fitted without
    it, and those new-family residuals calibrate p10/p90 with the zoo folds'. The
    recurrent probes are scored but not calibrated on: without them no training step
    has a loop, so the loop term is not fitted."""
    items, truth, extra = _training()
    rng = random.Random(11)
    for k in range(10):
        threads = 1 + k % 2
        ops = _cell_ops(rng, rng.randrange(20, 60), threads)
        params = rng.randrange(1_000, 200_000)
        item_id = f"probe-tokens-{k}-t{threads}"
        items.append(
            {"id": item_id, "kind": "probe", "probe": "tokens", "threads": threads, "ops": ops}
        )
        truth[item_id] = 2.0 * _law(ops, 0, 0, params, threads)
        extra[item_id] = {"rnn_ops": 0, "rnn_calls": 0, "parameters": params}
    model = fit_opcost(items, truth=truth, extra=extra, rounds=60)
    zoo_only = fit_opcost(items, truth=truth, extra=extra, rounds=60, calibrate_on_probes=False)
    validation = model.meta["validation"]
    assert validation["probe_family_out"]["rows"] == 22
    assert validation["probe:tokens"]["under_rate"] > 0.8
    assert "probe:recurrent" in model.meta["calibration"]
    assert model.log_q90 > np.log(1.5) > zoo_only.log_q90
    assert (
        validation["probe:tokens"]["coverage_p10_p90"]
        > zoo_only.meta["validation"]["probe:tokens"]["coverage_p10_p90"]
    )
    assert validation["all"]["mape"] == zoo_only.meta["validation"]["all"]["mape"]
