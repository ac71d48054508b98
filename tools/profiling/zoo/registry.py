"""The families of the zoo: how to build each, feed it, and which configurations exist.

A family maps architecture parameters (``depth``, ``width``, ``image_size``...) to a
model and a synthetic batch. ``space`` lists the values a sweep samples; ``named``
maps the well-known models (resnet50, vgg16...) to their full-size parameters, which
is how the planner's workload names reach the zoo.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Literal

import torch
from torch import Tensor, nn

from tools.profiling.zoo.language import DecoderLM, RecurrentLM
from tools.profiling.zoo.sequence import LSTMLanguageModel, TransformerLM, ViT
from tools.profiling.zoo.tabular import DLRM, MLP
from tools.profiling.zoo.vision import VGG, MobileNetV2, ResNet

__all__ = [
    "FAMILIES",
    "Family",
    "LossKind",
    "Params",
    "TrainingTask",
    "family",
    "named_model",
]

Params = dict[str, int]
LossKind = Literal["cross_entropy", "bce_logits", "mse"]


@dataclass(frozen=True, slots=True)
class TrainingTask:
    """What one training step needs: a model, a batch, and the loss between them."""

    model: nn.Module
    inputs: tuple[Tensor, ...]
    targets: Tensor
    loss: LossKind = "cross_entropy"
    criterion: Callable[[Tensor, Tensor], Tensor] | None = None  # a model file's own loss

    def loss_value(self, outputs: Tensor) -> Tensor:
        return (self.criterion or loss_fn(self.loss))(outputs, self.targets)


def loss_fn(kind: LossKind) -> Callable[[Tensor, Tensor], Tensor]:
    if kind == "bce_logits":
        return nn.functional.binary_cross_entropy_with_logits
    if kind == "mse":
        return nn.functional.mse_loss
    return nn.functional.cross_entropy


@dataclass(frozen=True, slots=True)
class Family:
    """A family of architectures and the configuration space a sweep samples."""

    name: str
    kind: Literal["image", "sequence", "tabular"]
    build: Callable[[Params], nn.Module]
    batch: Callable[[Params, int], tuple[tuple[Tensor, ...], Tensor]]
    space: Mapping[str, tuple[int, ...]]
    batch_sizes: tuple[int, ...]
    loss: LossKind = "cross_entropy"
    named: Mapping[str, Params] = field(default_factory=dict)

    def task(self, params: Params, batch_size: int) -> TrainingTask:
        """The model and a synthetic batch for ``params``; raises ValueError on bad params."""
        unknown = set(params) - set(self.space)
        if unknown:
            raise ValueError(f"{self.name}: unknown parameters {sorted(unknown)}")
        full = {**self.defaults(), **params}
        inputs, targets = self.batch(full, batch_size)
        return TrainingTask(self.build(full), inputs, targets, self.loss)

    def defaults(self) -> Params:
        return {name: values[len(values) // 2] for name, values in self.space.items()}

    def sample(self, rng: random.Random) -> tuple[Params, int]:
        """One architecture and batch size drawn uniformly from the space."""
        params = {name: rng.choice(values) for name, values in self.space.items()}
        return params, rng.choice(self.batch_sizes)


def _images(params: Params, batch_size: int) -> tuple[tuple[Tensor, ...], Tensor]:
    side = params["image_size"]
    inputs = torch.randn(batch_size, 3, side, side)
    return (inputs,), torch.randint(0, params.get("num_classes", 10), (batch_size,))


def _tokens(params: Params, batch_size: int) -> tuple[tuple[Tensor, ...], Tensor]:
    shape = (batch_size, params["seq_len"])
    vocab = params["vocab"]
    return (torch.randint(0, vocab, shape),), torch.randint(0, vocab, shape).flatten()


def _features(params: Params, batch_size: int) -> tuple[tuple[Tensor, ...], Tensor]:
    inputs = torch.randn(batch_size, params["features"])
    return (inputs,), torch.randint(0, params["num_classes"], (batch_size,))


def _clicks(params: Params, batch_size: int) -> tuple[tuple[Tensor, ...], Tensor]:
    dense = torch.randn(batch_size, 13)
    sparse = torch.randint(0, params["rows"], (batch_size, params["tables"]))
    return (dense, sparse), torch.randint(0, 2, (batch_size,)).float()


_IMAGE_BATCHES = (4, 8, 16, 32, 64)
# Word-level vocabularies, from a small corpus (2k) to GPT-2's BPE (50k).
_VOCABS = (2000, 5000, 10000, 20000, 50000)

FAMILIES: dict[str, Family] = {
    f.name: f
    for f in (
        Family(
            name="resnet",
            kind="image",
            build=lambda p: ResNet(p["depth"], p["width"], p["image_size"], p["num_classes"]),
            batch=_images,
            space={
                "depth": (10, 18, 26, 34),
                "width": (8, 12, 16, 24, 32),
                "image_size": (32, 48, 64),
                "num_classes": (10, 100),
            },
            batch_sizes=_IMAGE_BATCHES,
            named={
                "resnet18": {"depth": 18, "width": 64, "image_size": 224, "num_classes": 1000},
                "resnet34": {"depth": 34, "width": 64, "image_size": 224, "num_classes": 1000},
            },
        ),
        Family(
            name="resnet_bottleneck",
            kind="image",
            build=lambda p: ResNet(
                p["depth"], p["width"], p["image_size"], p["num_classes"], bottleneck=True
            ),
            batch=_images,
            space={
                "depth": (26, 38, 50),
                "width": (8, 12, 16, 24),
                "image_size": (32, 48, 64),
                "num_classes": (10, 100),
            },
            batch_sizes=_IMAGE_BATCHES,
            named={
                "resnet50": {"depth": 50, "width": 64, "image_size": 224, "num_classes": 1000},
                "resnet101": {"depth": 101, "width": 64, "image_size": 224, "num_classes": 1000},
            },
        ),
        Family(
            name="vgg",
            kind="image",
            build=lambda p: VGG(
                p["depth"], p["width"], p["image_size"], p["num_classes"], p["hidden"]
            ),
            batch=_images,
            space={
                "depth": (11, 13, 16, 19),
                "width": (8, 12, 16, 24, 32),
                "image_size": (32, 48, 64),
                "hidden": (128, 256, 512),
                "num_classes": (10, 100),
            },
            batch_sizes=_IMAGE_BATCHES,
            named={
                "vgg11": {
                    "depth": 11,
                    "width": 64,
                    "image_size": 224,
                    "hidden": 4096,
                    "num_classes": 1000,
                },
                "vgg16": {
                    "depth": 16,
                    "width": 64,
                    "image_size": 224,
                    "hidden": 4096,
                    "num_classes": 1000,
                },
            },
        ),
        Family(
            name="mobilenet_v2",
            kind="image",
            build=lambda p: MobileNetV2(p["width"], p["depth"], p["image_size"], p["num_classes"]),
            batch=_images,
            space={
                "width": (25, 35, 50, 75, 100),
                "depth": (50, 75, 100),
                "image_size": (32, 48, 64, 96),
                "num_classes": (10, 100),
            },
            batch_sizes=_IMAGE_BATCHES,
            named={
                "mobilenet_v2": {"width": 100, "depth": 100, "image_size": 224, "num_classes": 1000}
            },
        ),
        Family(
            name="vit",
            kind="image",
            build=lambda p: ViT(
                p["depth"],
                p["width"],
                p["image_size"],
                p["patch"],
                p["width"] // 32,
                p["num_classes"],
            ),
            batch=_images,
            space={
                "depth": (2, 4, 6, 8),
                "width": (64, 96, 128, 192),
                "image_size": (32, 64),
                "patch": (4, 8),
                "num_classes": (10, 100),
            },
            batch_sizes=_IMAGE_BATCHES,
            named={
                # DeiT-S has 6 heads of 64; width // 32 gives 12 heads of 32: same FLOPs.
                "vit_small": {
                    "depth": 12,
                    "width": 384,
                    "image_size": 224,
                    "patch": 16,
                    "num_classes": 1000,
                }
            },
        ),
        Family(
            name="transformer",
            kind="sequence",
            build=lambda p: TransformerLM(
                p["depth"], p["width"], p["seq_len"], p["vocab"], max(1, p["width"] // 32)
            ),
            batch=_tokens,
            space={
                "depth": (1, 2, 3, 4),
                "width": (64, 128, 192, 256),
                "seq_len": (32, 64, 128),
                "vocab": (1000, 4000, 8000),
            },
            batch_sizes=(4, 8, 16, 32),
            named={
                "transformer": {"depth": 6, "width": 512, "seq_len": 128, "vocab": 32000},
                "bert_base": {"depth": 12, "width": 768, "seq_len": 128, "vocab": 30522},
            },
        ),
        Family(
            name="lstm",
            kind="sequence",
            build=lambda p: LSTMLanguageModel(p["depth"], p["width"], p["vocab"]),
            batch=_tokens,
            space={
                "depth": (1, 2, 3),
                "width": (64, 128, 256, 384),
                "seq_len": (16, 32, 64),
                "vocab": (1000, 4000, 8000),
            },
            batch_sizes=(4, 8, 16, 32),
            named={"lstm": {"depth": 2, "width": 650, "seq_len": 35, "vocab": 33278}},
        ),
        Family(
            name="rnn_lm",
            kind="sequence",
            build=lambda p: RecurrentLM(
                p["vocab"], p["embed"], p["hidden"], p["depth"], tied=bool(p["tied"])
            ),
            batch=_tokens,
            space={
                "vocab": _VOCABS,
                "embed": (64, 128, 256),
                "hidden": (128, 256, 512),
                "depth": (1, 2, 3),
                "seq_len": (16, 32, 64),
                "tied": (0, 1),
            },
            batch_sizes=(4, 8, 16, 32),
            named={
                "awd_lstm_small": {
                    "vocab": 10000,
                    "embed": 400,
                    "hidden": 1150,
                    "depth": 3,
                    "seq_len": 70,
                    "tied": 1,
                }
            },
        ),
        Family(
            name="gpt",
            kind="sequence",
            build=lambda p: DecoderLM(
                p["vocab"], p["width"], p["depth"], p["seq_len"], tied=bool(p["tied"])
            ),
            batch=_tokens,
            space={
                "vocab": _VOCABS,
                "width": (64, 128, 192, 256),
                "depth": (1, 2, 4, 6),
                "seq_len": (32, 64, 128, 256),
                "tied": (0, 1),
            },
            batch_sizes=(4, 8, 16, 32),
            named={
                "gpt2_small": {
                    "vocab": 50257,
                    "width": 768,
                    "depth": 12,
                    "seq_len": 1024,
                    "tied": 1,
                }
            },
        ),
        Family(
            name="mlp",
            kind="tabular",
            build=lambda p: MLP(p["depth"], p["width"], p["features"], p["num_classes"]),
            batch=_features,
            space={
                "depth": (2, 3, 4, 6, 8),
                "width": (128, 256, 512, 1024, 2048),
                "features": (256, 784, 1024, 3072),
                "num_classes": (10, 100),
            },
            batch_sizes=(16, 32, 64, 128, 256, 512),
            named={"mlp": {"depth": 3, "width": 1024, "features": 784, "num_classes": 10}},
        ),
        Family(
            name="dlrm",
            kind="tabular",
            build=lambda p: DLRM(p["depth"], p["width"], p["tables"], p["rows"], 13, p["hidden"]),
            batch=_clicks,
            space={
                "depth": (1, 2, 3),
                "width": (16, 32, 64),
                "tables": (4, 8, 16, 26),
                "rows": (1000, 5000, 20000),
                "hidden": (128, 256, 512),
            },
            batch_sizes=(64, 128, 256, 512, 1024),
            loss="bce_logits",
            named={
                "dlrm": {"depth": 2, "width": 64, "tables": 26, "rows": 100000, "hidden": 512},
                "recommendation": {
                    "depth": 2,
                    "width": 64,
                    "tables": 26,
                    "rows": 100000,
                    "hidden": 512,
                },
            },
        ),
    )
}


def family(name: str) -> Family:
    """The family called ``name``; raises KeyError naming the known ones."""
    try:
        return FAMILIES[name]
    except KeyError:
        raise KeyError(f"family={name!r} is not one of {sorted(FAMILIES)}") from None


def _key(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower())


def named_model(name: str) -> tuple[Family, Params] | None:
    """The family and full-size parameters of a well-known model ("ResNet-50" is resnet50)."""
    wanted = _key(name)
    for fam in FAMILIES.values():
        for model, params in fam.named.items():
            if _key(model) == wanted:
                return fam, dict(params)
    return None
