"""Held-out family (not in the zoo): MLP-Mixer (Tolstikhin et al. 2021).

Patches embedded by a strided convolution, then blocks of a token-mixing MLP (across
patches) and a channel-mixing MLP, each after a layer norm, GELU, residuals; global
average pooling and a linear head. No attention, no 2-D convolution beyond the patch
embedding. Used by ``benchmarks/cpu_opcost.py``.

    rightsize estimate --model-file examples/models/heldout/mlp_mixer.py \\
        --model-class MLPMixer --batch-size 16 --epochs 1 --samples 1000
"""

import torch
from torch import nn

IMAGE, PATCH, CLASSES = 64, 8, 100


class MixerBlock(nn.Module):
    def __init__(self, tokens: int, dim: int, token_hidden: int, channel_hidden: int) -> None:
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.tokens = nn.Sequential(
            nn.Linear(tokens, token_hidden), nn.GELU(), nn.Linear(token_hidden, tokens)
        )
        self.channels = nn.Sequential(
            nn.Linear(dim, channel_hidden), nn.GELU(), nn.Linear(channel_hidden, dim)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.tokens(self.norm1(x).transpose(1, 2)).transpose(1, 2)
        return x + self.channels(self.norm2(x))


class MLPMixer(nn.Module):
    def __init__(self, dim: int = 128, depth: int = 6) -> None:
        super().__init__()
        tokens = (IMAGE // PATCH) ** 2
        self.patch = nn.Conv2d(3, dim, PATCH, stride=PATCH)
        self.blocks = nn.Sequential(
            *(MixerBlock(tokens, dim, 2 * tokens, 4 * dim) for _ in range(depth))
        )
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, CLASSES)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        x = self.patch(images).flatten(2).transpose(1, 2)
        return self.head(self.norm(self.blocks(x)).mean(dim=1))


def example_batch(batch_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randn(batch_size, 3, IMAGE, IMAGE), torch.randint(0, CLASSES, (batch_size,))
