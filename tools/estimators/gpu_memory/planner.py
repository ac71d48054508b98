"""The planner's seam for the white-box GPU memory model: every GPU answer carries it.

``WhiteBoxGpuMemory`` wraps an estimator of the chain. When it answers a DNN training
option on GPUs, the answer's GPU memory becomes the white-box peak per GPU
(``workload_trace.memory_peak``: the step traced once per model, the caching allocator
replayed at the option's per-GPU batch, DDP buckets for several GPUs, the assumed CUDA
context of the GPU's generation), with allocated and reserved MiB and whether it fits
the GPU (``ResourceEstimate.gpu_memory``); the builder refuses an option that does not
fit, naming the GPU and the MiB needed and available. Where the model does not trace,
the inner estimator's memory stays and the label says why.

The trace costs seconds of CPU and torch's import (its optimizer step loads
``torch._dynamo``), so it runs only where it can change the decision
(``white_box_needed``): where the analytic interval, widened to the white-box/analytic
ratios measured on the zoo (``WHITE_BOX_RATIO``), reaches the GPU's capacity, or where
the inner answer carries no GPU memory. Elsewhere the answer keeps the analytic
interval and its label says so ("GPU memory analytic ..."): the builder's analytic
check gives the same verdict the white-box one would.
"""

from __future__ import annotations

from knowledge_base.errors import InvalidInputError
from knowledge_base.records import Interval, ResourceEstimate
from knowledge_base.workload import DNNTraining
from tools.planning.builder import gpu_memory_bound
from tools.planning.estimation import Candidate, Estimator, NoEstimate, Workload

__all__ = ["WHITE_BOX_RATIO", "WhiteBoxGpuMemory", "far_above_capacity", "white_box_needed"]

WHITE_BOX_RATIO = (0.5, 2.5)
"""Bounds on white-box peak / analytic point MiB, beyond which the capacity check needs
no trace. Measured (fake-tensor traces, V100 32 GB, SGD and Adam, batch 8/64/256): the
ten zoo models 0.66 (vit_small) to 1.97 (vgg11 at 256); the per-sample growth between
batch 64 and 256, which a larger batch tends to, up to 2.28 (vgg11; lstm 2.11); the
small CNN model file 1.56-1.71 (batch 8,192 to 131,072). ``benchmarks/white_box_ratio.py``
prints them; docs/estimators.md section 7 has the table."""


def far_above_capacity(analytic: Interval | None, capacity_mib: float | None) -> bool:
    """Whether even the smallest white-box peak the analytic point allows exceeds the GPU
    (the option is refused whatever the time: nothing about it is worth tracing)."""
    return (
        analytic is not None
        and capacity_mib is not None
        and analytic.point * WHITE_BOX_RATIO[0] > capacity_mib
    )


def white_box_needed(analytic: Interval | None, capacity_mib: float | None) -> str | None:
    """Why this GPU option needs the white-box trace (None: the analytic verdict stands).

    ``analytic``: the inner answer's GPU memory per GPU; ``capacity_mib``: the GPU's
    memory (the catalog's, else the largest of its kind; None: unknown).
    """
    if analytic is None:
        return "no analytic GPU memory"
    if capacity_mib is None:
        return None  # nothing to fit against: the builder notes it is unchecked
    low, high = WHITE_BOX_RATIO
    if analytic.point * high < capacity_mib or analytic.point * low > capacity_mib:
        return None
    return (
        f"analytic {analytic.point:,.0f} MiB is within x{low}-x{high} of the GPU's "
        f"{capacity_mib:,.0f} MiB"
    )


class WhiteBoxGpuMemory:
    """An estimator whose GPU answers carry the white-box peak GPU memory."""

    def __init__(self, inner: Estimator, note: str = "") -> None:
        self.inner = inner
        self.note = note  # added to the label of GPU answers (e.g. why this time model)

    @property
    def estimator_id(self) -> str:
        return self.inner.estimator_id

    def estimate(self, workload: Workload, candidate: Candidate) -> ResourceEstimate | NoEstimate:
        answer = self.inner.estimate(workload, candidate)
        gpu = candidate.node_type.gpu
        if (
            isinstance(answer, NoEstimate)
            or not isinstance(workload, DNNTraining)
            or not candidate.gpus_per_node
            or gpu is None
        ):
            return answer
        label = f"{answer.label}; {self.note}" if self.note else answer.label
        capacity_mib, _ = gpu_memory_bound(candidate)
        if white_box_needed(answer.gpu_memory_mb, capacity_mib) is None:
            return answer.model_copy(
                update={"label": f"{label}; {_analytic(answer, capacity_mib)}"}
            )
        from tools.estimators.gpu.workload_trace import memory_peak

        batch = answer.option.batch_size or candidate.batch_size or workload.batch_sizes[0]
        try:
            peak = memory_peak(workload, batch, candidate.gpus, gpu)
        except InvalidInputError as exc:
            return answer.model_copy(
                update={"label": f"{label}; GPU memory analytic (no white-box trace: {exc})"}
            )
        memory = Interval(
            point=peak.total_mib,
            low=peak.allocated_mib + peak.context_mib,
            high=peak.total_mib,
            coverage_basis="assumed",  # the context is assumed; the replay is exact
        )
        return answer.model_copy(
            update={
                "gpu_memory_mb": memory,
                "gpu_memory": peak,
                "label": f"{label}; GPU memory white-box",
            }
        )


def _analytic(answer: ResourceEstimate, capacity_mib: float | None) -> str:
    memory = answer.gpu_memory_mb
    assert memory is not None
    where = (
        "the GPU's memory is unknown"
        if capacity_mib is None
        else "far "
        + ("below" if memory.point < capacity_mib else "above")
        + f" the GPU's {capacity_mib:,.0f} MiB"
    )
    return f"GPU memory analytic ({memory.point:,.0f} MiB, {where}: no white-box trace)"
