"""What the analytic fallback knows about well-known models: size, FLOPs, activations.

Each entry is per sample at a reference input, from the literature (sources inline).
FLOPs are true floating-point operations (2 x multiply-accumulates; papers that say
"FLOPs" for ResNets and ViTs count multiply-adds, so their figures are doubled here).
Training costs 3x the forward pass (backward ~ 2x forward; Kaplan et al. 2020, "Scaling
Laws for Neural Language Models", section 2.1).

Activation memory is what training keeps for the backward pass, in FP32, per sample.
No paper tabulates it for every model, so it is estimated and documented per entry:
convolutional nets from the feature-map elements their layer shapes give (about two
saved tensors per conv layer with batch norm and in-place ReLU, one without batch norm,
x 4 bytes, x 1.15 for allocator slack), checked for ResNet-50 against Gavel's measured
out-of-memory boundary (batch 128 fails on a 12 GB K80, runs on a 16 GB P100: 85-120 MB
per sample); transformers from Korthikanti et al. 2022 ("Reducing Activation
Recomputation in Large Transformer Models", eq. 1: s*h*(34 + 5*a*s/h) bytes per layer
in 16-bit), doubled for FP32. The analytic estimate's memory interval is wide for this
reason.

On a GPU, what a training step needs per sample is more than what it keeps for the
backward pass, and the estimates above miss it both ways (white-box/analytic per-sample
growth 0.65-2.28 on a V100): the backward pass holds each layer's output gradient beside
the saved tensors (cross-entropy over the LSTM's 33,278-word vocabulary alone keeps the
logits, their log-softmax and its gradient: 14 MB a sample against the 10 MB counted),
max pooling saves int64 indices and dropout its masks (VGG), the transformers' fused
attention keeps no s x s scores (Korthikanti's count has them: ViT-S and the Transformer
were over-counted by 1.4-1.6x), and PyTorch's caching allocator reserves more than it
hands out where a step's tensors are few and of many sizes: at large batches VGG-11
reserves 2.0x, VGG-16 1.7x, ResNet-18 1.4x the bytes allocated per sample, the others
1.03-1.25x (freed blocks of one size cannot serve the next, larger request; the segments
stay). ``gpu_sample`` holds, per sample, what the allocator hands out and what it holds,
FP32 and AMP, counted from the zoo model's own step: the growth of the white-box peaks
(fake-tensor trace, caching allocator replay; ``python benchmarks/white_box_ratio.py
--facts``) between batch 256 and 512, SGD (Adam's are the same within 0.1 MiB). Under
AMP a sample needs 0.45-0.58 of FP32 for the CNNs and ViT but 0.74 (BERT), 0.82
(Transformer) and 0.99 (LSTM), where a flat half would miss. The analytic GPU memory
uses them where a model has them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from knowledge_base.errors import InvalidInputError

__all__ = ["ZOO", "GpuSample", "ModelFacts", "check_input_shape", "lookup", "zoo_names"]


@dataclass(frozen=True, slots=True)
class GpuSample:
    """MiB per sample at a training step's peak on a GPU, at the reference input: what
    PyTorch's caching allocator hands out (allocated) and holds (reserved), in FP32 and
    under AMP (fp16 autocast). Counted from the zoo model's own step (see the module
    docstring; ``python benchmarks/white_box_ratio.py --facts``)."""

    allocated_mib: float
    reserved_mib: float
    amp_allocated_mib: float
    amp_reserved_mib: float


@dataclass(frozen=True, slots=True)
class ModelFacts:
    """One model at its reference input."""

    name: str
    family: Literal["image", "sequence"]
    parameters: int
    forward_flops: float  # per sample, at reference_input
    activation_mb: float  # FP32, kept for backward, per sample, at reference_input
    reference_input: tuple[int, ...]  # (C, H, W) for images, (tokens,) for sequences
    source: str
    aliases: tuple[str, ...] = ()
    gpu_sample: GpuSample | None = None  # None: activation_mb stands in on GPUs


ZOO: tuple[ModelFacts, ...] = (
    ModelFacts(
        name="resnet18",
        family="image",
        parameters=11_689_512,  # torchvision resnet18 model card
        forward_flops=2 * 1.814e9,  # torchvision: 1.81 GMACs; He et al. 2016 Table 1: 1.8e9
        activation_mb=23.0,  # ~2.5 M feature-map elements x 2 tensors x 4 B x 1.15
        reference_input=(3, 224, 224),
        source="He et al., Deep Residual Learning, CVPR 2016, Table 1; torchvision",
        aliases=("resnet-18",),
        gpu_sample=GpuSample(21.3, 30.1, 12.0, 14.9),
    ),
    ModelFacts(
        name="resnet34",
        family="image",
        parameters=21_797_672,  # torchvision resnet34
        forward_flops=2 * 3.664e9,  # torchvision: 3.66 GMACs; He et al.: 3.6e9
        activation_mb=35.0,  # ~3.75 M elements x 2 x 4 B x 1.15
        reference_input=(3, 224, 224),
        source="He et al., CVPR 2016, Table 1; torchvision",
        aliases=("resnet-34",),
        gpu_sample=GpuSample(30.9, 39.6, 16.8, 19.6),
    ),
    ModelFacts(
        name="resnet50",
        family="image",
        parameters=25_557_032,  # torchvision resnet50
        forward_flops=2 * 4.089e9,  # torchvision: 4.09 GMACs; He et al.: 3.8e9
        activation_mb=98.0,  # ~10.65 M elements x 2 x 4 B x 1.15; Gavel OOM bound 85-120
        reference_input=(3, 224, 224),
        source="He et al., CVPR 2016, Table 1; torchvision; Gavel K80/P100 OOM boundary",
        aliases=("resnet-50", "rn50"),
        gpu_sample=GpuSample(82.7, 94.2, 42.6, 48.2),
    ),
    ModelFacts(
        name="vgg11",
        family="image",
        parameters=132_863_336,  # torchvision vgg11
        forward_flops=2 * 7.609e9,  # torchvision: 7.61 GMACs
        activation_mb=41.0,  # ~8.9 M elements x 1 tensor (no BN, in-place ReLU) x 4 B x 1.15
        reference_input=(3, 224, 224),
        source="Simonyan & Zisserman, ICLR 2015 (config A); torchvision",
        aliases=("vgg-11",),
        gpu_sample=GpuSample(47.3, 93.4, 29.7, 42.0),
    ),
    ModelFacts(
        name="vgg16",
        family="image",
        parameters=138_357_544,  # torchvision vgg16
        forward_flops=2 * 15.47e9,  # torchvision: 15.47 GMACs
        activation_mb=110.0,  # CS231n's count: ~24 M activations/image x 4 B x 1.15
        reference_input=(3, 224, 224),
        source="Simonyan & Zisserman, ICLR 2015 (config D); CS231n notes (VGGNet memory)",
        aliases=("vgg-16",),
        gpu_sample=GpuSample(70.2, 116.7, 41.3, 53.6),
    ),
    ModelFacts(
        name="mobilenet_v2",
        family="image",
        parameters=3_504_872,  # torchvision mobilenet_v2
        forward_flops=2 * 0.300e9,  # Sandler et al. 2018: 300 M multiply-adds
        activation_mb=75.0,  # ~5.5 M elements, expanded maps x ~3 tensors (BN, ReLU6) x 4 B
        reference_input=(3, 224, 224),
        source="Sandler et al., MobileNetV2, CVPR 2018, Table 3",
        aliases=("mobilenetv2", "mobilenet-v2"),
        gpu_sample=GpuSample(75.0, 82.4, 38.2, 41.7),
    ),
    ModelFacts(
        name="vit_small",
        family="image",
        parameters=22_050_664,  # DeiT-S / ViT-S/16
        forward_flops=2 * 4.6e9,  # Touvron et al. 2021 (DeiT) Table 1: 4.6 G (multiply-adds)
        activation_mb=90.0,  # Korthikanti eq. 1: s=197, h=384, a=6, 12 layers, x2 for FP32
        reference_input=(3, 224, 224),
        source="Touvron et al., DeiT, ICML 2021, Table 1; Korthikanti et al. 2022",
        aliases=("vit-s", "vit_s_16", "vits16", "deit_small", "deit-s"),
        gpu_sample=GpuSample(57.7, 59.4, 33.2, 33.2),
    ),
    ModelFacts(
        name="bert_base",
        family="sequence",
        parameters=110_000_000,  # Devlin et al. 2019: 110 M
        # Kaplan et al. 2020: 2N + 2*n_layer*n_ctx*d per token, N = 12*12*768^2 = 85 M
        # non-embedding parameters, 128 tokens: (170 M + 2.4 M) x 128.
        forward_flops=22.1e9,
        activation_mb=130.0,  # Korthikanti eq. 1: s=128, h=768, a=12, 12 layers, x2; + MLM logits
        reference_input=(128,),
        source="Devlin et al., BERT, NAACL 2019; Kaplan et al. 2020; Korthikanti et al. 2022",
        aliases=("bert", "bert-base", "bertbase", "bert_base_uncased"),
        gpu_sample=GpuSample(132.5, 147.5, 93.4, 108.7),
    ),
    ModelFacts(
        name="transformer",
        family="sequence",
        parameters=65_000_000,  # Vaswani et al. 2017 Table 3, base model: 65 M
        # ~44 M non-embedding parameters (encoder 19 M, decoder 25 M) and the 512 x 37 k
        # output projection, 2 FLOPs per parameter per token, 128 tokens a side.
        forward_flops=16.1e9,
        activation_mb=120.0,  # Korthikanti eq. 1, h=512, a=8, 6+6 layers, x2; + output logits
        reference_input=(128,),
        source="Vaswani et al., Attention Is All You Need, NeurIPS 2017 (base)",
        aliases=("transformer_base", "transformer-base"),
        gpu_sample=GpuSample(87.1, 102.7, 68.6, 84.7),
    ),
    ModelFacts(
        name="lstm",
        family="sequence",
        # Zaremba et al. 2014 "medium" LM on WikiText-2 (PyTorch word_language_model):
        # 2 layers x 650 units, 33,278-word vocabulary: embedding 21.6 M + LSTM 6.8 M +
        # decoder 21.7 M.
        parameters=50_100_000,
        forward_flops=1.99e9,  # 2 x (6.8 M + 21.6 M) per token x 35 tokens (BPTT)
        activation_mb=10.0,  # per token: gates, states, and 33 k logits + their gradient
        reference_input=(35,),
        source="Zaremba et al., Recurrent Neural Network Regularization, 2014 (medium)",
        aliases=("lstm_lm", "lstm-lm", "lm"),
        gpu_sample=GpuSample(18.1, 22.6, 15.7, 22.4),
    ),
)


def _key(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower())


_BY_KEY = {_key(alias): facts for facts in ZOO for alias in (facts.name, *facts.aliases)}


def lookup(model: str) -> ModelFacts | None:
    """The facts for a zoo name, ignoring case and punctuation ("ResNet-50" is resnet50)."""
    return _BY_KEY.get(_key(model))


def check_input_shape(model: str, input_shape: list[int]) -> None:
    """InvalidInputError (field ``workload.input_shape``) when a zoo model cannot take
    ``input_shape``: an image model takes (channels, height, width) with its own channels,
    a sequence model (tokens,). Before, such a shape was planned as another one: ResNet-50
    at [407, 574, 574] as 3 x 574 x 574, at [5] as its reference input."""
    facts = lookup(model)
    if facts is None or not input_shape:
        return
    reference = facts.reference_input
    if len(input_shape) != len(reference):
        words = "(channels, height, width)" if facts.family == "image" else "(tokens,)"
        raise InvalidInputError(
            f"{facts.name} takes an input of {words}, like {list(reference)}",
            field="workload.input_shape",
            value=input_shape,
        )
    if facts.family == "image" and input_shape[0] != reference[0]:
        raise InvalidInputError(
            f"{facts.name} takes {reference[0]} input channels, like {list(reference)}",
            field="workload.input_shape",
            value=input_shape,
        )


def zoo_names() -> list[str]:
    return [facts.name for facts in ZOO]
