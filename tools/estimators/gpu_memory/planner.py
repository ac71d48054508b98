"""The planner's seam for the white-box GPU memory model: every GPU answer carries it.

``WhiteBoxGpuMemory`` wraps an estimator of the chain. When it answers a DNN training
option on GPUs, the answer's GPU memory becomes the white-box peak per GPU
(``workload_trace.memory_peak``: the step traced once per model, the caching allocator
replayed at the option's per-GPU batch, DDP buckets for several GPUs, the assumed CUDA
context of the GPU's generation), with allocated and reserved MiB and whether it fits
the GPU (``ResourceEstimate.gpu_memory``); the builder refuses an option that does not
fit, naming the GPU and the MiB needed and available. Where the model does not trace,
the inner estimator's memory stays and the label says why.
"""

from __future__ import annotations

from knowledge_base.errors import InvalidInputError
from knowledge_base.records import Interval, ResourceEstimate
from knowledge_base.workload import DNNTraining
from tools.planning.estimation import Candidate, Estimator, NoEstimate, Workload

__all__ = ["WhiteBoxGpuMemory"]


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
        from tools.estimators.gpu.workload_trace import memory_peak

        label = f"{answer.label}; {self.note}" if self.note else answer.label
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
