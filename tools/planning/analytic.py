"""The analytic DNN estimator: what planning falls back on when no estimator is trained.

Time per training step, on GPUs (data parallel over ``G`` GPUs, per-GPU batch ``b``):

    step_s = overhead_s + 3 * forward_flops * b / (peak_fp32 * efficiency) [/ AMP speedup]
             + all-reduce of the gradients (ring: 2 (G-1)/G x parameter bytes / bandwidth)

with ``efficiency`` and ``overhead_s`` fitted on Gavel's measurements (see
``tools.planning.gavel_fit``: 22.5% MAPE in sample, 27.7% leaving one GPU out). On CPUs
the peak is cores x clock x FLOPs/cycle and the efficiency a documented 10% (see
``tools.planning.hardware``). Run time = epochs x ceil(samples / batch) steps + start-up.

Memory per GPU = CUDA context and cuBLAS workspaces (per GPU generation, as the
white-box peak counts them: ``tools.estimators.gpu.memory.context``) + weights,
gradients and optimizer state + the larger of the optimizer step's temporaries (Adam's
foreach step: one parameter-sized tensor) and the per-GPU batch x what a sample needs at
the step's peak (the zoo's ``gpu_sample_mib``: saved activations, their gradients and
the caching allocator's reservation, counted from each zoo model's own step; else the
activations kept for backward) + DDP's gradient buckets (a copy of the gradients) on
several GPUs. Host memory per node = framework base + data-loader buffers (+ the same
model state and activations on CPU-only nodes). Activations and FLOPs scale with the
input size (pixels for images, tokens for sequences) from each model's reference input.

Intervals are deliberately wide on what the model computes (the training steps x0.5-x2
on GPUs, x0.4-x2.5 on CPUs; memory x0.7-x1.4) and every estimate carries the label
``analytic fallback (untrained)``: this model has never seen the user's code, data
pipeline or cluster. The fixed start-up has its own range (10 s, 30 s, 120 s) instead of
the steps' multipliers: a 676-parameter model's run is almost all start-up, and x2.5 of a
fixed 120 s asked 6 min for a 34 s job. The CPU host base (512 MiB) is a measured CPU-only
PyTorch training process (300 MiB peak RSS) plus an allowance for the dataset index;
GPU nodes keep 4 GiB for the host side of the CUDA libraries (not measured here).
"""

from __future__ import annotations

import math

from knowledge_base.errors import InvalidInputError
from knowledge_base.records import Interval, ResourceEstimate
from knowledge_base.workload import DNNTraining, Optimizer, Precision
from tools.estimators.gpu.memory.context import context_for, workspaces_mb
from tools.planning import hardware
from tools.planning.estimation import Candidate, NoEstimate, Workload
from tools.planning.model_files import is_model_file, model_file_facts
from tools.planning.zoo import ModelFacts, lookup, zoo_names

__all__ = [
    "ANALYTIC_ID",
    "ANALYTIC_LABEL",
    "AnalyticDNNEstimator",
    "input_scale",
]

ANALYTIC_ID = "analytic-fallback"
ANALYTIC_LABEL = "analytic fallback (untrained)"

STARTUP_S = 120.0  # upper start-up: interpreter, model build, first batches on a busy node
STARTUP_POINT_S = 30.0  # 15-19 s measured for a tiny model on the 2-core VM at load 5
STARTUP_LOW_S = 10.0
GPU_RUNTIME_SPREAD = (0.5, 2.0)
CPU_RUNTIME_SPREAD = (0.4, 2.5)
MEMORY_SPREAD = (0.7, 1.4)
HOST_BASE_MB = 4096.0  # GPU nodes: Python, PyTorch, host side of CUDA libraries, dataset index
HOST_BASE_CPU_MB = 512.0  # CPU-only PyTorch training: 300 MiB peak RSS measured, + dataset index
LOADER_MB_PER_GPU = 1024.0  # one data-loader worker set per GPU process
PREFETCHED_BATCHES = 4  # 2 workers x prefetch factor 2 (PyTorch's defaults)
_OPTIMIZER_STATES = {Optimizer.SGD: 1, Optimizer.ADAM: 2, Optimizer.ADAMW: 2}
# Parameter-sized temporaries of the foreach optimizer step, on top of its states: Adam's
# sqrt of exp_avg_sq (torch.optim.adam._multi_tensor_adam); SGD updates in place.
_OPTIMIZER_TEMPORARIES = {Optimizer.SGD: 0.0, Optimizer.ADAM: 1.0, Optimizer.ADAMW: 1.0}
_MB = 1024.0 * 1024.0


