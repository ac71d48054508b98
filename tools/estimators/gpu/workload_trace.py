"""A DNN workload's traced training step, kept per process for every GPU option and request.

The planner asks about many GPU options of one workload, and the MCP server and the agents
ask again and again (a what-if per mutated spec). Tracing costs seconds; everything after
it (pricing kernels, replaying the allocator) milliseconds. So a workload is traced once
per *model* (the model file's content hash and class, or the zoo name, its input shape
and class count) and every batch size is derived from two traces (shapes grow linearly
in the batch dimension; ``tools.estimators.gpu.memory.scaled`` for the allocation
sequence, ``_affine_kernels`` here for the kernels), with bounded LRU caches of the
traces and of the answers. A model that does not trace is remembered too, with its
error, so a second request does not trace it again. The allocation and kernel traces
also persist on disk (``TraceFolders``, from the caller's settings), so a new process
(each ``rightsize plan``) reads them back.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from knowledge_base.catalog import GPUSpec
from knowledge_base.errors import InvalidInputError
from knowledge_base.records import GpuMemoryPeak
from knowledge_base.workload import DNNTraining, Optimizer, Precision
from tools.estimators.gpu.memory.context import context_basis, gpu_generation
from tools.estimators.gpu.ops import GpuKernels
from tools.estimators.gpu.trace_folders import SHIPPED_TRACES, TraceFolders
from tools.lru import BoundedLru
from tools.profiling.zoo.registry import TrainingTask

__all__ = [
    "KERNEL_BATCHES",
    "SHIPPED_TRACES",
    "StepKey",
    "cache_info",
    "clear_caches",
    "gpu_generation",
    "kernels_at",
    "memory_peak",
    "step_key",
    "task_factory",
]

log = logging.getLogger(__name__)

KERNEL_BATCHES = (8, 16)
_MIB = float(1 << 20)


@dataclass(frozen=True, slots=True)
class StepKey:
    """What a traced step depends on, besides the batch size."""

    model: str  # zoo name, or "file:<sha256 of the file>:<class>"
    input_shape: tuple[int, ...]
    num_classes: int | None


def step_key(workload: DNNTraining) -> StepKey:
    """The cache key of ``workload``'s step: a model file by its content, not its path."""
    classes = workload.model_params.get("num_classes")
    num_classes = classes if isinstance(classes, int) and not isinstance(classes, bool) else None
    if workload.model.endswith(".py") and workload.model_class:
        try:
            digest = hashlib.sha256(Path(workload.model).read_bytes()).hexdigest()
        except OSError as exc:
            raise InvalidInputError(
                f"cannot read the model file: {exc.strerror}",
                field="workload.model",
                value=workload.model,
            ) from exc
        return StepKey(
            f"file:{digest}:{workload.model_class}", tuple(workload.input_shape), num_classes
        )
    # A zoo model is what its parameters build: input shapes that build the same model
    # and batch ([] and [3, 224, 224] for ResNet-50) are one trace.
    found = _zoo_params(workload)
    if found is None:
        return StepKey(workload.model, tuple(workload.input_shape), num_classes)
    family, full = found
    return StepKey(f"zoo:{family}:{sorted(full.items())}", (), None)


def _zoo_params(workload: DNNTraining) -> tuple[str, dict[str, int]] | None:
    from tools.profiling.zoo.registry import named_model

    found = named_model(workload.model)
    if found is None:
        return None
    family, params = found
    if family.kind == "image" and len(workload.input_shape) == 3:
        # The zoo's image models are built for square inputs; a height x width input is
        # traced at the square of the same pixel count, so the convolutions' work and the
        # activations' size (both in proportion to height x width) are the input's.
        height, width = workload.input_shape[-2], workload.input_shape[-1]
        params["image_size"] = max(1, round(math.sqrt(height * width)))
    return family.name, {**family.defaults(), **params}


