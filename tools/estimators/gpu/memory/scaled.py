"""One model's allocation sequence for every batch size, from two traces.

Tracing a step on fake tensors takes seconds (ResNet-50: about 5 s here, 16 s for the
first trace of a process); replaying the caching allocator over it takes milliseconds.
A model's step allocates the same storages in the same order whatever the batch size;
only the sizes of the batch-dependent ones change, linearly in the batch. So
``ScalableSteps.trace`` records the step at two batch sizes (``BASE_BATCHES``), checks
that both allocate and free the same storages in the same order and that every size is
an affine function of the batch with a whole number of bytes a sample, and
``events(batch)`` gives the sequence at any batch size (tests compare it with a real
trace at other batch sizes). A model whose sequence differs between the two (control
flow on the batch size) is traced at each batch asked (``exact``).

DDP's gradient buckets (``estimate.DDP_BUCKET_MB``) are allocated before the first step
and depend on the parameters only: the trace marks where, and ``events(..., ddp=True)``
inserts them there, so a data-parallel option needs no trace of its own.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from torch import Tensor, nn

from tools.estimators.gpu.memory.allocator import MemoryEvent
from tools.estimators.gpu.memory.recorder import (
    Optimizer,
    Precision,
    StepRecorder,
    record_training_step,
)
from tools.profiling.zoo.registry import TrainingTask

__all__ = ["BASE_BATCHES", "ScalableSteps", "ddp_bucket_bytes"]

BASE_BATCHES = (2, 4)
_MIB = 1 << 20


def ddp_bucket_bytes(params: Sequence[nn.Parameter], bucket_mb: float) -> list[int]:
    """The sizes of DDP's gradient buckets (fp32, ``bucket_mb`` each, parameters in order)."""
    cap = int(bucket_mb * _MIB)
    sizes: list[int] = [0]
    for p in params:
        nbytes = p.numel() * p.element_size()
        if sizes[-1] and sizes[-1] + nbytes > cap:
            sizes.append(0)
        sizes[-1] += nbytes
    return [size // 4 * 4 for size in sizes if size]


@dataclass(frozen=True, slots=True)
class _Normal:
    """A trace with storage keys replaced by allocation ordinals (keys are addresses,
    reused after a free)."""

    ops: tuple[tuple[bool, int], ...]  # (is_alloc, ordinal)
    sizes: tuple[int, ...]  # by ordinal
    marker: int  # index in ops where setup ran (DDP buckets go there)
    buckets: tuple[int, ...]


def _record(
    build: Callable[[int], TrainingTask],
    batch: int,
    optimizer: Optimizer,
    precision: Precision,
    bucket_mb: float,
) -> _Normal:
    marked: dict[str, object] = {}

    def setup(recorder: StepRecorder, params: list[nn.Parameter]) -> list[Tensor]:
        marked["at"] = len(recorder.events)
        marked["buckets"] = tuple(ddp_bucket_bytes(params, bucket_mb))
        return []

    events = record_training_step(
        build(batch), optimizer=optimizer, precision=precision, setup=setup
    )
    ordinal_of: dict[int, int] = {}
    ops: list[tuple[bool, int]] = []
    sizes: list[int] = []
    marker = int(marked["at"])  # type: ignore[call-overload]
    for event in events:
        if event.action == "alloc":
            ordinal_of[event.key] = len(sizes)
            ops.append((True, len(sizes)))
            sizes.append(event.size_bytes)
        else:
            ops.append((False, ordinal_of.pop(event.key)))
    buckets = marked["buckets"]
    assert isinstance(buckets, tuple)
    return _Normal(tuple(ops), tuple(sizes), marker, buckets)


@dataclass(frozen=True, slots=True)
class ScalableSteps:
    """A step's allocation sequence as a function of the batch size."""

    ops: tuple[tuple[bool, int], ...]
    base: tuple[int, ...]  # size at batch 0 (the affine intercept), by ordinal
    per_sample: tuple[int, ...]  # bytes a sample, by ordinal
    marker: int
    buckets: tuple[int, ...]

    @classmethod
    def trace(
        cls,
        build: Callable[[int], TrainingTask],
        *,
        optimizer: Optimizer = "sgd",
        precision: Precision = "fp32",
        bucket_mb: float = 25.0,
    ) -> ScalableSteps | None:
        """Two traces made one; None when the step is not affine in the batch size."""
        b1, b2 = BASE_BATCHES
        first = _record(build, b1, optimizer, precision, bucket_mb)
        second = _record(build, b2, optimizer, precision, bucket_mb)
        if first.ops != second.ops or first.marker != second.marker:
            return None
        base: list[int] = []
        slopes: list[int] = []
        for s1, s2 in zip(first.sizes, second.sizes, strict=True):
            slope, rest = divmod(s2 - s1, b2 - b1)
            if rest or slope < 0 or s1 - slope * b1 < 0:
                return None
            slopes.append(slope)
            base.append(s1 - slope * b1)
        return cls(first.ops, tuple(base), tuple(slopes), first.marker, first.buckets)

    @classmethod
    def exact(
        cls,
        build: Callable[[int], TrainingTask],
        batch: int,
        *,
        optimizer: Optimizer = "sgd",
        precision: Precision = "fp32",
        bucket_mb: float = 25.0,
    ) -> ScalableSteps:
        """The sequence of one batch size only (sizes do not scale)."""
        one = _record(build, batch, optimizer, precision, bucket_mb)
        return cls(one.ops, one.sizes, (0,) * len(one.sizes), one.marker, one.buckets)

    def to_json(self) -> dict[str, object]:
        return {
            "alloc": [int(a) for a, _ in self.ops],
            "ordinal": [o for _, o in self.ops],
            "base": list(self.base),
            "per_sample": list(self.per_sample),
            "marker": self.marker,
            "buckets": list(self.buckets),
        }

    @classmethod
    def from_json(cls, document: dict[str, Any]) -> ScalableSteps:
        """Inverse of ``to_json``; ValueError/KeyError/TypeError on a damaged document."""
        ops = tuple(
            (bool(a), int(o)) for a, o in zip(document["alloc"], document["ordinal"], strict=True)
        )
        base = tuple(int(v) for v in document["base"])
        per_sample = tuple(int(v) for v in document["per_sample"])
        if len(base) != len(per_sample) or any(o >= len(base) or o < 0 for _, o in ops):
            raise ValueError("inconsistent trace document")
        return cls(
            ops,
            base,
            per_sample,
            int(document["marker"]),
            tuple(int(b) for b in document["buckets"]),
        )

    def events(self, batch: int, *, ddp: bool = False) -> list[MemoryEvent]:
        """The allocation sequence at ``batch`` (per GPU), DDP's buckets included if asked."""
        out: list[MemoryEvent] = []
        for index, (is_alloc, ordinal) in enumerate(self.ops):
            if ddp and index == self.marker:
                out.extend(
                    MemoryEvent("alloc", -1 - i, size) for i, size in enumerate(self.buckets)
                )
            if is_alloc:
                size = self.base[ordinal] + self.per_sample[ordinal] * batch
                out.append(MemoryEvent("alloc", ordinal, size))
            else:
                out.append(MemoryEvent("free", ordinal))
        if ddp and self.marker >= len(self.ops):
            out.extend(MemoryEvent("alloc", -1 - i, size) for i, size in enumerate(self.buckets))
        return out
