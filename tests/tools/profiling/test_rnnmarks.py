"""Recurrent layers' loops are tagged in the traced step (``rnnmarks``): on CPU a GRU
dispatches its cells' operators from C++, and the per-operator CPU model must know
which traced operators those are (forward and backward)."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from tools.estimators.cpu.dataset import graph_data
from tools.profiling.opgraph import op_graph
from tools.profiling.zoo.registry import TrainingTask


class _Tagger(nn.Module):
    def __init__(self, cell: type[nn.GRU | nn.LSTM], layers: int = 1, stacked: int = 1) -> None:
        super().__init__()
        self.rnns = nn.ModuleList(
            cell(8, 8, num_layers=layers, batch_first=True) for _ in range(stacked)
        )
        self.out = nn.Linear(8, 3)

    def forward(self, x: Tensor) -> Tensor:
        for rnn in self.rnns:
            x = rnn(x)[0]
        out: Tensor = self.out(torch.relu(x)).mean(1)
        return out


def _task(model: nn.Module) -> TrainingTask:
    torch.manual_seed(0)
    return TrainingTask(
        model, (torch.randn(2, 5, 8),), torch.randn(2, 3), criterion=nn.functional.mse_loss
    )


def test_a_gru_loop_is_tagged_forward_and_backward() -> None:
    graph = op_graph(_task(_Tagger(nn.GRU)))
    inner = [n for n in graph.nodes if n.rnn_call >= 0]
    outer = [n for n in graph.nodes if n.rnn_call < 0]
    assert {n.rnn_call for n in inner} == {0}
    assert len(inner) > 5 * 10  # five time steps, ~10+ operators each way per cell
    assert {n.backward for n in inner} == {False, True}
    # the linear head, its gradient and the loss are the eager step's own operators
    assert any(n.category == "matmul" for n in outer)
    assert any(n.category == "loss" for n in outer)
    data = graph_data(graph)
    assert data.rnn_counts == (len(inner), 1)


def test_each_layer_call_is_one_loop() -> None:
    graph = op_graph(_task(_Tagger(nn.GRU, stacked=2)))
    assert {n.rnn_call for n in graph.nodes if n.rnn_call >= 0} == {0, 1}
    assert graph_data(graph).rnn_counts[1] == 2


def test_a_network_without_recurrent_layers_has_no_tags() -> None:
    model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 3))
    task = TrainingTask(
        model, (torch.randn(4, 8),), torch.randn(4, 3), criterion=nn.functional.mse_loss
    )
    graph = op_graph(task)
    assert all(n.rnn_call == -1 for n in graph.nodes)
    data = graph_data(graph)
    assert data.rnn_call is None and data.rnn_counts == (0, 0)
