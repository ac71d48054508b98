"""The trained CPU estimators on a user's model file, as a link of the estimator chain.

``ModelFileCpuEstimator`` answers a DNN workload that names a model file on one CPU node
whose CPU a trained estimator covers: the per-operator CPU model (shipped, or calibrated
on this host by ``rightsize profile calibrate``) for the time, the trained bundle for the
memory (``tools.estimators.cpu.answer.estimate``). Elsewhere it declines, with the
reason, and the chain falls through to the analytic fallback, which knows a catalog
CPU's efficiency (the op-graph roofline of ``cpu.answer`` alone scaled peak FLOPs with
every core: a 112-core Frontera nvdimm node came out at an A100's 19 TFLOPS).

``local_system`` is this machine as a one-partition system, so ``rightsize estimate
--hardware local`` asks the same chain as every catalog option.

The op graph of each (file content, class, input, batch size) is traced once
(``TraceCache``: kept on disk under the chain's home).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from knowledge_base.catalog import NodeType, Partition, System
from knowledge_base.errors import InvalidInputError
from knowledge_base.records import Interval, ResourceEstimate
from knowledge_base.workload import DNNTraining
from tools.planning.estimation import Candidate, NoEstimate, Workload
from tools.planning.model_files import is_model_file
from tools.planning.trace_cache import TraceCache, file_digest

if TYPE_CHECKING:
    from tools.estimators.cpu.bundle import EstimatorBundle
    from tools.estimators.cpu.dataset import GraphData
    from tools.estimators.cpu.opcost import OpCostModel

__all__ = [
    "LOCAL",
    "TORCH_PROCESS_MB",
    "CpuModels",
    "ModelFileCpuEstimator",
    "here",
    "local_system",
]

LOCAL = "local"
# Resident set of a Python process after ``import torch`` (230 MB measured on the
# development machine): the trained models' memory is what training adds above it, a
# node must hold both. A constant, so that every door gives the same number.
TORCH_PROCESS_MB = 230.0
_ANALYTIC = "analytic-opgraph"


def here() -> tuple[str, str, float]:
    """This machine's CPU model, vector ISA and memory (MB), as the CPU estimators'
    service reads them."""
    from tools.estimators.cpu import answer

    found = answer.hardware_descriptors(1)  # type: ignore[attr-defined]  # the seam tests patch
    total = math.inf
    with open("/proc/meminfo") as info:
        for line in info:
            if line.startswith("MemTotal:"):
                total = int(line.split()[1]) / 1024
    return str(found["cpu_model"]), str(found["cpu_isa"]), total


def local_system(threads: int) -> System:
    """This machine as a one-node, one-partition system of ``threads`` cores."""
    cpu_model, _, memory_mb = here()
    memory = int(memory_mb) if math.isfinite(memory_mb) else 1 << 20
    node = NodeType(name=LOCAL, cpu_model=cpu_model, cores=threads, memory_mb=memory)
    partition = Partition(
        name=LOCAL,
        node_type=LOCAL,
        max_nodes=1,
        max_cores_per_node=threads,
        max_memory_mb=memory,
        max_minutes=10**7,
    )
    return System(name=LOCAL, center=LOCAL, node_types=[node], partitions=[partition])


@dataclass
class CpuModels:
    """The trained CPU estimators, loaded on first use from ``home`` (settings)."""

    home: Path
    opcost_dir: Path | None = None  # None: the shipped per-operator model
    models_dir: Path | None = None  # None: the shipped bundle
    traces: TraceCache = field(default_factory=lambda: TraceCache(None))
    _loaded: tuple[Any, dict[str, str], Any, Any] | None = field(default=None, repr=False)
    bundle_folder: Path = field(default=Path(), repr=False)  # where the bundle was read

    def get(self) -> tuple[EstimatorBundle | None, dict[str, str], OpCostModel | None, Any]:
        """(bundle, its registry ids by target, shipped per-operator model, this host's)."""
        if self._loaded is None:
            from tools.estimators.cpu.answer import (
                bundle_records,
                load_bundle,
                load_host_opcost,
                load_opcost,
            )

            bundle: EstimatorBundle | None = None
            ids: dict[str, str] = {}
            try:
                bundle, folder = load_bundle(self.home, models=self.models_dir, train=False)
            except InvalidInputError:
                pass  # no bundle: the per-operator model alone, or the analytic fallback
            else:
                self.bundle_folder = folder
                records = [r.id for r in bundle_records(bundle, folder)]
                ids = {
                    target: next((i for i in records if f"-{kind}-{target}-" in i), kind)
                    for target, kind in bundle.meta.selected.items()
                }
            self._loaded = (
                bundle,
                ids,
                load_opcost(self.opcost_dir),
                load_host_opcost(self.home),
            )
        return self._loaded


def _digest(path: Path) -> str:
    try:
        return file_digest(path)
    except OSError as exc:
        raise InvalidInputError(
            f"cannot read the model file: {exc.strerror}", field="workload.model", value=str(path)
        ) from exc


def _graph(
    path: str, class_name: str, shape: tuple[int, ...], classes: int | None, batch: int
) -> GraphData:
    """One batch size's op graph."""
    from tools.estimators.cpu.dataset import graph_data
    from tools.estimators.model_file import load_user_model

    user = load_user_model(
        Path(path), class_name, input_shape=list(shape) or None, num_classes=classes
    )
    return graph_data(user.graph(batch))


class ModelFileCpuEstimator:
    """The trained CPU estimators on one CPU node (see the module docstring)."""

    estimator_id = "dnn-cpu-model-file"

    def __init__(self, models: CpuModels) -> None:
        self.models = models

    def estimate(self, workload: Workload, candidate: Candidate) -> ResourceEstimate | NoEstimate:
        if not isinstance(workload, DNNTraining) or not is_model_file(workload):
            return NoEstimate("cpu-model-file: only a DNN workload's model file")
        if candidate.gpus_per_node or candidate.nodes != 1:
            return NoEstimate("cpu-model-file: one CPU node only")
        from tools.estimators.cpu.answer import HardwareOption, estimate
        from tools.profiling.analytic import cpu_spec

        node = candidate.node_type
        cpu_model = node.cpu_model or ""
        host_model, host_isa, _ = here()
        option = HardwareOption(
            name=candidate.where,
            spec=cpu_spec(cpu_model or node.name, candidate.cores_per_node),
            cpu_model=cpu_model,
            cpu_isa=host_isa if cpu_model == host_model else "",
            capacity_mb=None,
            local=candidate.system.name == LOCAL,
        )
        bundle, ids, opcost, host_opcost = self.models.get()
        batch = candidate.batch_size or workload.batch_sizes[0]
        path = Path(workload.model).expanduser().resolve()
        assert workload.model_class is not None  # is_model_file
        classes = workload.model_params.get("num_classes")
        traced = (
            str(path),
            workload.model_class,
            tuple(workload.input_shape),
            classes if isinstance(classes, int) and not isinstance(classes, bool) else None,
            batch,
        )
        from tools.profiling.opgraph import GEOMETRY_VERSION  # torch: only when tracing

        traces = self.models.traces
        data = traces.get_or_make(
            # The geometry's version too: a trace made before its fields changed is redone.
            traces.key("cpu-graph", GEOMETRY_VERSION, _digest(path), *traced[1:]),
            lambda: _graph(*traced),
        )
        (answer,) = estimate(
            {batch: data},
            epochs=workload.epochs,
            samples=workload.dataset_samples,
            optimizer=workload.optimizer.value,
            options=[option],
            bundle=bundle,
            bundle_ids=ids,
            opcost=opcost,
            host_opcost=host_opcost,
        )
        if answer.estimator == _ANALYTIC and not option.local:
            # Nothing trained speaks for this CPU: the planner's analytic model, which
            # knows a catalog CPU's efficiency, answers after this one.
            return NoEstimate(
                f"cpu-model-file: no trained CPU model covers {cpu_model or node.name}"
            )
        run, memory = answer.walltime_s, answer.peak_memory_mb
        runtime = Interval(
            point=run.p50, low=run.p10, high=max(run.p90, run.p50), coverage_basis="held_out"
        )
        memory_mb = Interval(
            point=memory.p50 + TORCH_PROCESS_MB,
            low=memory.p10 + TORCH_PROCESS_MB,
            high=max(memory.p90, memory.p50) + TORCH_PROCESS_MB,
            coverage_basis="held_out",
        )
        return ResourceEstimate(
            option=candidate.option(runtime, memory_mb, batch),
            runtime_s=runtime,
            memory_mb=memory_mb,
            estimator_id=answer.estimator,
            validation_error=answer.validation_mape,
            label=answer.note,
            work_priced=answer.work_priced,
        )
