"""Word-level language models over large vocabularies, as a center's users train them.

Two families: a recurrent LM (embedding, dropout, stacked LSTM, an optional projection
back to the embedding size, and a decoder over every token whose weight may be tied to
the embedding's) and a small GPT-style decoder (learned positions, pre-norm blocks with
causal attention, a final norm and a head tied to the token embedding). Most of their
work and memory is the output projection: logits of (batch x tokens, vocab) and their
gradient, with a per-token cross-entropy against flattened targets, as the registry's
``_tokens`` batch gives. Weight tying is a parameter (0 or 1) because it halves the
parameters and optimizer state of the largest layer.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = ["DecoderLM", "RecurrentLM"]


class RecurrentLM(nn.Module):
    """Embedding, stacked LSTM and a vocabulary decoder; ``tied`` shares the decoder's
    weight with the embedding (Press & Wolf 2017), through a projection when ``hidden``
    differs from ``embed``."""

    def __init__(
        self,
        vocab: int,
        embed: int,
        hidden: int,
        depth: int,
        tied: bool = True,
        dropout: float = 0.2,
    ) -> None:
        super().__init__()
        self.tied = tied
        self.embed = nn.Embedding(vocab, embed)
        self.drop = nn.Dropout(dropout)
        self.rnn = nn.LSTM(
            embed, hidden, num_layers=depth, batch_first=True, dropout=dropout if depth > 1 else 0.0
        )
        out_size = embed if tied else hidden
        self.down = nn.Linear(hidden, embed) if tied and hidden != embed else None
        self.bias = nn.Parameter(torch.zeros(vocab))
        self.decoder = None if tied else nn.Linear(out_size, vocab, bias=False)

    def forward(self, tokens: Tensor) -> Tensor:
        states, _ = self.rnn(self.drop(self.embed(tokens)))
        states = self.drop(states)
        if self.down is not None:
            states = self.down(states)
        weight = self.embed.weight if self.decoder is None else self.decoder.weight
        logits: Tensor = F.linear(states, weight, self.bias)
        return logits.flatten(0, 1)


class _CausalBlock(nn.Module):
    def __init__(self, width: int, heads: int, dropout: float) -> None:
        super().__init__()
        self.heads = heads
        self.norm1 = nn.LayerNorm(width)
        self.qkv = nn.Linear(width, 3 * width)
        self.out = nn.Linear(width, width)
        self.norm2 = nn.LayerNorm(width)
        self.up = nn.Linear(width, 4 * width)
        self.down = nn.Linear(4 * width, width)
        self.drop = nn.Dropout(dropout)

    def forward(self, x: Tensor) -> Tensor:
        batch, tokens, width = x.shape
        qkv = self.qkv(self.norm1(x)).view(batch, tokens, 3, self.heads, width // self.heads)
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)
        attended = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.drop(self.out(attended.transpose(1, 2).reshape(batch, tokens, width)))
        out: Tensor = x + self.drop(self.down(F.gelu(self.up(self.norm2(x)))))
        return out


class DecoderLM(nn.Module):
    """A GPT-style decoder (Radford et al. 2019, small): ``width // 64`` heads (at least
    one), a head tied to the token embedding when ``tied``."""

    def __init__(
        self,
        vocab: int,
        width: int,
        depth: int,
        seq_len: int,
        tied: bool = True,
        dropout: float = 0.1,
    ) -> None:
        super().__init__()
        self.tokens = nn.Embedding(vocab, width)
        self.positions = nn.Parameter(torch.zeros(1, seq_len, width))
        self.drop = nn.Dropout(dropout)
        self.blocks = nn.Sequential(
            *[_CausalBlock(width, max(1, width // 64), dropout) for _ in range(depth)]
        )
        self.norm = nn.LayerNorm(width)
        self.head = None if tied else nn.Linear(width, vocab, bias=False)
        nn.init.normal_(self.tokens.weight, std=0.02)  # GPT-2's; N(0, 1) would saturate

    def forward(self, tokens: Tensor) -> Tensor:
        x = self.drop(self.tokens(tokens) + self.positions[:, : tokens.shape[1]])
        x = self.norm(self.blocks(x))
        weight = self.tokens.weight if self.head is None else self.head.weight
        logits: Tensor = F.linear(x, weight)
        return logits.flatten(0, 1)
