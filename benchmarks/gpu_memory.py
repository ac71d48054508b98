"""Peak GPU memory (white-box) against Gavel's out-of-memory boundaries.

    python benchmarks/gpu_memory.py            # a table
    python benchmarks/gpu_memory.py --json

Gavel (``shared/data/dnn_profiles/gavel/physical_cluster_throughputs.json``) measured
each configuration on a K80 (one 12 GB die), a P100 (16 GB) and a V100 (16 GB); an
isolated throughput of 0 means the run failed, which for ResNet-50 at batch 128 on the
K80 was out of memory (the only failure in the file). Every measured configuration is
one check: the estimate must say "fits" where Gavel ran it and "does not fit" where it
failed. Fitting is the caching-allocator replay with the board's memory (nvidia-smi's
total: K80 11441 MiB, P100-PCIE-16GB 16280 MiB, V100-SXM2-16GB 16160 MiB) less the
assumed CUDA context; the margin column is that memory less the peak reserved
(negative: out of memory).

Gavel's models, as this project's zoo approximates them (Gavel's exact hyperparameters
are not in the file): ResNet-18 on CIFAR-10 (32x32, 10 classes) and ResNet-50 on
ImageNet (224x224), SGD with momentum, FP32; the LSTM language model as the zoo's
2x650 Wikitext-2 model (35 tokens, 33,278 words), SGD; the translation Transformer as
the zoo's 6-layer 512-wide encoder, 32 tokens, a 10,000-word vocabulary, Adam. A3C,
CycleGAN and the recommendation autoencoder have no zoo model and are left out.
"""

from __future__ import annotations

import argparse
import ast
import json
import time
from collections.abc import Callable
from pathlib import Path

import torch

from tools.estimators.gpu.memory.allocator import MemoryEvent
from tools.estimators.gpu.memory.context import on_device
from tools.estimators.gpu.memory.recorder import Optimizer, record_training_step
from tools.profiling.zoo.registry import TrainingTask, family

GAVEL = (
    Path(__file__).resolve().parents[2]
    / "shared/data/dnn_profiles/gavel/physical_cluster_throughputs.json"
)
BOARDS: dict[str, tuple[float, str]] = {  # total MiB (nvidia-smi), generation
    "k80": (11441.0, "kepler"),
    "p100": (16280.0, "pascal"),
    "v100": (16160.0, "volta"),
}
MIB = float(1 << 20)

Model = tuple[Callable[[int], TrainingTask], Optimizer]


def _zoo(name: str, **params: int) -> Callable[[int], TrainingTask]:
    fam = family(name)

    def build(batch: int) -> TrainingTask:
        with torch.device("meta"):
            return fam.task(params, batch)

    return build


MODELS: dict[str, Model] = {
    "ResNet-18": (
        _zoo("resnet", depth=18, width=64, image_size=32, num_classes=10),
        "sgd",
    ),
    "ResNet-50": (
        _zoo("resnet_bottleneck", depth=50, width=64, image_size=224, num_classes=1000),
        "sgd",
    ),
    "LM": (_zoo("lstm", depth=2, width=650, seq_len=35, vocab=33278), "sgd"),
    "Transformer": (_zoo("transformer", depth=6, width=512, seq_len=32, vocab=10000), "adam"),
}


def gavel_runs() -> list[tuple[str, int, str, bool]]:
    """(model, batch, board, ran) for every isolated single-GPU configuration we model."""
    data = json.loads(GAVEL.read_text())
    rows = []
    for board in BOARDS:
        for key, value in data[board].items():
            job, scale = ast.literal_eval(key)
            if scale != 1 or "(batch size" not in job:
                continue
            name, batch = job.split(" (batch size ")
            if name in MODELS:
                rows.append((name, int(batch.rstrip(")")), board, value["null"] > 0))
    return sorted(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    traced: dict[tuple[str, int], tuple[list[MemoryEvent], float]] = {}
    results: list[dict[str, object]] = []
    for name, batch, board, ran in gavel_runs():
        build, optimizer = MODELS[name]
        if (name, batch) not in traced:
            start = time.perf_counter()
            events = record_training_step(build(batch), optimizer=optimizer)
            traced[(name, batch)] = (events, time.perf_counter() - start)
        events, trace_s = traced[(name, batch)]
        total_mb, generation = BOARDS[board]
        device = on_device(events, generation, total_mb)  # as the product replays
        context, free, fits = device.context_mb, device.peaks, bool(device.fits)
        results.append(
            {
                "model": name,
                "batch": batch,
                "gpu": board,
                "gavel": "ran" if ran else "OOM",
                "peak_allocated_mb": round(free.peak_allocated_bytes / MIB),
                "peak_reserved_mb": round(free.peak_reserved_bytes / MIB),
                "context_mb": context,
                "margin_mb": round(total_mb - context - free.peak_reserved_bytes / MIB),
                "estimate": "fits" if fits else "OOM",
                "right_side": fits == ran,
                "trace_s": round(trace_s, 1),
            }
        )
    right = sum(1 for r in results if r["right_side"])
    if args.json:
        print(json.dumps({"checks": len(results), "right_side": right, "rows": results}))
        return
    head = f"{'model':<12}{'batch':>6} {'gpu':<5}{'gavel':<6}{'alloc MiB':>10}{'reserved':>10}"
    print(head + f"{'margin':>9} {'estimate':<9}{'ok':<4}{'trace s':>8}")
    for r in results:
        print(
            f"{r['model']:<12}{r['batch']:>6} {r['gpu']:<5}{r['gavel']:<6}"
            f"{r['peak_allocated_mb']:>10}{r['peak_reserved_mb']:>10}{r['margin_mb']:>9} "
            f"{r['estimate']:<9}{'yes' if r['right_side'] else 'NO':<4}{r['trace_s']:>8}"
        )
    print(f"right side of Gavel's boundary: {right} of {len(results)}")


if __name__ == "__main__":
    main()
