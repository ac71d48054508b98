"""White-box peak GPU memory / analytic interval, per model, optimizer, precision, GPUs, batch.

What ``tools.estimators.gpu.memory.planner.WHITE_BOX_RATIO`` (zoo models) and
``MODEL_FILE_RATIO`` (model files) are chosen from: the planner traces a GPU option's step
only where the analytic interval times these bounds reaches the GPU's memory. Prints one
line per (model, optimizer, precision, GPUs, GPU) with, at each per-GPU batch, white-box
allocated (+ context) / the analytic low end and white-box reserved (+ context) / the
analytic point (``lo/hi``), on a 32 GB V100 (Volta: 800 MiB context assumed) and an 80 GB
A100 (Ampere: 500 MiB) of the seed catalog; then the range per model and overall: the
smallest ``lo`` and the largest ``hi``. ``--facts`` prints instead what the zoo's
``GpuSample`` holds: MiB allocated and reserved per sample (FP32 and AMP, one GPU, SGD),
the growth of the white-box peaks between batch 256 and 512.

    python benchmarks/white_box_ratio.py [--models resnet50,vgg11] [--batches 1,8,64,256,1024]
        [--precisions fp32,amp] [--gpus 1,2] [--facts]

A model is a zoo name or ``path/to/file.py:ClassName`` (default: the zoo and
examples/models/small_cnn.py:SmallCNN). Traces go to ``RIGHTSIZE_GPU_TRACES`` (default
``$RIGHTSIZE_HOME/gpu_traces``); a model's first trace costs seconds.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from knowledge_base.catalog import GPUSpec, NodeType, Partition, System
from knowledge_base.records import ResourceEstimate
from knowledge_base.seed import load_seed_catalog
from knowledge_base.workload import DNNTraining, Optimizer, Precision
from rightsize.settings import Settings
from tools.estimators.gpu.workload_trace import memory_peak
from tools.planning.analytic import AnalyticDNNEstimator
from tools.planning.estimation import Candidate
from tools.planning.zoo import zoo_names

REPO = Path(__file__).resolve().parents[1]
SMALL_CNN = f"{REPO / 'examples/models/small_cnn.py'}:SmallCNN"


def _workload(model: str, batch: int, optimizer: Optimizer, precision: Precision) -> DNNTraining:
    path, _, name = model.partition(":")
    files = {"model": path, "model_class": name} if name else {"model": model}
    return DNNTraining(
        **files,
        dataset_samples=10_000,
        epochs=1,
        batch_sizes=[batch],
        optimizer=optimizer,
        precision=precision,
    )


def _shape(system: str, memory_mb: int | None, model: str) -> tuple[System, Partition, NodeType]:
    found = load_seed_catalog().system(system)
    node = next(
        n for n in found.node_types
        if n.gpu and n.gpu.model.startswith(model) and n.gpu.memory_mb == memory_mb
    )  # fmt: skip
    partition = next(p for p in found.partitions if p.node_type == node.name)
    return found, partition, node


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join([*zoo_names(), SMALL_CNN]))
    parser.add_argument("--batches", default="1,8,64,256,1024")
    parser.add_argument("--precisions", default="fp32,amp")
    parser.add_argument("--gpus", default="1,2")
    parser.add_argument("--facts", action="store_true")
    args = parser.parse_args()
    shapes = [
        _shape("pitzer", 32768, "NVIDIA Tesla V100"),
        _shape("ascend", 81920, "NVIDIA A100 80GB"),
    ]
    traces = Settings().gpu_trace_folders()
    if args.facts:
        v100: GPUSpec | None = shapes[0][2].gpu
        assert v100 is not None
        print("model GpuSample(allocated, reserved, amp_allocated, amp_reserved) MiB per sample")
        for model in args.models.split(","):
            counts: list[float] = []
            for precision in (Precision.FP32, Precision.AMP):
                peaks = [
                    memory_peak(_workload(model, b, Optimizer.SGD, precision), b, 1, v100, traces)
                    for b in (256, 512)
                ]
                counts += [
                    (peaks[1].allocated_mib - peaks[0].allocated_mib) / 256,
                    (peaks[1].reserved_mib - peaks[0].reserved_mib) / 256,
                ]
            print(f"{Path(model).name} GpuSample({', '.join(f'{v:.1f}' for v in counts)})")
        return
    batches = [int(b) for b in args.batches.split(",")]
    analytic = AnalyticDNNEstimator()
    print(f"model optimizer precision gpus gpu lo/hi@{','.join(map(str, batches))}")
    ranges: dict[str, list[tuple[float, float]]] = {}
    for model in args.models.split(","):
        for optimizer in (Optimizer.SGD, Optimizer.ADAM):
            for precision in (Precision(p) for p in args.precisions.split(",")):
                for gpus in (int(g) for g in args.gpus.split(",")):
                    for system, partition, node in shapes:
                        assert node.gpu is not None
                        ratios: list[tuple[float, float]] = []
                        for per_gpu in batches:
                            batch = per_gpu * gpus
                            workload = _workload(model, batch, optimizer, precision)
                            candidate = Candidate(
                                system, partition, node, 1, node.cores or 1, gpus, batch
                            )
                            answer = analytic.estimate(workload, candidate)
                            assert isinstance(answer, ResourceEstimate) and answer.gpu_memory_mb
                            peak = memory_peak(workload, batch, gpus, node.gpu, traces)
                            analytic_mib = answer.gpu_memory_mb
                            ratios.append(
                                (
                                    (peak.allocated_mib + peak.context_mib) / analytic_mib.low,
                                    peak.total_mib / analytic_mib.point,
                                )
                            )
                        ranges.setdefault(model, []).extend(ratios)
                        print(
                            f"{Path(model).name} {optimizer.value} {precision.value} {gpus} "
                            f"{node.gpu.model.split(' (')[0]} "
                            + " ".join(f"{lo:.2f}/{hi:.2f}" for lo, hi in ratios),
                            flush=True,
                        )
    print("## white-box / analytic: smallest lo, largest hi")
    for model, found in ranges.items():
        low, high = min(lo for lo, _ in found), max(hi for _, hi in found)
        print(f"{Path(model).name} {low:.2f} {high:.2f}")
    zoo = [r for m, found in ranges.items() if ":" not in m for r in found]
    if zoo:
        low, high = min(lo for lo, _ in zoo), max(hi for _, hi in zoo)
        print(f"zoo overall {low:.2f} {high:.2f} ({len(zoo)} configurations)")


if __name__ == "__main__":
    main()