def task_factory(workload: DNNTraining) -> Callable[[int], TrainingTask]:
    """The training task of ``workload`` at a batch size, on the meta device."""
    import torch

    if workload.model.endswith(".py") and workload.model_class:
        from tools.estimators.model_file import load_user_model

        key = step_key(workload)
        user = load_user_model(
            Path(workload.model),
            workload.model_class,
            input_shape=list(workload.input_shape) or None,
            num_classes=key.num_classes,
        )
        return lambda batch: user.task(batch, meta=True)
    from tools.profiling.zoo.registry import FAMILIES

    found = _zoo_params(workload)
    if found is None:
        raise InvalidInputError(
            "not a zoo model, nor a model file with model_class",
            field="workload.model",
            value=workload.model,
        )
    family = FAMILIES[found[0]]
    full = found[1]

    def build(batch: int) -> TrainingTask:
        with torch.device("meta"):
            inputs, targets = family.batch(full, batch)
            model = family.build(full)
        return TrainingTask(model, inputs, targets, family.loss)

    return build


# -- memory --------------------------------------------------------------------------------

_OPTIMIZERS = {Optimizer.SGD: "sgd", Optimizer.ADAM: "adam", Optimizer.ADAMW: "adam"}
_PRECISIONS = {
    Precision.FP32: "fp32",
    Precision.AMP: "amp_fp16",
    Precision.FP16: "amp_fp16",
    Precision.BF16: "amp_bf16",
}

_TRACES: BoundedLru[tuple[StepKey, str, str], object] = BoundedLru(16)
_PEAKS: BoundedLru[tuple[StepKey, str, str, int, bool, float | None, str], GpuMemoryPeak] = (
    BoundedLru(2048)
)


def _steps(workload: DNNTraining, optimizer: str, precision: str, traces: TraceFolders) -> object:
    """The scalable allocation sequence (or the error text of a model that does not trace)."""
    from tools.estimators.gpu.memory.scaled import ScalableSteps

    key = (step_key(workload), optimizer, precision)

    def make() -> object:
        stored = _disk_load(key, traces)
        if stored is not None:
            return stored
        try:
            build = task_factory(workload)
            found = ScalableSteps.trace(build, optimizer=optimizer, precision=precision)  # type: ignore[arg-type]
        except InvalidInputError as exc:
            return exc
        if found is None:
            return build
        _disk_store(key, found, traces)
        return found

    return _TRACES.get(key, make)


# -- traces kept across processes ------------------------------------------------------------
# A CLI plan is a new process each time: the first plan of a model pays its traces
# (seconds), later ones read them back. Keyed by the step key and by the code that
# produced them (recorder, its cuDNN emulations, scaler, the zoo's models, torch's
# version), so a change to any of them traces again. The caller's ``TraceFolders`` (the
# settings' ``gpu_traces``) say where; the shipped traces of the README's example are read
# after the user's own folder, and only where the settings do not name one. They carry the
# same names (hence the same code digests): after a change to the tracing code they no
# longer match and the example is traced again, until they are made anew
# (data/gpu_traces/README.md; tests/tools/estimators/gpu/test_shipped_traces.py says so).

_CODE_DIGEST: list[str] = []
_NOWHERE = TraceFolders()  # the default: this process's caches only


def _sources_digest(modules: tuple[object, ...]) -> str:
    """sha256 of torch's version, the modules' sources and the zoo's: what made a trace."""
    import torch

    from tools.profiling import zoo

    digest = hashlib.sha256(torch.__version__.encode())
    sources = [Path(getattr(m, "__file__", None) or "") for m in modules]
    sources += sorted(Path(zoo.__file__ or "").parent.glob("*.py"))
    for source in sources:
        digest.update(source.read_bytes())
    return digest.hexdigest()


