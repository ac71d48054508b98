"""Probe networks: one operator class each, over a seeded spread of shapes.

The zoo's nine families dispatch a limited mix of operators (2-D convolutions, GEMMs,
one oneDNN LSTM kernel, batch/layer norm, CPU attention...). A model of a family the
zoo lacks is estimated from its operators, so the per-operator timings
(``tools.profiling.optiming``) also cover operators and shapes the zoo does not have,
each in a minimal network whose training step is dominated by it: 1-D and 2-D
convolutions of any kernel, stride and grouping; GRU and LSTM layers (CPU GRU
traces as its cell's matmuls and element-wise ops); linear layers over 3-D tokens;
layer, group and batch norm; softmax and attention; pooling; embedding lookups and
gather / index_add / scatter_add (message passing); activations (GELU, SiLU,
tanh...). Shapes are drawn from ``random.Random(seed)`` and kept small (each step well
under 0.1 s on one core) so that the whole spread is timed in minutes.
"""

from __future__ import annotations

import random
from collections.abc import Callable

import torch
from torch import Tensor, nn

from tools.profiling.zoo.registry import TrainingTask

__all__ = ["PROBES", "probe_tasks"]


def _mse(out: Tensor, target: Tensor) -> Tensor:
    return nn.functional.mse_loss(out.flatten(1).mean(1), target)


def _task(model: nn.Module, inputs: tuple[Tensor, ...], batch: int) -> TrainingTask:
    return TrainingTask(model, inputs, torch.randn(batch), criterion=_mse)


_ACTS: tuple[Callable[[], nn.Module], ...] = (nn.ReLU, nn.GELU, nn.SiLU, nn.Tanh, nn.Sigmoid)


