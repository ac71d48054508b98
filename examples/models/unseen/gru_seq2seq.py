"""Held out (issue 40): a GRU encoder-decoder (sequence to sequence, teacher forcing).

A source sentence is encoded by a 2-layer GRU; its final state starts a 1-layer GRU
decoder fed the shifted target tokens, whose every state is projected over an 8k-word
target vocabulary; per-token cross-entropy from ``example_batch``.
"""

import torch
from torch import Tensor, nn

SRC_VOCAB, TGT_VOCAB, SRC_LEN, TGT_LEN, DIM, HIDDEN = 6000, 8000, 24, 20, 256, 384


class GRUSeq2Seq(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.src_embed = nn.Embedding(SRC_VOCAB, DIM)
        self.tgt_embed = nn.Embedding(TGT_VOCAB, DIM)
        self.encoder = nn.GRU(DIM, HIDDEN, num_layers=2, batch_first=True)
        self.decoder = nn.GRU(DIM, HIDDEN, num_layers=1, batch_first=True)
        self.out = nn.Linear(HIDDEN, TGT_VOCAB)

    def forward(self, source: Tensor, target_in: Tensor) -> Tensor:
        _, state = self.encoder(self.src_embed(source))
        states, _ = self.decoder(self.tgt_embed(target_in), state[-1:].contiguous())
        return self.out(states)


def token_loss(logits: Tensor, targets: Tensor) -> Tensor:
    return nn.functional.cross_entropy(logits.reshape(-1, TGT_VOCAB), targets.reshape(-1))


def example_batch(batch_size: int) -> tuple[tuple[Tensor, Tensor], Tensor, object]:
    source = torch.randint(0, SRC_VOCAB, (batch_size, SRC_LEN))
    target = torch.randint(0, TGT_VOCAB, (batch_size, TGT_LEN + 1))
    return (source, target[:, :-1]), target[:, 1:], token_loss
