"""The language-model families: a logit per token over the whole vocabulary, tied
decoders sharing the embedding, causal attention, and the head's work counted."""

from __future__ import annotations

import pytest
import torch

from tools.profiling.counting import count_training_flops, parameter_count
from tools.profiling.zoo import family, named_model

_RNN = {"vocab": 2000, "embed": 64, "hidden": 128, "depth": 1, "seq_len": 16}
_GPT = {"vocab": 2000, "width": 64, "depth": 1, "seq_len": 32}


@pytest.mark.parametrize(("name", "params"), [("rnn_lm", _RNN), ("gpt", _GPT)])
def test_a_language_model_gives_a_logit_per_token_over_the_vocabulary(
    name: str, params: dict[str, int]
) -> None:
    task = family(name).task({**params, "tied": 1}, batch_size=4)
    logits = task.model(*task.inputs)
    assert logits.shape == (4 * params["seq_len"], params["vocab"])
    assert task.targets.shape == (4 * params["seq_len"],)
    assert torch.isfinite(task.loss_value(logits))


@pytest.mark.parametrize(
    ("name", "params", "extra"),
    [
        # untied: a hidden -> vocab decoder instead of the hidden -> embed projection
        ("rnn_lm", _RNN, 2000 * 128 - (128 * 64 + 64)),
        ("gpt", _GPT, 2000 * 64),  # untied: a width -> vocab head of its own
    ],
)
def test_a_tied_decoder_shares_the_embedding_weight(
    name: str, params: dict[str, int], extra: int
) -> None:
    tied = family(name).task({**params, "tied": 1}, 2).model
    untied = family(name).task({**params, "tied": 0}, 2).model
    assert parameter_count(untied) - parameter_count(tied) == extra


def test_the_decoder_attends_only_to_earlier_tokens() -> None:
    torch.manual_seed(0)
    model = family("gpt").task(_GPT, 1).model.eval()
    tokens = torch.randint(0, _GPT["vocab"], (1, _GPT["seq_len"]))
    changed = tokens.clone()
    changed[0, -1] = (changed[0, -1] + 1) % _GPT["vocab"]
    with torch.no_grad():
        before, after = model(tokens), model(changed)
    torch.testing.assert_close(before[:-1], after[:-1])
    assert not torch.allclose(before[-1], after[-1])


@pytest.mark.parametrize(("name", "params"), [("rnn_lm", _RNN), ("gpt", _GPT)])
def test_the_projection_over_every_token_is_most_of_the_work_at_a_large_vocabulary(
    name: str, params: dict[str, int]
) -> None:
    small = count_training_flops(family(name).task({**params, "vocab": 2000}, 4))
    large = count_training_flops(family(name).task({**params, "vocab": 50000}, 4))
    assert large > 10 * small


def test_gpt2_small_resolves_to_the_decoder_family() -> None:
    found = named_model("GPT2-small")
    assert found is not None
    fam, params = found
    assert fam.name == "gpt" and params["vocab"] == 50257 and params["tied"] == 1
