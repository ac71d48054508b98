"""White-box estimator: a graph neural network over the training step's op graph.

Input: the op graph (``dataset.GraphData``: per-operator category, phase, log FLOPs
and bytes) with graph-level features broadcast to every node (hardware specs, threads,
batch size, optimizer, the analytic estimates). Three GraphSAGE layers (torch-geometric)
mix each operator with its producers and consumers. Outputs:

- time: the sum over operators of a positive learned per-operator cost, plus a positive
  per-step term. A step's time is the sum of its operators' times, so the structure
  itself carries over to architectures the network has not seen;
- memory: the analytic memory times a learned factor (log residual, bounded to e^+-3);
- an embedding of the whole graph (pooled sum, mean and max), which the hybrid uses.

Loss: absolute error of log time and log memory (close to MAPE for small errors).
Point estimates only; intervals come from split-conformal calibration on validation
data (``calibration``), with a symmetric log-scale band around the point estimate.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from numpy.typing import NDArray
from torch import Tensor, nn

from tools.estimators.cpu.dataset import NODE_FEATURES, GraphData

__all__ = ["GNNModel", "GraphSample", "MeanSage", "OpGraphNet", "fit_gnn"]

TIME_UNIT_S = 1e-3  # per-operator costs are learned in milliseconds


@dataclass(frozen=True, slots=True)
class GraphSample:
    """One training step to learn from or predict: its graph and graph-level features."""

    graph: GraphData
    features: NDArray[np.float64]  # graph-level (hardware, batch, optimizer, analytic)
    analytic_log_memory: float
    log_time: float = math.nan
    log_memory: float = math.nan


class MeanSage(nn.Module):
    """GraphSAGE with mean aggregation (Hamilton et al., 2017): a node's new state is a
    linear map of the mean of the states that reach it along ``edge_index`` (source row
    0, target row 1) plus a bias-free linear map of its own. Parameter names match
    torch-geometric's ``SAGEConv``, so models trained with it load unchanged."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.lin_l = nn.Linear(channels, channels)
        self.lin_r = nn.Linear(channels, channels, bias=False)

    def forward(self, x: Tensor, edge_index: Tensor) -> Tensor:
        source, target = edge_index[0], edge_index[1]
        summed = torch.zeros_like(x).index_add_(0, target, x[source])
        arriving = torch.zeros(x.shape[0], dtype=x.dtype).index_add_(
            0, target, torch.ones(target.shape[0], dtype=x.dtype)
        )
        mean = summed / arriving.clamp_min(1.0).unsqueeze(1)
        out: Tensor = self.lin_l(mean) + self.lin_r(x)
        return out


def _sum_pool(h: Tensor, batch: Tensor, graphs: int) -> Tensor:
    return torch.zeros(graphs, h.shape[1], dtype=h.dtype).index_add_(0, batch, h)


def _mean_pool(h: Tensor, batch: Tensor, graphs: int) -> Tensor:
    nodes = torch.zeros(graphs, dtype=h.dtype).index_add_(
        0, batch, torch.ones_like(batch, dtype=h.dtype)
    )
    return _sum_pool(h, batch, graphs) / nodes.clamp_min(1.0).unsqueeze(1)


def _max_pool(h: Tensor, batch: Tensor, graphs: int) -> Tensor:
    start = torch.full((graphs, h.shape[1]), -math.inf, dtype=h.dtype)
    index = batch.unsqueeze(1).expand_as(h)
    return start.scatter_reduce(0, index, h, reduce="amax", include_self=False)


class OpGraphNet(nn.Module):
    """GraphSAGE over operators; additive time head, residual memory head, embedding."""

    def __init__(self, graph_features: int, hidden: int = 64, layers: int = 3, embed: int = 16):
        super().__init__()
        self.node_in = nn.Linear(len(NODE_FEATURES) + graph_features, hidden)
        self.convs = nn.ModuleList(MeanSage(hidden) for _ in range(layers))
        # The cost head also sees the operator's own inputs, undiluted by message passing.
        inputs = len(NODE_FEATURES) + graph_features
        self.node_cost = nn.Sequential(
            nn.Linear(hidden + inputs, hidden), nn.ReLU(), nn.Linear(hidden, 1)
        )
        self.embed = nn.Sequential(nn.Linear(3 * hidden + graph_features, embed), nn.ReLU())
        self.step_cost = nn.Linear(embed, 1)
        self.memory = nn.Sequential(nn.Linear(embed, embed), nn.ReLU(), nn.Linear(embed, 1))

    def forward(
        self, x: Tensor, edge_index: Tensor, batch: Tensor, graph_x: Tensor
    ) -> tuple[Tensor, Tensor, Tensor]:
        """(log time s, log-memory residual, embedding) per graph."""
        graphs = int(graph_x.shape[0])
        node_inputs = torch.cat([x, graph_x[batch]], dim=1)
        h = torch.relu(self.node_in(node_inputs))
        for conv in self.convs:
            h = h + torch.relu(conv(h, edge_index))
        per_op = nn.functional.softplus(self.node_cost(torch.cat([h, node_inputs], dim=1)))
        per_op = per_op.squeeze(1)
        op_sum = _sum_pool(per_op.unsqueeze(1), batch, graphs).squeeze(1)
        pooled = torch.cat(
            [
                _sum_pool(h, batch, graphs) / 100.0,
                _mean_pool(h, batch, graphs),
                _max_pool(h, batch, graphs),
            ],
            dim=1,
        )
        embedding = self.embed(torch.cat([pooled, graph_x], dim=1))
        step = nn.functional.softplus(self.step_cost(embedding)).squeeze(1)
        log_time = torch.log((op_sum + step) * TIME_UNIT_S + 1e-9)
        # A bounded correction (a factor within e^-3..e^3) keeps unseen inputs from
        # extrapolating the memory to absurd values.
        memory_residual = 3.0 * torch.tanh(self.memory(embedding).squeeze(1) / 3.0)
        return log_time, memory_residual, embedding


