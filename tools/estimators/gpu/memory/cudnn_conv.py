"""cuDNN's convolution workspaces, which the CPU trace does not see.

Every cuDNN convolution (forward, and the backward's data and weight parts) may take a
workspace from the caching allocator for the length of the call: how much depends on
the algorithm cuDNN's heuristics pick for the shapes and the GPU (PyTorch's default,
``cudnn.benchmark`` off), which no trace on a CPU can know. Measured on an H100, the
white-box peak of small convolutional networks was short by 4-125 MiB where every other
family matched (VGG-16 width 32 at batch 64: 154 MiB against 279).

The approximation: a transient of half the convolution's ``im2col`` buffer (batch x input
channels per group x kernel area x output pixels x element size), at most 64 MiB, given
back when the call ends. Both numbers were chosen on the first H100 machine's 203 rows
(a grid of 0.25-2 x and caps of 64 MiB, 256 MiB and none; docs/notebooks/estimators.md)
and checked on the second machine's 196: within 3% of ``max_memory_allocated`` on 159
rows against 152 without it. Other GPUs' cuDNN may pick other algorithms; the cap bounds
what a wrong guess can add.
"""

from __future__ import annotations

from torch import Tensor

__all__ = ["WORKSPACE_CAP_BYTES", "WORKSPACE_SHARE", "conv_workspace_bytes"]

#: Share of the im2col buffer taken as the call's workspace.
WORKSPACE_SHARE = 0.5
#: The most one call is taken to hold.
WORKSPACE_CAP_BYTES = 64 << 20


def conv_workspace_bytes(x: Tensor, weight: Tensor, out: Tensor, groups: int) -> int:
    """The workspace one 2-D convolution call is taken to hold (0 for other ranks)."""
    if x.dim() != 4 or weight.dim() != 4 or out.dim() != 4:
        return 0
    kernel = weight.shape[2] * weight.shape[3]
    im2col = (
        x.shape[0] * (x.shape[1] // max(groups, 1)) * kernel * out.shape[2] * out.shape[3]
    ) * x.element_size()
    return int(min(WORKSPACE_SHARE * im2col, WORKSPACE_CAP_BYTES))