def _conv1d(rng: random.Random) -> TrainingTask:
    b, c, length = rng.choice((2, 4, 8, 16)), rng.choice((8, 16, 32, 64, 128)), 0
    length = rng.choice((64, 128, 256, 512, 1024))
    k = rng.choice((1, 3, 5, 9, 15))
    out = rng.choice((8, 16, 32, 64, 128))
    groups = c if rng.random() < 0.3 else 1
    out = c if groups > 1 else out
    stride = rng.choice((1, 1, 2, 4))
    layers: list[nn.Module] = [
        nn.Conv1d(c, out, k, stride=stride, padding=k // 2, groups=groups),
        nn.BatchNorm1d(out) if rng.random() < 0.5 else nn.GroupNorm(min(8, out), out),
        rng.choice(_ACTS)(),
    ]
    if rng.random() < 0.5:
        layers.append(rng.choice((nn.MaxPool1d(2), nn.AvgPool1d(2))))
    return _task(nn.Sequential(*layers), (torch.randn(b, c, length),), b)


def _conv2d(rng: random.Random) -> TrainingTask:
    b, c = rng.choice((2, 4, 8)), rng.choice((3, 8, 16, 32, 64))
    side = rng.choice((8, 16, 32, 56))
    k = rng.choice((1, 3, 5, 7))
    groups = c if c > 3 and rng.random() < 0.3 else 1
    out = c if groups > 1 else rng.choice((8, 16, 32, 64, 96))
    stride = rng.choice((1, 1, 2))
    layers: list[nn.Module] = [
        nn.Conv2d(c, out, k, stride=stride, padding=k // 2, groups=groups),
        nn.BatchNorm2d(out),
        rng.choice(_ACTS)(),
    ]
    if rng.random() < 0.4:
        layers.append(rng.choice((nn.MaxPool2d(2), nn.AvgPool2d(2), nn.AdaptiveAvgPool2d(1))))
    return _task(nn.Sequential(*layers), (torch.randn(b, c, side, side),), b)


class _Recurrent(nn.Module):
    def __init__(self, cell: type[nn.GRU | nn.LSTM], inp: int, hidden: int, layers: int, bi: bool):
        super().__init__()
        self.rnn = cell(inp, hidden, num_layers=layers, batch_first=True, bidirectional=bi)

    def forward(self, x: Tensor) -> Tensor:
        out: Tensor = self.rnn(x)[0]
        return out


def _recurrent(rng: random.Random) -> TrainingTask:
    cell = rng.choice((nn.GRU, nn.LSTM))
    b, t = rng.choice((2, 4, 8, 16)), rng.choice((4, 8, 16, 32))
    inp, hidden = rng.choice((8, 16, 32, 64)), rng.choice((16, 32, 64, 128))
    model = _Recurrent(cell, inp, hidden, rng.choice((1, 2)), rng.random() < 0.3)
    return _task(model, (torch.randn(b, t, inp),), b)


class _Tokens(nn.Module):
    """Linear layers over (batch, tokens, channels), optionally across tokens (mixing)."""

    def __init__(self, tokens: int, dim: int, hidden: int, norm: str, act: nn.Module, mix: bool):
        super().__init__()
        self.norm: nn.Module = nn.LayerNorm(dim) if norm == "layer" else nn.Identity()
        self.mix = mix
        width = tokens if mix else dim
        self.up, self.down, self.act = nn.Linear(width, hidden), nn.Linear(hidden, width), act

    def forward(self, x: Tensor) -> Tensor:
        y = self.norm(x)
        if self.mix:
            y = y.transpose(1, 2)
        y = self.down(self.act(self.up(y)))
        if self.mix:
            y = y.transpose(1, 2)
        result: Tensor = x + y
        return result


def _tokens(rng: random.Random) -> TrainingTask:
    b, t, d = rng.choice((2, 4, 8, 16)), rng.choice((16, 32, 64, 128)), rng.choice((32, 64, 128))
    hidden = d * rng.choice((1, 2, 4))
    model = _Tokens(
        t, d, hidden, rng.choice(("layer", "none")), rng.choice(_ACTS)(), rng.random() < 0.4
    )
    return _task(model, (torch.randn(b, t, d),), b)


class _Attention(nn.Module):
    def __init__(self, dim: int, heads: int, causal: bool):
        super().__init__()
        self.qkv, self.heads, self.causal = nn.Linear(dim, 3 * dim), heads, causal

    def forward(self, x: Tensor) -> Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        if self.causal:  # explicit scores: bmm, softmax, bmm
            scores = (q @ k.transpose(-1, -2)) / (d // self.heads) ** 0.5
            out = scores.softmax(-1) @ v
        else:
            out = nn.functional.scaled_dot_product_attention(q, k, v)
        result: Tensor = out.transpose(1, 2).reshape(b, t, d)
        return result


def _attention(rng: random.Random) -> TrainingTask:
    b, t = rng.choice((2, 4, 8)), rng.choice((16, 32, 64, 128, 256))
    heads = rng.choice((1, 2, 4, 8))
    dim = heads * rng.choice((8, 16, 32))
    return _task(_Attention(dim, heads, rng.random() < 0.5), (torch.randn(b, t, dim),), b)


class _Messages(nn.Module):
    """Message passing over a random graph: gather, linear, index_add / scatter, norm."""

    def __init__(self, nodes: int, edges: int, dim: int, reduce: str, seed: int):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.src: Tensor
        self.dst: Tensor
        self.register_buffer("src", torch.randint(0, nodes, (edges,), generator=g))
        self.register_buffer("dst", torch.randint(0, nodes, (edges,), generator=g))
        self.msg, self.how = nn.Linear(2 * dim, dim), reduce
        self.norm = nn.LayerNorm(dim)

    def forward(self, x: Tensor) -> Tensor:
        pair = torch.cat([x[:, self.src], x[:, self.dst]], dim=-1)
        m = torch.relu(self.msg(pair))
        out = torch.zeros_like(x)
        if self.how == "index_add":
            out = out.index_add(1, self.dst, m)
        else:
            idx = self.dst.view(1, -1, 1).expand(x.shape[0], -1, x.shape[2])
            out = out.scatter_add(1, idx, m)
        result: Tensor = self.norm(x + out)
        return result


def _messages(rng: random.Random) -> TrainingTask:
    b, nodes, dim = (
        rng.choice((1, 2, 4, 8)),
        rng.choice((32, 64, 128, 256)),
        rng.choice((16, 32, 64)),
    )
    edges = nodes * rng.choice((2, 4, 8))
    model = _Messages(nodes, edges, dim, rng.choice(("index_add", "scatter")), rng.randrange(1000))
    return _task(model, (torch.randn(b, nodes, dim),), b)


class _Embed(nn.Module):
    def __init__(self, rows: int, dim: int, classes: int):
        super().__init__()
        self.emb, self.out = nn.Embedding(rows, dim), nn.Linear(dim, classes)

    def forward(self, x: Tensor) -> Tensor:
        result: Tensor = self.out(self.emb(x)).log_softmax(-1)
        return result


def _embedding(rng: random.Random) -> TrainingTask:
    b, t = rng.choice((4, 8, 16)), rng.choice((8, 32, 64))
    rows, dim = rng.choice((100, 1000, 10000)), rng.choice((16, 32, 64, 128))
    model = _Embed(rows, dim, rng.choice((10, 100, 1000)))
    return _task(model, (torch.randint(0, rows, (b, t)),), b)


PROBES: dict[str, Callable[[random.Random], TrainingTask]] = {
    "conv1d": _conv1d,
    "conv2d": _conv2d,
    "recurrent": _recurrent,
    "tokens": _tokens,
    "attention": _attention,
    "messages": _messages,
    "embedding": _embedding,
}


def probe_tasks(per_probe: int, seed: int = 0) -> list[tuple[str, TrainingTask]]:
    """``per_probe`` networks of every probe, shapes from ``random.Random(seed)``."""
    rng = random.Random(seed)
    out: list[tuple[str, TrainingTask]] = []
    for index in range(per_probe):
        for name, make in PROBES.items():
            torch.manual_seed(seed * 100_003 + index)
            out.append((f"{name}-{index}", make(rng)))
    return out
