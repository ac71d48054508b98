"""Held out (issue 40): a user's 2-layer LSTM word language model.

Hidden 512, a 10k-word vocabulary, 35 tokens per sequence; the output projection runs
over every token and ``example_batch`` returns its own per-token cross-entropy. Never
used for fitting: ``benchmarks/heldout_models.py`` measures it against the estimate.

    rightsize estimate --model-file examples/models/unseen/lstm_lm.py \\
        --model-class LSTMWordLM --batch-size 32 --epochs 1 --samples 1000
"""

import torch
from torch import Tensor, nn

VOCAB, HIDDEN, SEQ_LEN = 10_000, 512, 35


class LSTMWordLM(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, HIDDEN)
        self.drop = nn.Dropout(0.2)
        self.lstm = nn.LSTM(HIDDEN, HIDDEN, num_layers=2, batch_first=True, dropout=0.2)
        self.decoder = nn.Linear(HIDDEN, VOCAB)

    def forward(self, tokens: Tensor) -> Tensor:
        states, _ = self.lstm(self.drop(self.embed(tokens)))
        return self.decoder(self.drop(states))


def token_loss(logits: Tensor, targets: Tensor) -> Tensor:
    return nn.functional.cross_entropy(logits.reshape(-1, VOCAB), targets.reshape(-1))


def example_batch(batch_size: int) -> tuple[Tensor, Tensor, object]:
    tokens = torch.randint(0, VOCAB, (batch_size, SEQ_LEN + 1))
    return tokens[:, :-1], tokens[:, 1:], token_loss
