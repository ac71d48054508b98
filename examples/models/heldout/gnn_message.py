"""Held-out family (not in the zoo): a message-passing graph network (GIN-style).

A batch of ``batch_size`` random graphs (fixed per size, seeded) of 64 nodes and 256
edges each, as one disjoint union: node features -> per layer, messages gathered along
edges, summed into their targets with ``index_add``, an MLP with batch norm;
mean-pooled per graph, a linear head. Gather/scatter operators the zoo's families do
not have. Used by ``benchmarks/cpu_opcost.py``.

    rightsize estimate --model-file examples/models/heldout/gnn_message.py \\
        --model-class MessagePassing --batch-size 16 --epochs 1 --samples 1000
"""

import itertools

import torch
from torch import nn

NODES, EDGES, FEATURES, CLASSES = 64, 256, 32, 10


class GINLayer(nn.Module):
    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.eps = nn.Parameter(torch.zeros(1))
        self.mlp = nn.Sequential(
            nn.Linear(dim, hidden), nn.BatchNorm1d(hidden), nn.ReLU(), nn.Linear(hidden, hidden)
        )

    def forward(self, x: torch.Tensor, src: torch.Tensor, dst: torch.Tensor) -> torch.Tensor:
        summed = torch.zeros_like(x).index_add(0, dst, x.index_select(0, src))
        return torch.relu(self.mlp((1 + self.eps) * x + summed))


class MessagePassing(nn.Module):
    def __init__(self, hidden: int = 128, layers: int = 4) -> None:
        super().__init__()
        dims = [FEATURES] + [hidden] * layers
        self.layers = nn.ModuleList(GINLayer(a, b) for a, b in itertools.pairwise(dims))
        self.head = nn.Linear(hidden, CLASSES)

    def forward(self, x: torch.Tensor, edges: torch.Tensor) -> torch.Tensor:
        src, dst = edges[0], edges[1]
        for layer in self.layers:
            x = layer(x, src, dst)
        return self.head(x.view(-1, NODES, x.shape[-1]).mean(dim=1))


def example_batch(batch_size: int) -> tuple[tuple[torch.Tensor, torch.Tensor], torch.Tensor]:
    g = torch.Generator().manual_seed(batch_size)
    offsets = (torch.arange(batch_size) * NODES).repeat_interleave(EDGES)
    edges = torch.randint(0, NODES, (2, batch_size * EDGES), generator=g) + offsets
    x = torch.randn(batch_size * NODES, FEATURES, generator=g)
    return (x, edges), torch.randint(0, CLASSES, (batch_size,), generator=g)