def _read_json(
    path: Path | None, what: str, traces: TraceFolders
) -> Iterator[tuple[Path, dict[str, Any]]]:
    """Each readable cached document named like ``path`` (the cache, then the shipped);
    the caller parses it and returns, or reads on when parsing raises."""
    for candidate in traces.readable(path):
        if not candidate.is_file():
            continue
        try:
            yield candidate, json.loads(candidate.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            log.warning("%s cache %s unreadable (%s): tracing again", what, candidate, exc)


def _write_json(path: Path | None, document: object, what: str) -> None:
    """Write ``document`` whole or not at all (a temporary file renamed over ``path``)."""
    if path is None:
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(document), encoding="utf-8")
        tmp.replace(path)
    except OSError as exc:  # a read-only home: the process cache still works
        log.warning("%s cache %s not written: %s", what, path, exc)


def _code_digest() -> str:
    if not _CODE_DIGEST:
        from tools.estimators.gpu.memory import cudnn_conv, cudnn_rnn, recorder, scaled
        from tools.profiling import cuda_ops

        sources = (recorder, cudnn_rnn, cudnn_conv, cuda_ops, scaled)
        _CODE_DIGEST.append(_sources_digest(sources))
    return _CODE_DIGEST[0]


def _disk_path(key: tuple[StepKey, str, str], traces: TraceFolders) -> Path | None:
    folder = traces.folder
    if folder is None:
        return None
    name = hashlib.sha256(f"{key!r}|{_code_digest()}".encode()).hexdigest()[:32]
    return folder / f"{name}.json"


def _disk_load(key: tuple[StepKey, str, str], traces: TraceFolders) -> object | None:
    from tools.estimators.gpu.memory.scaled import ScalableSteps

    for path, document in _read_json(_disk_path(key, traces), "GPU trace", traces):
        try:
            return ScalableSteps.from_json(document)
        except (ValueError, KeyError, TypeError) as exc:
            log.warning("GPU trace cache %s unreadable (%s): tracing again", path, exc)
    return None


def _disk_store(key: tuple[StepKey, str, str], steps: object, traces: TraceFolders) -> None:
    from tools.estimators.gpu.memory.scaled import ScalableSteps

    if isinstance(steps, ScalableSteps):
        _write_json(_disk_path(key, traces), steps.to_json(), "GPU trace")


def memory_peak(
    workload: DNNTraining,
    batch: int,
    gpus: int,
    gpu: GPUSpec,
    traces: TraceFolders = _NOWHERE,
) -> GpuMemoryPeak:
    """Peak memory per GPU of ``workload`` at global ``batch`` over ``gpus`` data-parallel
    GPUs of the catalog's ``gpu``; InvalidInputError when the model does not trace.
    ``traces``: where the step's trace is kept across processes (default: nowhere)."""
    from tools.estimators.gpu.memory.context import on_device
    from tools.estimators.gpu.memory.scaled import ScalableSteps

    if batch <= 0:
        raise InvalidInputError("must be positive", field="batch_size", value=batch)
    if gpus <= 0:
        raise InvalidInputError("must be positive", field="gpus", value=gpus)
    optimizer = _OPTIMIZERS[workload.optimizer]
    precision = _PRECISIONS[workload.precision]
    per_gpu = math.ceil(batch / gpus)
    generation = gpu_generation(gpu.model)
    capacity = float(gpu.memory_mb) if gpu.memory_mb else None
    key = (step_key(workload), optimizer, precision, per_gpu, gpus > 1, capacity, gpu.model)

    def make() -> GpuMemoryPeak:
        steps = _steps(workload, optimizer, precision, traces)
        if isinstance(steps, InvalidInputError):
            raise steps
        if isinstance(steps, ScalableSteps):
            events = steps.events(per_gpu, ddp=gpus > 1)
        else:  # not affine in the batch: this batch size traced on its own
            assert callable(steps)
            exact = ScalableSteps.exact(steps, per_gpu, optimizer=optimizer, precision=precision)  # type: ignore[arg-type]
            events = exact.events(per_gpu, ddp=gpus > 1)
        # Unknown architecture: the largest context (older CUDA builds). Near the limit
        # the allocator frees its cache and tries again (on_device).
        device = on_device(events, generation, capacity)
        return GpuMemoryPeak(
            allocated_mib=round(device.peaks.peak_allocated_bytes / _MIB, 1),
            reserved_mib=round(device.peaks.peak_reserved_bytes / _MIB, 1),
            context_mib=device.context_mb,
            total_mib=round(device.total_mb, 1),
            capacity_mib=capacity,
            fits=device.fits,
            per_gpu_batch=per_gpu,
            optimizer=optimizer,
            precision=precision,
            context_basis=context_basis(gpu.model),
        )

    return _PEAKS.get(key, make)