@dataclass(frozen=True, slots=True)
class _Batch:
    """Graphs stacked into one: node rows concatenated, edges offset, ``batch`` the graph
    of each node row, and one row per graph of the graph-level inputs and targets."""

    x: Tensor
    edge_index: Tensor
    batch: Tensor
    graph_x: Tensor
    analytic: Tensor
    log_time: Tensor
    log_memory: Tensor

    @property
    def num_graphs(self) -> int:
        return int(self.graph_x.shape[0])


def _batch(samples: Sequence[GraphSample], mean: Tensor, std: Tensor) -> _Batch:
    xs, edges, owners = [], [], []
    offset = 0
    for index, sample in enumerate(samples):
        nodes = sample.graph.x.shape[0]
        xs.append(torch.from_numpy(sample.graph.x))
        # Both directions: an operator hears its inputs and its consumers.
        both = np.concatenate([sample.graph.edge_index, sample.graph.edge_index[::-1]], axis=1)
        edges.append(torch.from_numpy(both) + offset)
        owners.append(torch.full((nodes,), index, dtype=torch.long))
        offset += nodes
    features = torch.from_numpy(np.stack([s.features for s in samples])).float()
    return _Batch(
        x=torch.cat(xs),
        edge_index=torch.cat(edges, dim=1),
        batch=torch.cat(owners),
        graph_x=((features - mean) / std).clamp(-10.0, 10.0),
        analytic=torch.tensor([s.analytic_log_memory for s in samples], dtype=torch.float32),
        log_time=torch.tensor([s.log_time for s in samples], dtype=torch.float32),
        log_memory=torch.tensor([s.log_memory for s in samples], dtype=torch.float32),
    )


@dataclass(slots=True)
class GNNModel:
    """A trained ``OpGraphNet`` with its feature scaling."""

    net: OpGraphNet
    mean: Tensor
    std: Tensor
    history: list[float] = field(default_factory=list)

    def predict(
        self, samples: Sequence[GraphSample], chunk: int = 64
    ) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64]]:
        """(log time, log memory, embeddings) for ``samples``."""
        self.net.eval()
        times, memories, embeds = [], [], []
        with torch.no_grad():
            for start in range(0, len(samples), chunk):
                batch = _batch(samples[start : start + chunk], self.mean, self.std)
                log_time, residual, embedding = self.net(
                    batch.x, batch.edge_index, batch.batch, batch.graph_x
                )
                times.append(log_time.numpy())
                memories.append((batch.analytic + residual).numpy())
                embeds.append(embedding.numpy())
        if not times:
            return np.zeros(0), np.zeros(0), np.zeros((0, 0))
        return (
            np.concatenate(times).astype(np.float64),
            np.concatenate(memories).astype(np.float64),
            np.concatenate(embeds).astype(np.float64),
        )

    def save(self, path: Path) -> None:
        torch.save(
            {
                "state": self.net.state_dict(),
                "mean": self.mean,
                "std": self.std,
                "graph_features": int(self.mean.numel()),
            },
            path,
        )

    @classmethod
    def load(cls, path: Path) -> GNNModel:
        saved = torch.load(path, weights_only=True)
        net = OpGraphNet(int(saved["graph_features"]))
        net.load_state_dict(saved["state"])
        return cls(net=net, mean=saved["mean"], std=saved["std"])


def fit_gnn(
    samples: Sequence[GraphSample],
    *,
    epochs: int = 80,
    batch_size: int = 32,
    learning_rate: float = 3e-3,
    seed: int = 0,
    threads: int | None = None,
) -> GNNModel:
    """Train an ``OpGraphNet`` on ``samples`` (log-scale L1 on time and memory)."""
    torch.manual_seed(seed)
    previous_threads = torch.get_num_threads()
    torch.set_num_threads(threads or previous_threads)
    try:
        features = torch.tensor(np.stack([s.features for s in samples]), dtype=torch.float32)
        mean = features.mean(0)
        std = features.std(0).clamp_min(1e-3)
        net = OpGraphNet(features.shape[1])
        optimizer = torch.optim.AdamW(net.parameters(), lr=learning_rate, weight_decay=1e-4)
        schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=max(1, epochs))
        rng = np.random.default_rng(seed)
        # Batches are built once: rebuilding them per epoch costs more than training.
        order = rng.permutation(len(samples))
        batches = [
            _batch([samples[i] for i in order[start : start + batch_size]], mean, std)
            for start in range(0, len(samples), batch_size)
        ]
        history: list[float] = []
        net.train()
        for _ in range(epochs):
            total = 0.0
            for index in rng.permutation(len(batches)):
                batch = batches[index]
                log_time, residual, _ = net(batch.x, batch.edge_index, batch.batch, batch.graph_x)
                loss = (log_time - batch.log_time).abs().mean() + (
                    batch.analytic + residual - batch.log_memory
                ).abs().mean()
                optimizer.zero_grad()
                loss.backward()
                nn.utils.clip_grad_norm_(net.parameters(), 5.0)
                optimizer.step()
                total += float(loss.detach()) * batch.num_graphs
            schedule.step()
            history.append(total / len(samples))
        return GNNModel(net=net, mean=mean, std=std, history=history)
    finally:
        torch.set_num_threads(previous_threads)
