"""White-box peak GPU memory / analytic point, per zoo model, optimizer and batch size.

What ``tools.estimators.gpu_memory.planner.WHITE_BOX_RATIO`` is chosen from: the planner
traces a GPU option's step only where the analytic point times these bounds reaches the
GPU's memory. Prints one line per (model, optimizer, batch) on a 32 GB V100 of the seed
catalog (Pitzer), and the per-sample growth between the two largest batches (what the
ratio tends to at large batches).

    python benchmarks/white_box_ratio.py [--models resnet50,vgg11] [--batches 8,64,256]

Traces go to ``RIGHTSIZE_GPU_TRACES`` (default ``$RIGHTSIZE_HOME/gpu_traces``); a model's
first trace costs seconds.
"""

from __future__ import annotations

import argparse

from knowledge_base.records import ResourceEstimate
from knowledge_base.seed import load_seed_catalog
from knowledge_base.workload import DNNTraining, Optimizer
from tools.estimators.gpu.workload_trace import memory_peak
from tools.planning.analytic import AnalyticDNNEstimator
from tools.planning.estimation import Candidate
from tools.planning.zoo import zoo_names


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(zoo_names()))
    parser.add_argument("--batches", default="8,64,256")
    args = parser.parse_args()
    batches = [int(b) for b in args.batches.split(",")]
    system = load_seed_catalog().system("pitzer")
    node = next(n for n in system.node_types if n.gpu and n.gpu.memory_mb == 32768)
    partition = next(p for p in system.partitions if p.node_type == node.name)
    assert node.gpu is not None
    analytic = AnalyticDNNEstimator()
    print("model optimizer batch analytic_mib white_box_mib ratio")
    for model in args.models.split(","):
        for optimizer in (Optimizer.SGD, Optimizer.ADAM):
            points: list[tuple[float, float]] = []
            for batch in batches:
                workload = DNNTraining(
                    model=model,
                    dataset_samples=10_000,
                    epochs=1,
                    batch_sizes=[batch],
                    optimizer=optimizer,
                )
                answer = analytic.estimate(
                    workload, Candidate(system, partition, node, 1, node.cores or 1, 1, batch)
                )
                assert isinstance(answer, ResourceEstimate) and answer.gpu_memory_mb
                point = answer.gpu_memory_mb.point
                peak = memory_peak(workload, batch, 1, node.gpu).total_mib
                points.append((point, peak))
                print(
                    f"{model} {optimizer.value} {batch} {point:.0f} {peak:.0f} {peak / point:.2f}"
                )
            (a1, w1), (a2, w2) = points[-2], points[-1]
            print(f"{model} {optimizer.value} growth {(w2 - w1) / (a2 - a1):.2f}", flush=True)


if __name__ == "__main__":
    main()
