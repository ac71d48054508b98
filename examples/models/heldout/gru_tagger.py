"""Held-out family (not in the zoo): a bidirectional GRU sequence tagger.

Token ids -> embedding -> bidirectional GRU -> a label per token. The zoo has an
LSTM language model, no GRU and no tagger. Used by ``benchmarks/cpu_opcost.py``.

    rightsize estimate --model-file examples/models/heldout/gru_tagger.py \\
        --model-class GRUTagger --batch-size 16 --epochs 1 --samples 1000
"""

import torch
from torch import nn

VOCAB, LABELS, SEQ_LEN = 5000, 17, 24


class GRUTagger(nn.Module):
    def __init__(self, dim: int = 96, hidden: int = 128) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, dim)
        self.gru = nn.GRU(dim, hidden, num_layers=1, batch_first=True, bidirectional=True)
        self.drop = nn.Dropout(0.1)
        self.out = nn.Linear(2 * hidden, LABELS)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        states, _ = self.gru(self.embed(tokens))
        return self.out(self.drop(states)).flatten(0, 1)


def example_batch(batch_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    tokens = torch.randint(0, VOCAB, (batch_size, SEQ_LEN))
    return tokens, torch.randint(0, LABELS, (batch_size * SEQ_LEN,))
