"""Peak throughput and achieved efficiency of the hardware a center's nodes carry.

GPUs: the catalog holds each GPU's peak FP32 (``GPUSpec.fp32_tflops``); the fraction of
it a PyTorch training step reaches, and the fixed per-step overhead, are fitted on
Gavel's measured throughputs (``tools.planning.gavel_fit``; refit by the tests).

CPUs: the catalog names CPU models but not their clocks or vector widths, so the table
below maps model names to a base clock and FP32 FLOPs per cycle per core (2 FMA units x
vector lanes x 2), from the vendors' product pages. The efficiency a PyTorch CPU training
step reaches is an assumption, not a fit: 10% of that peak. Two observations bracket it:
a ResNet-style training step (conv + batch norm + ReLU, batch 16 at 224x224, SGD)
measured 14% of peak on this project's 2-core AVX-512 development machine (PyTorch
2.13, ``torch.utils.flop_counter`` for the FLOPs), and seed 001's figure (ResNet-50,
50 epochs of 20k images in about 9 h on one 48-core Pitzer node) implies about 9%. Wide
nodes scale worse than two cores, hence the lower figure.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from knowledge_base.catalog import GPUSpec, NodeType
from tools.estimators.gpu.specs import TENSOR_CORE_ARCHITECTURES, gpu_architecture

__all__ = [
    "AMP_SPEEDUP",
    "CPU_EFFICIENCY",
    "CPU_STEP_OVERHEAD_S",
    "GAVEL_FIT_K80_MAPE",
    "GAVEL_FIT_LOGO_MAPE",
    "GAVEL_FIT_MAPE",
    "GPU_EFFICIENCY",
    "GPU_STEP_OVERHEAD_S",
    "INTER_NODE_GBS",
    "CpuPeak",
    "cpu_peak",
    "gpu_link_gbs",
    "has_tensor_cores",
]

# Fitted by tools.planning.gavel_fit on 18 isolated single-GPU points (ResNet-50/ImageNet
# and ResNet-18/CIFAR-10 at batch 16-256 on P100 and V100).
GPU_EFFICIENCY = 0.6356
GPU_STEP_OVERHEAD_S = 0.0155
GAVEL_FIT_MAPE = 0.225  # in sample
GAVEL_FIT_LOGO_MAPE = 0.277  # the worse of the two leave-one-GPU-out errors
GAVEL_FIT_K80_MAPE = 0.607  # Kepler, left out of the fit: the model is not for old GPUs

# Mixed precision on tensor-core GPUs: NVIDIA reports 2-3x training speedups for ResNet-50
# over FP32 on V100 (Micikevicius et al., "Mixed Precision Training", ICLR 2018, and
# NVIDIA's DeepLearningExamples tables). An assumption: no Gavel point measures AMP.
AMP_SPEEDUP = 2.0

CPU_EFFICIENCY = 0.10
CPU_STEP_OVERHEAD_S = 0.05  # Python, optimizer step and data loading per step

# Gradient all-reduce bandwidth assumptions (GB/s, effective): PCIe 3.0 x16 between GPUs
# of one node, NVLink where the GPU model says so, and a 100 Gb/s fabric between nodes.
_PCIE_GBS = 10.0
_NVLINK_GBS = 50.0
INTER_NODE_GBS = 10.0


@dataclass(frozen=True, slots=True)
class CpuPeak:
    """Per-core FP32 peak of a CPU model, and where the figures came from."""

    clock_ghz: float
    flops_per_cycle: int
    source: str

    @property
    def gflops_per_core(self) -> float:
        return self.clock_ghz * self.flops_per_cycle


# (pattern on the catalog's cpu_model or node type name, peak). AVX-512 with two FMA
# units: 16 lanes x 2 x 2 = 64 FP32 FLOPs/cycle; AVX2 with two FMA units: 32; AMD Zen 4
# executes AVX-512 on 256-bit units: 32. Base clocks from Intel ARK / AMD product pages.
_CPU_TABLE: tuple[tuple[re.Pattern[str], CpuPeak], ...] = tuple(
    (re.compile(pattern, re.IGNORECASE), peak)
    for pattern, peak in (
        # Model numbers first: a name such as "8280 (Cascade Lake)" must match 8280.
        (r"8268", CpuPeak(2.9, 64, "Xeon Platinum 8268, AVX-512 x2 FMA")),
        (r"8280", CpuPeak(2.7, 64, "Xeon Platinum 8280, AVX-512 x2 FMA")),
        (r"8160", CpuPeak(2.1, 64, "Xeon Platinum 8160, AVX-512 x2 FMA")),
        (r"8380", CpuPeak(2.3, 64, "Xeon Platinum 8380, AVX-512 x2 FMA")),
        (r"6148", CpuPeak(2.4, 64, "Xeon Gold 6148, AVX-512 x2 FMA")),
        (r"7250", CpuPeak(1.4, 64, "Xeon Phi 7250, 2 AVX-512 VPUs")),
        (r"e5-2680", CpuPeak(2.4, 32, "Xeon E5-2680 v4, AVX2 x2 FMA")),
        (r"e5-2620", CpuPeak(2.1, 32, "Xeon E5-2620 v4, AVX2 x2 FMA")),
        (r"9454", CpuPeak(2.75, 32, "EPYC 9454 (Zen 4), AVX-512 on 256-bit units")),
        (r"7763", CpuPeak(2.45, 32, "EPYC 7763 (Zen 3), AVX2 x2 FMA")),
        (r"7643", CpuPeak(2.3, 32, "EPYC 7643 (Zen 3), AVX2 x2 FMA")),
        (r"7h12", CpuPeak(2.6, 32, "EPYC 7H12 (Zen 2), AVX2 x2 FMA")),
        # Then architecture names, at the catalog's most common part of that generation.
        (r"cascade ?lake", CpuPeak(2.9, 64, "Cascade Lake as the Xeon 8268, AVX-512 x2 FMA")),
        (r"ice ?lake", CpuPeak(2.3, 64, "Ice Lake as the Xeon 8380, AVX-512 x2 FMA")),
        (r"skylake", CpuPeak(2.4, 64, "Skylake as the Xeon 6148, AVX-512 x2 FMA")),
        (r"phi|knights|knl", CpuPeak(1.4, 64, "Knights Landing as the Xeon Phi 7250")),
        (r"broadwell", CpuPeak(2.4, 32, "Broadwell as the Xeon E5-2680 v4, AVX2 x2 FMA")),
        (r"genoa", CpuPeak(2.75, 32, "Genoa as the EPYC 9454")),
        (r"milan", CpuPeak(2.45, 32, "Milan as the EPYC 7763, AVX2 x2 FMA")),
        (r"epyc", CpuPeak(2.45, 32, "AMD EPYC (generation not stated), AVX2 x2 FMA")),
    )
)
_UNKNOWN_CPU = CpuPeak(2.4, 32, "CPU model unknown: assumed 2.4 GHz, AVX2 x2 FMA")


def cpu_peak(node_type: NodeType) -> CpuPeak:
    """The per-core peak for a node type, from its CPU model, else its name, else a default."""
    for text in (node_type.cpu_model, node_type.name):
        if not text:
            continue
        for pattern, peak in _CPU_TABLE:
            if pattern.search(text):
                return peak
    return _UNKNOWN_CPU


def has_tensor_cores(gpu: GPUSpec) -> bool:
    """A tensor-core peak in the catalog, else an architecture with tensor cores."""
    return (
        gpu.fp16_tensor_tflops is not None
        or gpu_architecture(gpu.model) in TENSOR_CORE_ARCHITECTURES
    )


def gpu_link_gbs(gpu: GPUSpec) -> float:
    """Effective all-reduce bandwidth between the GPUs of one node."""
    return _NVLINK_GBS if re.search(r"NVLink|SXM", gpu.model, re.IGNORECASE) else _PCIE_GBS
