"""Per-operator timings: every working operator of a traced step, in op-graph order."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from torch import nn

from tools.profiling.opgraph import op_graph
from tools.profiling.opprobes import PROBES, probe_tasks
from tools.profiling.opsweep import OP_FIELDS, aggregate_ops, main, read_items
from tools.profiling.optiming import time_call, time_optimizer_update, time_step_ops
from tools.profiling.zoo import family
from tools.profiling.zoo.registry import TrainingTask


def _mlp(batch: int = 4) -> TrainingTask:
    torch.manual_seed(0)
    return family("mlp").task({"depth": 2, "width": 32, "features": 16, "num_classes": 5}, batch)


def test_each_operator_of_the_op_graph_gets_a_positive_time_in_the_same_order() -> None:
    task = _mlp()
    timed = time_step_ops(task, threads=1)
    graph = op_graph(task)
    assert [t.node for t in timed.ops] == graph.nodes
    assert all(t.critical_s > 0 and t.thread_s > 0 for t in timed.ops)
    # one thread: the critical path is the calling thread's CPU time
    assert all(t.critical_s == t.thread_s for t in timed.ops)
    assert timed.total_s == pytest.approx(sum(t.thread_s for t in timed.ops))


def test_a_bigger_matrix_multiply_costs_more_cpu_time() -> None:
    torch.set_num_threads(1)
    small, large = torch.randn(32, 32), torch.randn(256, 256)
    cheap = time_call(lambda: small @ small)
    dear = time_call(lambda: large @ large)
    assert dear.thread_s > 20 * cheap.thread_s
    assert dear.critical_s(1) == dear.thread_s
    assert dear.critical_s(2) >= dear.thread_s


def test_timing_a_step_leaves_the_model_parameters_unchanged() -> None:
    task = _mlp()
    before = [p.detach().clone() for p in task.model.parameters()]
    time_step_ops(task, threads=1)
    assert all(torch.equal(a, b) for a, b in zip(before, task.model.parameters(), strict=True))


def test_an_lstm_step_times_its_onednn_backward() -> None:
    """oneDNN's LSTM backward reads a workspace its forward keeps only in grad mode."""

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.rnn = nn.LSTM(8, 16, batch_first=True)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            out: torch.Tensor = self.rnn(x)[0][:, -1]
            return out

    task = TrainingTask(Net(), (torch.randn(2, 5, 8),), torch.randint(0, 16, (2,)))
    ops = {t.node.op for t in time_step_ops(task, threads=1).ops}
    assert "mkldnn_rnn_layer_backward" in ops


def test_optimizer_update_of_adam_costs_more_than_sgd() -> None:
    shapes = [(256, 256)] * 4
    sgd = time_optimizer_update(shapes, "sgd", 1)
    adam = time_optimizer_update(shapes, "adam", 1)
    assert sgd.parameters == adam.parameters == 4 * 256 * 256
    assert adam.critical_s > sgd.critical_s > 0


def test_aggregated_rows_count_every_operator_once() -> None:
    timed = time_step_ops(_mlp(), threads=1)
    rows = aggregate_ops(timed)
    assert all(len(r) == len(OP_FIELDS) for r in rows)
    assert sum(r[OP_FIELDS.index("count")] for r in rows) == len(timed.ops)


def test_probe_networks_are_seeded_and_cover_every_probe() -> None:
    first = probe_tasks(1, seed=3)
    again = probe_tasks(1, seed=3)
    assert [n for n, _ in first] == [f"{p}-0" for p in PROBES]
    for (_, a), (_, b) in zip(first, again, strict=True):
        assert [x.shape for x in a.inputs] == [x.shape for x in b.inputs]


def test_the_sweep_writes_provenance_then_items_and_resumes(tmp_path: Path) -> None:
    out = tmp_path / "t.jsonl"
    args = ["--out", str(out), "--zoo-per-family", "0", "--probes", "0", "--updates", "1"]
    main(args)
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert lines[0]["kind"] == "provenance" and lines[0]["torch"] == torch.__version__
    updates = [i for i in read_items(out) if i["kind"] == "update"]
    assert {(u["optimizer"], u["threads"]) for u in updates} == {
        ("sgd", 1),
        ("sgd", 2),
        ("adam", 1),
        ("adam", 2),
    }
    assert all(math.isfinite(u["critical_s"]) and u["critical_s"] > 0 for u in updates)
    size = out.stat().st_size
    main(args)  # everything is there: nothing appended
    assert out.stat().st_size == size
