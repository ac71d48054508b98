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
ratios measured (``ratio_band``: ``WHITE_BOX_RATIO`` for a zoo model at its reference
input, ``MODEL_FILE_RATIO`` otherwise), reaches the GPU's capacity, or where
the inner answer carries no GPU memory. Elsewhere the answer keeps the analytic
interval and its label says so ("GPU memory analytic ..."): the builder's analytic
check gives the same verdict the white-box one would.
"""

from __future__ import annotations

from knowledge_base.errors import InvalidInputError
from knowledge_base.records import Interval, ResourceEstimate
from knowledge_base.workload import DNNTraining
from tools.estimators.gpu.trace_folders import TraceFolders
from tools.planning.answer import upper_bound
from tools.planning.builder import gpu_memory_bound
from tools.planning.estimation import Candidate, Estimator, NoEstimate, Workload

__all__ = [
    "MODEL_FILE_RATIO",
    "WHITE_BOX_RATIO",
    "WhiteBoxGpuMemory",
    "far_above_capacity",
    "ratio_band",
    "white_box_needed",
]

WHITE_BOX_RATIO = (0.65, 1.45)
"""Bounds for a zoo model at its reference input: the white-box peak allocated (+ context)
is at least ``low`` x the analytic interval's low end, the white-box peak reserved (+
context) at most ``high`` x its point. The analytic interval counts what a sample needs on
a GPU from the zoo model's own step (``tools.planning.zoo.GpuSample``), the optimizer's
temporaries, DDP's buckets and the same CUDA context. Past ``low`` nothing the allocator
could free makes the step fit; short of ``high`` nothing it holds makes it fail. Measured
(``python benchmarks/white_box_ratio.py``, SGD and Adam, FP32 and AMP, 1 and 2 GPUs, V100
and A100, per-GPU batch 1-1024, 21 sizes): 0.74-1.31, the ends at small batches of the
Transformer and BERT, whose zoo models have 20% fewer and more parameters than the
published ones the zoo's facts hold; 0.90-1.21 for the others. About 12% of margin on
each side; docs/notebooks/estimators.md ("was section 7") has the table."""

MODEL_FILE_RATIO = (0.7, 2.5)
"""The bounds for everything else, on the same ends (the low end is x0.7 the point there,
so x0.49 of the point, as x0.5 before): a model file (its analytic point counts only the
tensors its step saves for backward), a zoo model at another input size (its per-sample
count scaled by pixels or tokens, a rule the count did not check), a model without a
count."""


def ratio_band(workload: DNNTraining) -> tuple[float, float]:
    """The white-box/analytic bounds that hold for ``workload`` (see the two above)."""
    from tools.planning.zoo import lookup

    facts = lookup(workload.model)
    if facts is None or facts.gpu_sample is None or workload.model_class is not None:
        return MODEL_FILE_RATIO
    reference = list(facts.reference_input)
    if workload.input_shape and workload.input_shape != reference:
        return MODEL_FILE_RATIO
    return WHITE_BOX_RATIO


def far_above_capacity(
    analytic: Interval | None,
    capacity_mib: float | None,
    band: tuple[float, float] = MODEL_FILE_RATIO,
) -> bool:
    """Whether even the smallest white-box peak the analytic interval allows exceeds the
    GPU (the option is refused whatever the time: nothing about it is worth tracing)."""
    return (
        analytic is not None and capacity_mib is not None and analytic.low * band[0] > capacity_mib
    )


def white_box_needed(
    analytic: Interval | None,
    capacity_mib: float | None,
    band: tuple[float, float] = MODEL_FILE_RATIO,
) -> str | None:
    """Why this GPU option needs the white-box trace (None: the analytic verdict stands).

    ``analytic``: the inner answer's GPU memory per GPU; ``capacity_mib``: the GPU's
    memory (the catalog's, else the largest of its kind; None: unknown); ``band``: the
    workload's ``ratio_band``.
    """
    if analytic is None:
        return "no analytic GPU memory"
    if capacity_mib is None:
        return None  # nothing to fit against: the builder notes it is unchecked
    low, high = band
    if analytic.point * high < capacity_mib or analytic.low * low > capacity_mib:
        return None
    return (
        f"analytic {analytic.low:,.0f}-{analytic.point:,.0f} MiB x{low}-x{high} reaches "
        f"the GPU's {capacity_mib:,.0f} MiB"
    )


class WhiteBoxGpuMemory:
    """An estimator whose GPU answers carry the white-box peak GPU memory."""

    def __init__(
        self, inner: Estimator, note: str = "", traces: TraceFolders | None = None
    ) -> None:
        self.inner = inner
        self.note = note  # added to the label of GPU answers (e.g. why this time model)
        self.traces = traces or TraceFolders()  # where the step's traces persist

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
        if white_box_needed(answer.gpu_memory_mb, capacity_mib, ratio_band(workload)) is None:
            return answer.model_copy(
                update={"label": f"{label}; {_analytic(answer, capacity_mib)}"}
            )
        from tools.estimators.gpu.workload_trace import memory_peak

        batch = answer.option.batch_size or candidate.batch_size or workload.batch_sizes[0]
        try:
            peak = memory_peak(workload, batch, candidate.gpus, gpu, self.traces)
        except InvalidInputError as exc:
            return answer.model_copy(
                update={"label": f"{label}; GPU memory analytic (no white-box trace: {exc})"}
            )
        low = peak.allocated_mib + peak.context_mib
        memory = Interval(
            point=peak.total_mib,
            low=low,
            # Not exact (the context is assumed, the allocator's slack varies): the upper
            # bound lies as far above the point as the allocated peak lies below it.
            high=upper_bound(low, peak.total_mib),
            coverage_basis="assumed",
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
