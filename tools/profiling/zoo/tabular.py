"""Models of tabular and recommendation data: MLPs and a DLRM-style recommender.

The recommender follows Naumov et al. 2019 (DLRM): a bottom MLP over dense features,
one embedding table per sparse feature, pairwise dot-product interactions, a top MLP
to one click logit. Sparse features are single indices per table (no bags) so that the
model traces with torch.fx.
"""

from __future__ import annotations

import itertools

import torch
from torch import Tensor, nn

__all__ = ["DLRM", "MLP"]


def _mlp(sizes: list[int], last_relu: bool) -> nn.Sequential:
    layers: list[nn.Module] = []
    for index, (inp, out) in enumerate(itertools.pairwise(sizes)):
        layers.append(nn.Linear(inp, out))
        if last_relu or index < len(sizes) - 2:
            layers.append(nn.ReLU(True))
    return nn.Sequential(*layers)


class MLP(nn.Module):
    """``depth`` hidden layers of ``width`` units over ``features`` inputs."""

    def __init__(
        self, depth: int = 3, width: int = 1024, features: int = 784, num_classes: int = 10
    ) -> None:
        super().__init__()
        self.net = _mlp([features] + [width] * depth + [num_classes], last_relu=False)

    def forward(self, x: Tensor) -> Tensor:
        out: Tensor = self.net(x)
        return out


class DLRM(nn.Module):
    """``width`` is the embedding size, ``depth`` the hidden layers of each MLP."""

    rows_index: Tensor
    cols_index: Tensor

    def __init__(
        self,
        depth: int = 2,
        width: int = 64,
        tables: int = 26,
        rows: int = 10000,
        dense: int = 13,
        hidden: int = 512,
    ) -> None:
        super().__init__()
        self.bottom = _mlp([dense] + [hidden] * depth + [width], last_relu=True)
        self.embeddings = nn.ModuleList(nn.Embedding(rows, width) for _ in range(tables))
        pairs = (tables + 1) * tables // 2
        self.top = _mlp([width + pairs] + [hidden] * depth + [1], last_relu=False)
        rows_, cols_ = torch.triu_indices(tables + 1, tables + 1, offset=1)
        self.register_buffer("rows_index", rows_, persistent=False)
        self.register_buffer("cols_index", cols_, persistent=False)

    def forward(self, dense: Tensor, sparse: Tensor) -> Tensor:
        bottom = self.bottom(dense)
        vectors = [bottom] + [table(sparse[:, i]) for i, table in enumerate(self.embeddings)]
        stacked = torch.stack(vectors, dim=1)
        dots = torch.bmm(stacked, stacked.transpose(1, 2))
        pairs = dots[:, self.rows_index, self.cols_index]
        out: Tensor = self.top(torch.cat([bottom, pairs], dim=1))
        return out.squeeze(1)