def input_scale(facts: ModelFacts, input_shape: list[int]) -> float:
    """How much bigger one sample is than the model's reference input (pixels or tokens)."""
    if not input_shape:
        return 1.0
    if facts.family == "image":
        if len(input_shape) < 2:
            return 1.0
        height, width = input_shape[-2], input_shape[-1]
        return (height * width) / (facts.reference_input[-2] * facts.reference_input[-1])
    return input_shape[0] / facts.reference_input[0]


def _sample_mb(facts: ModelFacts, input_shape: list[int]) -> float:
    shape = input_shape or list(facts.reference_input)
    bytes_per_value = 4 if facts.family == "image" else 8  # FP32 pixels, int64 token ids
    return math.prod(shape) * bytes_per_value / _MB


class AnalyticDNNEstimator:
    """Estimates DNN training from the model zoo's facts and the hardware's peaks.

    The estimate depends on the hardware shape, not on the partition: partitions that
    share a node type (Pitzer has 68 partitions on 7 node types) reuse one computation.
    """

    def __init__(self) -> None:
        self._workload: DNNTraining | None = None
        self._memo: dict[tuple[str, str, int, int, int, int], ResourceEstimate] = {}

    @property
    def estimator_id(self) -> str:
        return ANALYTIC_ID

    def estimate(self, workload: Workload, candidate: Candidate) -> ResourceEstimate | NoEstimate:
        if not isinstance(workload, DNNTraining):
            return NoEstimate("the analytic DNN estimator only estimates DNN training")
        if workload is not self._workload:
            self._workload, self._memo = workload, {}
        key = (
            candidate.system.name,
            candidate.node_type.name,
            candidate.nodes,
            candidate.cores_per_node,
            candidate.gpus_per_node,
            candidate.batch_size or 0,
        )
        known = self._memo.get(key)
        if known is None:
            answer = self._estimate(workload, candidate)
            if isinstance(answer, NoEstimate):
                return answer
            self._memo[key] = known = answer
        if known.option.partition == candidate.partition.name:
            return known
        option = known.option.model_copy(update={"partition": candidate.partition.name})
        return known.model_copy(update={"option": option})

    def _estimate(
        self, workload: DNNTraining, candidate: Candidate
    ) -> ResourceEstimate | NoEstimate:
        facts = lookup(workload.model)
        if facts is None and is_model_file(workload):
            try:
                facts = model_file_facts(workload)
            except InvalidInputError as exc:
                return NoEstimate(f"the model file cannot be traced: {exc}")
        if facts is None:
            hint = (
                "; give model_class to trace a model file" if workload.model.endswith(".py") else ""
            )
            return NoEstimate(
                f"no estimator knows workload.model={workload.model!r} "
                f"(the analytic fallback knows {', '.join(zoo_names())}{hint})"
            )
        batch = candidate.batch_size or workload.batch_sizes[0]
        scale = input_scale(facts, workload.input_shape)
        mixed = workload.precision is not Precision.FP32
        param_mb = facts.parameters * 4 / _MB
        states = 2 + _OPTIMIZER_STATES[workload.optimizer] + (0.5 if mixed else 0.0)
        model_state_mb = param_mb * states
        activation_mb = facts.activation_mb * scale * (0.5 if mixed else 1.0)
        train_flops = 3 * facts.forward_flops * scale
        sample_mb = _sample_mb(facts, workload.input_shape)

        gpu_memory: Interval | None = None
        if candidate.gpus_per_node:
            gpu = candidate.node_type.gpu
            if gpu is None or gpu.fp32_tflops is None:
                model = gpu.model if gpu is not None else "this GPU"
                return NoEstimate(f"peak FP32 of {model} is not in the catalog")
            devices = candidate.gpus
            per_device = math.ceil(batch / devices)
            compute_s = (
                train_flops * per_device / (gpu.fp32_tflops * 1e12 * hardware.GPU_EFFICIENCY)
            )
            if mixed and hardware.has_tensor_cores(gpu):
                compute_s /= hardware.AMP_SPEEDUP
            link_gbs = hardware.gpu_link_gbs(gpu)
            if candidate.nodes > 1:
                link_gbs = min(link_gbs, hardware.INTER_NODE_GBS)
            step_s = (
                hardware.GPU_STEP_OVERHEAD_S + compute_s + _allreduce_s(param_mb, devices, link_gbs)
            )
            gpu_memory = _gpu_memory(
                facts, workload, gpu.model, param_mb, model_state_mb, activation_mb,
                scale=scale, per_device=per_device, devices=devices,
            )  # fmt: skip
            host_point = (
                HOST_BASE_MB
                + 2 * param_mb  # a CPU copy while loading and checkpointing
                + candidate.gpus_per_node
                * (LOADER_MB_PER_GPU + PREFETCHED_BATCHES * per_device * sample_mb)
            )
            runtime_spread = GPU_RUNTIME_SPREAD
            validation_error: float | None = hardware.GAVEL_FIT_LOGO_MAPE
        else:
            per_node = math.ceil(batch / candidate.nodes)
            peak = hardware.cpu_peak(candidate.node_type)
            node_flops = candidate.cores_per_node * peak.gflops_per_core * 1e9
            step_s = (
                hardware.CPU_STEP_OVERHEAD_S
                + train_flops * per_node / (node_flops * hardware.CPU_EFFICIENCY)
                + _allreduce_s(param_mb, candidate.nodes, hardware.INTER_NODE_GBS)
            )
            host_point = (
                HOST_BASE_CPU_MB
                + model_state_mb
                + activation_mb * per_node
                + PREFETCHED_BATCHES * per_node * sample_mb
            )
            runtime_spread = CPU_RUNTIME_SPREAD
            validation_error = None  # an assumed efficiency, not a fit

        steps = workload.epochs * math.ceil(workload.dataset_samples / batch)
        work = _spread(steps * step_s, runtime_spread)
        runtime = Interval(
            point=STARTUP_POINT_S + work.point,
            low=STARTUP_LOW_S + work.low,
            high=STARTUP_S + work.high,
            coverage_basis="assumed",
        )
        host_memory = _spread(host_point, MEMORY_SPREAD)
        return ResourceEstimate(
            option=candidate.option(runtime, host_memory, batch),
            runtime_s=runtime,
            memory_mb=host_memory,
            gpu_memory_mb=gpu_memory,
            estimator_id=ANALYTIC_ID,
            validation_error=validation_error,
            error_metric="mape",
            label=ANALYTIC_LABEL,
        )