# -- kernels -------------------------------------------------------------------------------


def _trace_kernels(build: Callable[[int], TrainingTask], batch: int) -> tuple[GpuKernels, int]:
    from tools.estimators.gpu.ops import kernels_of
    from tools.estimators.gpu.trace import trace_training_step

    task = build(batch)
    kernels = kernels_of(trace_training_step(task))
    return kernels, sum(p.numel() for p in task.model.parameters() if p.requires_grad)


@dataclass(frozen=True, slots=True)
class _AffineKernels:
    first: GpuKernels
    second: GpuKernels
    parameters: int

    def at(self, batch: int) -> GpuKernels:
        b1, b2 = KERNEL_BATCHES
        t = (batch - b1) / (b2 - b1)
        dims = {
            c: {
                d: [v1 + (v2 - v1) * t for v1, v2 in zip(col, self.second.dims[c][d], strict=True)]
                for d, col in cols.items()
            }
            for c, cols in self.first.dims.items()
        }
        return GpuKernels(
            dims=dims,
            factor={c: list(v) for c, v in self.first.factor.items()},
            backward={c: list(v) for c, v in self.first.backward.items()},
            recurrent=self.first.recurrent,
        )


def _affine_kernels(first: GpuKernels, second: GpuKernels) -> bool:
    """Whether two traces are one kernel list whose shapes are proportional-plus-constant
    in the batch (no dimension would go negative at batch 1)."""
    b1, b2 = KERNEL_BATCHES
    if first.factor != second.factor or first.backward != second.backward:
        return False
    for c, cols in first.dims.items():
        for d, col in cols.items():
            other = second.dims[c][d]
            if len(col) != len(other):
                return False
            for v1, v2 in zip(col, other, strict=True):
                slope = (v2 - v1) / (b2 - b1)
                if slope < 0 or v1 - slope * (b1 - 1) < -1e-9:
                    return False
    return True


# Kernel traces persist like the allocation traces (``TraceFolders``), keyed by the step key
# and the code that produced them (the tracer, the kernel list, the zoo, torch's version):
# the per-operator time model's first answer of a model costs its two traces once.
_KERNEL_DIGEST: list[str] = []


def _kernel_code_digest() -> str:
    if not _KERNEL_DIGEST:
        from tools.estimators.gpu import features, ops, rnn_kernels, trace
        from tools.profiling import atentrace, cuda_ops

        _KERNEL_DIGEST.append(
            _sources_digest((trace, atentrace, rnn_kernels, cuda_ops, ops, features))
        )
    return _KERNEL_DIGEST[0]


def _kernels_path(key: StepKey, traces: TraceFolders) -> Path | None:
    folder = traces.folder
    if folder is None:
        return None
    name = hashlib.sha256(f"kernels|{key!r}|{_kernel_code_digest()}".encode()).hexdigest()[:32]
    return folder / f"kernels-{name}.json"


def _kernels_json(kernels: GpuKernels) -> dict[str, object]:
    return {
        "dims": kernels.dims,
        "factor": kernels.factor,
        "backward": kernels.backward,
        "recurrent": kernels.recurrent,
    }


