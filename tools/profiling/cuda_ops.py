"""Operators as a GPU runs them, for steps traced on the CPU.

Some PyTorch functions take another path on CUDA than on the CPU, with other kernels and
other tensors saved for the backward. The GPU estimators trace on fake CPU tensors, so
where the difference matters they make the CPU trace take the CUDA path.

``FusedDropout``: on the CPU ``nn.functional.dropout`` draws a noise tensor of the input's
dtype (``bernoulli_``), scales it (``div_``) and multiplies (three kernels; autograd saves
the noise, four bytes an element in FP32); on CUDA it is one fused kernel,
``native_dropout``, saving a one-byte mask, and its backward one ``native_dropout_backward``
(``aten/src/ATen/native/Dropout.cpp``: ``is_fused_kernel_acceptable``). Under this mode a
non-in-place dropout in training runs ``native_dropout`` (which has a CPU kernel too).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.overrides import TorchFunctionMode

__all__ = ["FusedDropout"]

_DROPOUT_ARGS = ("input", "p", "training", "inplace")


class FusedDropout(TorchFunctionMode):
    """Every non-in-place ``nn.functional.dropout`` in training as CUDA's fused kernel."""

    def __torch_function__(
        self,
        func: Any,
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        kwargs = kwargs or {}
        if func is nn.functional.dropout:
            given = {**dict(zip(_DROPOUT_ARGS, args, strict=False)), **kwargs}
            p, training = given.get("p", 0.5), given.get("training", True)
            if training and 0 < p < 1 and not given.get("inplace", False):
                return torch.native_dropout(given["input"], p, True)[0]
        return func(*args, **kwargs)