def _gpu_memory(
    facts: ModelFacts,
    workload: DNNTraining,
    gpu_model: str,
    param_mb: float,
    model_state_mb: float,
    activation_mb: float,
    *,
    scale: float,
    per_device: int,
    devices: int,
) -> Interval:
    """Memory per GPU: the point is what the caching allocator holds at the step's peak
    (reserved + context), the low end what it hands out (allocated + context), as the
    white-box answer's interval; a model without a per-sample count (a model file) gets
    the activations it saves for backward and the usual spread."""
    fixed = (
        context_for(gpu_model)
        + workspaces_mb(gpu_model)
        + model_state_mb
        + (param_mb if devices > 1 else 0.0)  # DDP's gradient buckets
    )
    temporaries = param_mb * _OPTIMIZER_TEMPORARIES[workload.optimizer]
    count = facts.gpu_sample
    if count is None:
        return _spread(fixed + max(temporaries, activation_mb * per_device), MEMORY_SPREAD)
    mixed = workload.precision is not Precision.FP32
    allocated = (count.amp_allocated_mib if mixed else count.allocated_mib) * scale
    reserved = (count.amp_reserved_mib if mixed else count.reserved_mib) * scale
    point = fixed + max(temporaries, reserved * per_device)
    return Interval(
        point=point,
        low=fixed + max(temporaries, allocated * per_device),
        high=point * MEMORY_SPREAD[1],
    )


def _allreduce_s(param_mb: float, participants: int, link_gbs: float) -> float:
    if participants <= 1:
        return 0.0
    return 2 * (participants - 1) / participants * param_mb / 1024 / link_gbs


def _spread(point: float, spread: tuple[float, float]) -> Interval:
    # Fixed multipliers: the 80% is what the spread is meant to cover, never measured.
    return Interval(
        point=point, low=point * spread[0], high=point * spread[1], coverage_basis="assumed"
    )
