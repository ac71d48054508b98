"""Held out (issue 40): a small Vision Transformer built from PyTorch's own layers.

A strided-convolution patch embedding (8x8 patches of 64x64 images), a class token,
four ``nn.TransformerEncoderLayer`` (pre-norm, GELU), and a 100-class head on the class
token. Unlike the zoo's ViT (its own attention blocks), the encoder is PyTorch's.
"""

import torch
from torch import Tensor, nn

SIDE, PATCH, DIM, CLASSES = 64, 8, 192, 100


class SmallViT(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.patch = nn.Conv2d(3, DIM, PATCH, stride=PATCH)
        tokens = (SIDE // PATCH) ** 2 + 1
        self.cls = nn.Parameter(torch.zeros(1, 1, DIM))
        self.position = nn.Parameter(torch.zeros(1, tokens, DIM))
        layer = nn.TransformerEncoderLayer(
            DIM,
            nhead=3,
            dim_feedforward=4 * DIM,
            dropout=0.0,
            activation="gelu",
            batch_first=True,
            norm_first=True,
        )
        self.encoder = nn.TransformerEncoder(layer, num_layers=4, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(DIM)
        self.head = nn.Linear(DIM, CLASSES)

    def forward(self, images: Tensor) -> Tensor:
        x = self.patch(images).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], dim=1) + self.position
        return self.head(self.norm(self.encoder(x))[:, 0])


def example_batch(batch_size: int) -> tuple[Tensor, Tensor]:
    return torch.randn(batch_size, 3, SIDE, SIDE), torch.randint(0, CLASSES, (batch_size,))
