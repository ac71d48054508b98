"""The model zoo: every family builds, trains a step, and names resolve."""

from __future__ import annotations

import random

import pytest
import torch

from tools.profiling.counting import count_training_flops, parameter_count, training_step
from tools.profiling.zoo import FAMILIES, family, named_model


def _smallest(name: str) -> dict[str, int]:
    return {k: min(v) for k, v in FAMILIES[name].space.items()}


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_every_family_trains_one_step_at_its_smallest_configuration(name: str) -> None:
    torch.manual_seed(0)
    task = FAMILIES[name].task(_smallest(name), batch_size=4)
    optimizer = torch.optim.SGD(task.model.parameters(), lr=0.01)
    loss = training_step(task, optimizer)
    assert torch.isfinite(loss)
    assert parameter_count(task.model) > 0
    assert count_training_flops(task) > 0


def test_unknown_parameters_are_refused_by_name() -> None:
    with pytest.raises(ValueError, match="colour"):
        family("mlp").task({"colour": 3}, 4)


def test_an_unknown_family_names_the_known_ones() -> None:
    with pytest.raises(KeyError, match="resnet"):
        family("alexnet")


@pytest.mark.parametrize(
    ("name", "expected_family", "depth"),
    [("ResNet-50", "resnet_bottleneck", 50), ("resnet18", "resnet", 18), ("VGG-16", "vgg", 16)],
)
def test_well_known_names_resolve_to_full_size_parameters(
    name: str, expected_family: str, depth: int
) -> None:
    found = named_model(name)
    assert found is not None
    fam, params = found
    assert fam.name == expected_family and params["depth"] == depth


def test_the_zoo_has_hundreds_of_distinct_architectures() -> None:
    rng = random.Random(0)
    seen = {
        (n, tuple(sorted(f.sample(rng)[0].items()))) for n, f in FAMILIES.items() for _ in range(60)
    }
    assert len(seen) > 300
    assert len(FAMILIES) >= 9


def test_the_lstm_counts_its_recurrent_flops() -> None:
    task = family("lstm").task({"depth": 1, "width": 64, "seq_len": 16, "vocab": 1000}, 4)
    # 2 FLOPs per multiply-add x 4 gates x (input + hidden) x hidden per token, x3 for training
    recurrent = 3 * 2 * 4 * 16 * 4 * (64 + 64) * 64
    assert count_training_flops(task) >= recurrent
