"""Leave-one-GPU-out benchmark of the per-operator GPU estimator (issue #16).

    nice -n 10 .venv/bin/python benchmarks/gpu_estimators.py [--skip-kernels] [--json OUT]

Every figure is for a GPU the model never saw: for each NeuSight training GPU (P4, P100,
T4, V100, A100-40GB) the cost model is refitted on the other four and predicts

1. per operator class, every kernel NeuSight timed on the left-out GPU;
2. end to end, NeuSight's whole-model runs on it (``train``: forward + backward;
   ``inf``: forward), beside the roofline (sum of the kernels' rooflines) and the
   analytic fallback (FLOPs over peak x the Gavel-fitted efficiency, plus its overhead);
   p10-p90 coverage uses intervals calibrated on the other GPUs' runs only;
3. Gavel's CNNs (ResNet-18/CIFAR-10, ResNet-50/ImageNet, SGD): V100 by the model that
   left V100 out (so from P4, P100, T4, A100 kernels; Gavel's own K80 and P100 points
   are not training data for it), and K80 and P100 from the full model;

and the time one estimate takes: one model on every GPU of the seeded catalog.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tools.estimators.gpu.estimator import GpuStepModel
from tools.estimators.gpu.features import OP_CLASSES, class_features
from tools.estimators.gpu.kernels import (
    TRAINING_GPUS,
    default_neusight_root,
    load_device_specs,
    load_kernels,
)
from tools.estimators.gpu.ops import GpuKernels, kernels_of
from tools.estimators.gpu.specs import GpuSpec, spec_for_catalog_gpu
from tools.estimators.gpu.trace import trace_training_step
from tools.estimators.gpu.train import fit_all, validate
from tools.planning.hardware import GPU_EFFICIENCY, GPU_STEP_OVERHEAD_S

REPO = Path(__file__).resolve().parents[1]
GAVEL = REPO.parent / "shared/data/dnn_profiles/gavel/physical_cluster_throughputs.json"
# Gavel's GPUs as tools.planning.gavel_fit assumes the boards (V100 SXM2, P100 PCIe, one
# K80 die); SMs, clocks and L2 from NVIDIA's datasheets.
GAVEL_SPECS = {
    "v100": GpuSpec.of(Device="V100 SXM2", Num_Sm=80, Core_Per_SM=64, Freq=1530,
                    SingleFLOPs=15700, Mem_Bw=900, L2Cache=6, Dev_Mem=16),
    "p100": GpuSpec.of(Device="P100 PCIe", Num_Sm=56, Core_Per_SM=64, Freq=1329,
                    SingleFLOPs=9300, Mem_Bw=732, L2Cache=4, Dev_Mem=16),
    "k80": GpuSpec.of(Device="K80 (one GK210)", Num_Sm=13, Core_Per_SM=192, Freq=875,
                   SingleFLOPs=4370, Mem_Bw=240, L2Cache=1.5, Dev_Mem=12),
}  # fmt: skip


def _flops(kernels: GpuKernels) -> float:
    total = 0.0
    for op_class in ("linear", "bmm", "conv"):
        if not kernels.factor[op_class]:
            continue
        d = kernels.columns(op_class)
        factor = np.array(kernels.factor[op_class])
        if op_class == "conv":
            out = np.maximum(
                np.floor((d["Input"] + 2 * d["Padding"] - d["Kernel"]) / d["Stride"]) + 1, 1
            )
            flops = 2 * d["B"] * out**2 * d["Cout"] * d["Cin"] * d["Kernel"] ** 2
        else:
            flops = 2 * d["B"] * d["M"] * d["N"] * d["K"]
        total += float((flops * factor).sum())
    return total


def _roofline_s(kernels: GpuKernels, spec: GpuSpec) -> float:
    from tools.estimators.gpu.opcost import spec_columns

    total = 0.0
    for op_class in OP_CLASSES:
        factor = np.array(kernels.factor[op_class])
        if len(factor):
            roof, _ = class_features(
                op_class, kernels.columns(op_class), spec_columns(spec, len(factor))
            )
            total += float((roof * factor).sum()) / 1e3
    return total


def _analytic_s(kernels: GpuKernels, spec: GpuSpec) -> float:
    return GPU_STEP_OVERHEAD_S + _flops(kernels) / (spec.fp32_gflops * 1e9 * GPU_EFFICIENCY)


def _summary(pairs: list[tuple[float, float]]) -> dict[str, float]:
    predicted = np.array([p for p, _ in pairs])
    measured = np.array([m for _, m in pairs])
    ape = np.abs(predicted / measured - 1)
    return {
        "n": len(pairs),
        "mape": float(ape.mean()),
        "max_ape": float(ape.max()),
        "under_rate": float(np.mean(predicted < measured)),
    }


def gavel_points() -> list[tuple[str, str, int, float]]:
    import re

    document = json.loads(GAVEL.read_text(encoding="utf-8"))
    pattern = re.compile(r"^\('(ResNet-18|ResNet-50) \(batch size (\d+)\)', 1\)$")
    out = []
    for gpu in GAVEL_SPECS:
        for key, value in document[gpu].items():
            match = pattern.match(key)
            if match and float(value["null"]) > 0:
                out.append((gpu, match[1], int(match[2]), 1.0 / float(value["null"])))
    return out


def _gavel_task(model: str, batch: int) -> Any:
    import torch

    from tools.profiling.zoo.registry import TrainingTask
    from tools.profiling.zoo.vision import ResNet

    with torch.device("meta"):
        net = (
            ResNet(18, 64, 32, 10)
            if model == "ResNet-18"
            else ResNet(50, 64, 224, 1000, bottleneck=True)
        )
    size = 32 if model == "ResNet-18" else 224
    x = torch.empty(batch, 3, size, size, device="meta")
    return TrainingTask(net, (x,), torch.empty(batch, dtype=torch.long, device="meta"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    root = default_neusight_root()
    report: dict[str, Any] = {}
    data = load_kernels(root)
    specs = load_device_specs(root)

    started = time.perf_counter()
    validation = validate(root, data, log=False)
    report["logo_seconds"] = time.perf_counter() - started
    print(
        "\n## Per operator class, leave one GPU out (kernel MAPE / time-weighted error / "
        "sum bias; roofline MAPE)"
    )
    print(
        "| class | "
        + " | ".join(g.replace("NVIDIA_", "").replace("Tesla_", "") for g in TRAINING_GPUS)
        + " |"
    )
    print("|---|" + "---|" * len(TRAINING_GPUS))
    for op_class in OP_CLASSES:
        cells = []
        for gpu in TRAINING_GPUS:
            m = validation.kernel[gpu].get(op_class)
            cells.append(
                "-"
                if m is None
                else f"{m['mape']:.0%} / {m['time_weighted_error']:.0%} / "
                f"x{m['bias']:.2f}; {m['roofline_mape']:.0%}"
            )
        print(f"| {op_class} | " + " | ".join(cells) + " |")
    report["kernel"] = validation.kernel

    # End to end: ours, roofline, analytic; intervals from the other GPUs' residuals.
    traced: dict[tuple[str, bool, int, int], GpuKernels] = {}
    from tools.estimators.gpu.neusight import hf_task

    rows = []
    for run in validation.e2e:
        key = (run["model"], run["mode"] == "train", run["seq"], run["batch"])
        if key not in traced:
            task = hf_task(root, run["model"], run["seq"], run["batch"])
            traced[key] = kernels_of(trace_training_step(task, backward=key[1]))
        spec = specs[run["gpu"]]
        others = np.array(
            [
                np.log(r["measured_ms"] / r["predicted_ms"])
                for r in validation.e2e
                if r["gpu"] != run["gpu"]
            ]
        )
        low, high = np.quantile(others, 0.10), np.quantile(others, 0.90)
        measured = run["measured_ms"] / 1e3
        ours = run["predicted_ms"] / 1e3
        rows.append(
            {
                **run,
                "ours_s": ours,
                "measured_s": measured,
                "roofline_s": _roofline_s(traced[key], spec),
                "analytic_s": _analytic_s(traced[key], spec),
                "covered": bool(ours * np.exp(low) <= measured <= ours * np.exp(high)),
            }
        )
    print("\n## End to end (NeuSight's runs), each GPU by a model that never saw it")
    print("| runs | estimator | MAPE | max APE | under-prediction | p10-p90 coverage |")
    print("|---|---|---|---|---|---|")
    for label, subset in (
        ("all", rows),
        ("train (V100)", [r for r in rows if r["mode"] == "train"]),
        ("inference", [r for r in rows if r["mode"] == "inf"]),
    ):
        if not subset:
            continue
        for name, column in (
            ("per-operator (ours)", "ours_s"),
            ("roofline", "roofline_s"),
            ("analytic fallback", "analytic_s"),
        ):
            s = _summary([(r[column], r["measured_s"]) for r in subset])
            coverage = (
                f"{np.mean([r['covered'] for r in subset]):.2f}" if column == "ours_s" else "-"
            )
            print(
                f"| {label} ({s['n']}) | {name} | {s['mape']:.1%} | {s['max_ape']:.1%} | "
                f"{s['under_rate']:.2f} | {coverage} |"
            )
    print("\n| GPU | runs | ours MAPE | bias (pred/meas, median) |")
    print("|---|---|---|---|")
    for gpu in TRAINING_GPUS:
        subset = [r for r in rows if r["gpu"] == gpu]
        if subset:
            ratio = np.median([r["ours_s"] / r["measured_s"] for r in subset])
            s = _summary([(r["ours_s"], r["measured_s"]) for r in subset])
            print(f"| {gpu} | {len(subset)} | {s['mape']:.1%} | x{ratio:.2f} |")
    report["e2e"] = rows

    # Gavel CNNs.
    full = fit_all(data)
    without_v100 = fit_all(data, exclude="Tesla_V100-PCIE-32GB")
    gavel_rows = []
    cache: dict[tuple[str, int], tuple[GpuKernels, int]] = {}
    for gpu, model_name, batch, step_s in gavel_points():
        if (model_name, batch) not in cache:
            task = _gavel_task(model_name, batch)
            cache[(model_name, batch)] = (
                kernels_of(trace_training_step(task)),
                sum(p.numel() for p in task.model.parameters()),
            )
        kernels, parameters = cache[(model_name, batch)]
        model: GpuStepModel = without_v100 if gpu == "v100" else full
        estimate = model.estimate(kernels, GAVEL_SPECS[gpu], parameters=parameters)
        gavel_rows.append(
            {
                "gpu": gpu,
                "model": model_name,
                "batch": batch,
                "measured_s": step_s,
                "ours_s": estimate.step_s.p50,
                "roofline_s": _roofline_s(kernels, GAVEL_SPECS[gpu]),
                "analytic_s": _analytic_s(kernels, GAVEL_SPECS[gpu]),
            }
        )
    print("\n## Gavel CNNs (SGD step; V100 by the model that never saw V100)")
    print("| GPU | points | ours MAPE | ours under | roofline MAPE | analytic MAPE |")
    print("|---|---|---|---|---|---|")
    for gpu in GAVEL_SPECS:
        subset = [r for r in gavel_rows if r["gpu"] == gpu]
        ours = _summary([(r["ours_s"], r["measured_s"]) for r in subset])
        roof = _summary([(r["roofline_s"], r["measured_s"]) for r in subset])
        ana = _summary([(r["analytic_s"], r["measured_s"]) for r in subset])
        print(
            f"| {gpu} | {len(subset)} | {ours['mape']:.1%} | {ours['under_rate']:.2f} | "
            f"{roof['mape']:.1%} | {ana['mape']:.1%} |"
        )
    report["gavel"] = gavel_rows

    # Time of one estimate: one model on every GPU model of the seeded catalog.
    from knowledge_base.catalog import Catalog
    from tools.estimators.gpu.answer import catalog_gpus
    from tools.estimators.gpu.estimator import load_step_model

    catalog = Catalog.model_validate_json(
        (REPO / "knowledge_base/seed/catalog.json").read_text(encoding="utf-8")
    )
    gpus = [spec_for_catalog_gpu(g) for g in catalog_gpus(catalog).values()]
    shipped = load_step_model()
    started = time.perf_counter()
    task = _gavel_task("ResNet-50", 64)
    kernels = kernels_of(trace_training_step(task))
    traced_s = time.perf_counter() - started
    for spec in gpus:
        shipped.estimate(kernels, spec, parameters=25_000_000)
    total_s = time.perf_counter() - started
    print(
        f"\n## One estimate: ResNet-50 batch 64 on all {len(gpus)} catalog GPU models: "
        f"{total_s:.2f} s (trace {traced_s:.2f} s, pricing {total_s - traced_s:.2f} s)"
    )
    report["one_estimate_s"] = total_s
    if args.json:
        args.json.write_text(json.dumps(report, indent=1, default=str), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
