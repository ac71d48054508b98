"""Held out (issue 40): a text classifier on ``nn.TransformerEncoder``.

Four ``nn.TransformerEncoderLayer`` (pre-norm, GELU, batch first; PyTorch's own layer,
whose attention is ``scaled_dot_product_attention``) over 64 tokens of a 16k-word
vocabulary with learned positions; mean pooling and a 20-class head.
"""

import torch
from torch import Tensor, nn

VOCAB, SEQ_LEN, DIM, CLASSES = 16_000, 64, 256, 20


class TextEncoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, DIM)
        self.position = nn.Parameter(torch.zeros(1, SEQ_LEN, DIM))
        layer = nn.TransformerEncoderLayer(
            DIM,
            nhead=4,
            dim_feedforward=4 * DIM,
            dropout=0.1,
            activation="gelu",
            batch_first=True,
            norm_first=True,
        )
        self.encoder = nn.TransformerEncoder(layer, num_layers=4, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(DIM)
        self.head = nn.Linear(DIM, CLASSES)

    def forward(self, tokens: Tensor) -> Tensor:
        x = self.encoder(self.embed(tokens) + self.position)
        return self.head(self.norm(x).mean(dim=1))


def example_batch(batch_size: int) -> tuple[Tensor, Tensor]:
    tokens = torch.randint(0, VOCAB, (batch_size, SEQ_LEN))
    return tokens, torch.randint(0, CLASSES, (batch_size,))