def _kernels_from_json(document: dict[str, object]) -> GpuKernels:
    dims, factor, backward = document["dims"], document["factor"], document["backward"]
    if not (isinstance(dims, dict) and isinstance(factor, dict) and isinstance(backward, dict)):
        raise ValueError("not a kernel trace document")
    kernels = GpuKernels(recurrent=bool(document.get("recurrent", False)))
    if set(dims) != set(kernels.dims) or set(factor) != set(dims) or set(backward) != set(dims):
        raise ValueError("operator classes differ from this code's")
    for c, cols in kernels.dims.items():
        rows = len(factor[c])
        if set(dims[c]) != set(cols) or len(backward[c]) != rows:
            raise ValueError(f"inconsistent columns of {c}")
        for d in cols:
            if len(dims[c][d]) != rows:
                raise ValueError(f"inconsistent column {c}.{d}")
            cols[d] = [float(v) for v in dims[c][d]]
        kernels.factor[c] = [float(v) for v in factor[c]]
        kernels.backward[c] = [bool(v) for v in backward[c]]
    return kernels


def _kernels_load(key: StepKey, traces: TraceFolders) -> _AffineKernels | None:
    for path, document in _read_json(_kernels_path(key, traces), "GPU kernel trace", traces):
        try:
            return _AffineKernels(
                _kernels_from_json(document["first"]),
                _kernels_from_json(document["second"]),
                int(document["parameters"]),
            )
        except (ValueError, KeyError, TypeError) as exc:
            log.warning("GPU kernel trace cache %s unreadable (%s): tracing again", path, exc)
    return None


def _kernels_store(key: StepKey, found: _AffineKernels, traces: TraceFolders) -> None:
    document = {
        "first": _kernels_json(found.first),
        "second": _kernels_json(found.second),
        "parameters": found.parameters,
    }
    _write_json(_kernels_path(key, traces), document, "GPU kernel trace")


_KERNELS: BoundedLru[StepKey, object] = BoundedLru(16)
_KERNELS_AT: BoundedLru[tuple[StepKey, int], tuple[GpuKernels, int]] = BoundedLru(256)


def kernels_at(
    workload: DNNTraining, batch: int, traces: TraceFolders = _NOWHERE
) -> tuple[GpuKernels, int]:
    """The kernels of one training step at ``batch`` and the trainable parameter count;
    InvalidInputError (naming the operator) when the model does not trace. ``traces``:
    where the two traces are kept across processes (default: nowhere)."""
    if batch <= 0:
        raise InvalidInputError("must be positive", field="batch_size", value=batch)
    key = step_key(workload)

    def traced() -> object:
        stored = _kernels_load(key, traces)
        if stored is not None:
            return stored
        try:
            build = task_factory(workload)
            first, parameters = _trace_kernels(build, KERNEL_BATCHES[0])
            second, _ = _trace_kernels(build, KERNEL_BATCHES[1])
        except InvalidInputError as exc:
            return exc
        if _affine_kernels(first, second):
            found = _AffineKernels(first, second, parameters)
            _kernels_store(key, found, traces)
            return found
        return build

    def make() -> tuple[GpuKernels, int]:
        found = _KERNELS.get(key, traced)
        if isinstance(found, InvalidInputError):
            raise found
        if isinstance(found, _AffineKernels):
            return found.at(batch), found.parameters
        assert callable(found)
        return _trace_kernels(found, batch)

    return _KERNELS_AT.get((key, batch), make)


def cache_info() -> dict[str, tuple[int, int]]:
    """(hits, misses) of each cache: what the benchmarks and tests read."""
    return {
        "memory_traces": (_TRACES.hits, _TRACES.misses),
        "memory_peaks": (_PEAKS.hits, _PEAKS.misses),
        "kernel_traces": (_KERNELS.hits, _KERNELS.misses),
        "kernels": (_KERNELS_AT.hits, _KERNELS_AT.misses),
    }


def clear_caches() -> None:
    for cache in (_TRACES, _PEAKS, _KERNELS, _KERNELS_AT):
        cache.clear()
