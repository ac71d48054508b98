"""Attention and recurrent models: a small ViT, a Transformer encoder LM, an LSTM LM.

The attention block is written out (pre-norm, ``scaled_dot_product_attention``) rather
than taken from ``nn.TransformerEncoderLayer``, whose fast-path checks do not trace
with torch.fx. Language models return logits flattened to (batch x tokens, vocab) so
that cross-entropy against flattened targets is the loss, as for classifiers.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = ["LSTMLanguageModel", "TransformerLM", "ViT"]


class _Block(nn.Module):
    def __init__(self, dim: int, heads: int, mlp_ratio: int) -> None:
        super().__init__()
        self.heads = heads
        self.norm1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(
            nn.Linear(dim, dim * mlp_ratio), nn.GELU(), nn.Linear(dim * mlp_ratio, dim)
        )

    def forward(self, x: Tensor) -> Tensor:
        batch, tokens, dim = x.shape
        qkv = self.qkv(self.norm1(x)).reshape(batch, tokens, 3, self.heads, dim // self.heads)
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)
        attended = F.scaled_dot_product_attention(q, k, v)
        x = x + self.proj(attended.transpose(1, 2).reshape(batch, tokens, dim))
        out: Tensor = x + self.mlp(self.norm2(x))
        return out


class ViT(nn.Module):
    """Dosovitskiy et al. 2021; ``width`` is the embedding size, ``depth`` the blocks."""

    def __init__(
        self,
        depth: int = 12,
        width: int = 384,
        image_size: int = 224,
        patch: int = 16,
        heads: int = 6,
        num_classes: int = 1000,
    ) -> None:
        super().__init__()
        self.embed = nn.Conv2d(3, width, patch, stride=patch)
        tokens = (image_size // patch) ** 2 + 1
        self.cls = nn.Parameter(torch.zeros(1, 1, width))
        self.pos = nn.Parameter(torch.zeros(1, tokens, width))
        self.blocks = nn.Sequential(*[_Block(width, heads, 4) for _ in range(depth)])
        self.norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, num_classes)

    def forward(self, x: Tensor) -> Tensor:
        x = self.embed(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], dim=1) + self.pos
        x = self.norm(self.blocks(x))
        out: Tensor = self.head(x[:, 0])
        return out


class TransformerLM(nn.Module):
    """A Transformer encoder language model (Vaswani et al. 2017, encoder only)."""

    def __init__(
        self,
        depth: int = 6,
        width: int = 512,
        seq_len: int = 128,
        vocab: int = 32000,
        heads: int = 8,
    ) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.pos = nn.Parameter(torch.zeros(1, seq_len, width))
        self.blocks = nn.Sequential(*[_Block(width, heads, 4) for _ in range(depth)])
        self.norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocab)

    def forward(self, tokens: Tensor) -> Tensor:
        x = self.norm(self.blocks(self.embed(tokens) + self.pos))
        out: Tensor = self.head(x)
        return out.flatten(0, 1)


class LSTMLanguageModel(nn.Module):
    """Zaremba et al. 2014 word-level LM; ``width`` is embedding and hidden size."""

    def __init__(self, depth: int = 2, width: int = 650, vocab: int = 33278) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.lstm = nn.LSTM(width, width, num_layers=depth, batch_first=True)
        self.head = nn.Linear(width, vocab)

    def forward(self, tokens: Tensor) -> Tensor:
        out, _ = self.lstm(self.embed(tokens))
        logits: Tensor = self.head(out)
        return logits.flatten(0, 1)
