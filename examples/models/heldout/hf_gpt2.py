"""Held-out family (not in the zoo): a Hugging Face GPT-2 built from a config.

``transformers``' own GPT-2 (random weights, nothing downloaded): 4 layers, 256 wide,
4 heads, a 4096-token vocabulary, 64-token sequences; its Conv1D projections, tanh GELU
and attention are not the zoo's Transformer LM. Used by ``benchmarks/cpu_opcost.py``.

    rightsize estimate --model-file examples/models/heldout/hf_gpt2.py \\
        --model-class TinyGPT2 --batch-size 4 --epochs 1 --samples 1000
"""

import torch
from torch import nn
from transformers import GPT2Config, GPT2LMHeadModel

VOCAB, SEQ_LEN = 4096, 64


class TinyGPT2(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        config = GPT2Config(
            vocab_size=VOCAB,
            n_positions=SEQ_LEN,
            n_embd=256,
            n_layer=4,
            n_head=4,
            bos_token_id=0,
            eos_token_id=0,
            attn_implementation="eager",
        )
        self.model = GPT2LMHeadModel(config)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids=tokens, use_cache=False).logits.flatten(0, 1)


def example_batch(batch_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    tokens = torch.randint(0, VOCAB, (batch_size, SEQ_LEN))
    return tokens, torch.randint(0, VOCAB, (batch_size * SEQ_LEN,))
