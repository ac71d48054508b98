"""Leave-one-GPU-out benchmark of the per-operator GPU estimator (issue #16).

    nice -n 10 .venv/bin/python benchmarks/gpu_estimators.py [--json OUT] [--traced-cache PKL]
        [--in-model] [--spec-features CLASSES] [--memory-floor] [--family-out]

Every figure is for a GPU the model never saw: for each NeuSight training GPU (P4, P100,
T4, V100, A100-40GB) the shape models (on the kernels) and the level line (on the
end-to-end runs) are refitted without it, and it is predicted:

1. per operator class, every kernel NeuSight timed in isolation on it;
2. end to end, NeuSight's whole-model runs on it (``train``: forward + backward;
   ``inf``: forward);

(``--spec-features CLASSES``, default the shipped model's linear, conv and elementwise:
those classes' shape trees take the GPU-spec inputs, ``opcost.SPEC_INPUTS``; with
``--in-model``, the shape trees also learn from the in-model node latencies of the other
GPUs' runs, and each class's left-out in-model nodes are scored too; the training runs'
forward and backward are compared apart, against ``fw_latency``/``bwall_latency``);
both beside the roofline (sum of the kernels' rooflines) and the analytic fallback
(matrix FLOPs over peak x the Gavel-fitted efficiency, plus its per-step overhead; it
gives memory-bound kernels no time). p10-p90 coverage: each GPU's interval from the other
GPUs' held-out residuals only. MAPE, under-prediction rate, coverage in one table.
3. Gavel's CNNs (ResNet-18/CIFAR-10, ResNet-50/ImageNet, SGD step): V100 by the model
   that never saw V100, and by that model with its level refitted on Gavel's own K80 and
   P100 steps (``GpuStepModel.recalibrated``: a center's measurements); K80 and P100 by
   the same two (the second saw them: in-sample);

and the time one estimate takes: ResNet-50 traced once, priced on every GPU model of the
seeded catalog.
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

from rightsize.settings import Settings
from tools.estimators.gpu.baselines import analytic_s, roofline_s
from tools.estimators.gpu.features import OP_CLASSES
from tools.estimators.gpu.kernels import TRAINING_GPUS, default_neusight_root, load_device_specs
from tools.estimators.gpu.neusight import load_e2e_runs
from tools.estimators.gpu.ops import GpuKernels, kernels_of
from tools.estimators.gpu.specs import GpuSpec, spec_for_catalog_gpu
from tools.estimators.gpu.trace import trace_training_step
from tools.estimators.gpu.train import (
    SHIPPED_MEMORY_FLOOR,
    SHIPPED_SPEC_CLASSES,
    interval_quantiles,
    load_training_rows,
    spec_classes_arg,
    summary,
    traced_runs,
    validate,
    validate_family_out,
)

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


def gavel_points(table: str = "") -> list[tuple[str, str, int, float]]:
    """Gavel's one-GPU ResNet steps (seconds) per GPU; ``table="_unconsolidated"``: the
    same configurations from Gavel's other table (a second reading of each)."""
    import re

    document = json.loads(GAVEL.read_text(encoding="utf-8"))
    pattern = re.compile(r"^\('(ResNet-18|ResNet-50) \(batch size (\d+)\)', 1\)$")
    out = []
    for gpu in GAVEL_SPECS:
        for key, value in document[gpu + table].items():
            match = pattern.match(key)
            if match and float(value["null"]) > 0:
                out.append((gpu, match[1], int(match[2]), 1.0 / float(value["null"])))
    return out


def gavel_repeatability(rows: list[dict[str, Any]]) -> str:
    """How far Gavel's own two readings of each one-GPU configuration lie apart, and ours
    against the second reading: the floor under any model's error on these points."""
    second = {(g, m, b): s for g, m, b, s in gavel_points("_unconsolidated")}
    lines = [
        "| GPU | points | Gavel's two readings apart (mean / max) | identical | ours against "
        "the second reading |",
        "|---|---|---|---|---|",
    ]
    for gpu in GAVEL_SPECS:
        pairs = [
            (r, second[(gpu, r["model"], r["batch"])])
            for r in rows
            if r["gpu"] == gpu and (gpu, r["model"], r["batch"]) in second
        ]
        if not pairs:
            continue
        apart = [abs(r["measured_s"] / other - 1) for r, other in pairs]
        ours = _summary([(r["ours_s"], other) for r, other in pairs])
        lines.append(
            f"| {gpu} | {len(pairs)} | {np.mean(apart):.1%} / {max(apart):.1%} | "
            f"{sum(a == 0 for a in apart)} | {ours['mape']:.1%} |"
        )
    return "\n".join(lines)


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


def _row(label: str, name: str, s: dict[str, float], coverage: str = "-") -> str:
    return (
        f"| {label} | {name} | {s['mape']:.1%} | {s['max_ape']:.1%} | {s['under_rate']:.2f} "
        f"| {coverage} |"
    )


def _gavel(
    data: Any,
    specs: dict[str, GpuSpec],
    traced: Any,
    spec_classes: tuple[str, ...] = (),
    seed: int = 0,
    memory_floor: bool = SHIPPED_MEMORY_FLOOR,
) -> list[dict[str, Any]]:
    """Gavel's CNN steps: V100 by the model that never saw V100 (NeuSight only), and by
    that model with its level refitted on Gavel's own K80 and P100 steps."""
    from tools.estimators.gpu.estimator import StepMeasurement
    from tools.estimators.gpu.train import fit_step_model

    runs = load_e2e_runs(default_neusight_root(Settings().neusight), TRAINING_GPUS)
    without_v100 = fit_step_model(
        data,
        runs,
        traced,
        specs,
        exclude="Tesla_V100-PCIE-32GB",
        spec_classes=spec_classes,
        seed=seed,
        memory_floor=memory_floor,
    )
    cache: dict[tuple[str, int], tuple[GpuKernels, int]] = {}
    points = []
    for gpu, model_name, batch, step_s in gavel_points():
        if (model_name, batch) not in cache:
            task = _gavel_task(model_name, batch)
            cache[(model_name, batch)] = (
                kernels_of(trace_training_step(task)),
                sum(p.numel() for p in task.model.parameters()),
            )
        points.append((gpu, model_name, batch, step_s, *cache[(model_name, batch)]))
    center = without_v100.recalibrated(
        [
            StepMeasurement(kernels, GAVEL_SPECS[gpu], parameters, "sgd", step_s)
            for gpu, _, _, step_s, kernels, parameters in points
            if gpu != "v100"
        ]
    )
    rows = []
    for gpu, model_name, batch, step_s, kernels, parameters in points:
        spec = GAVEL_SPECS[gpu]
        rows.append(
            {
                "gpu": gpu,
                "model": model_name,
                "batch": batch,
                "measured_s": step_s,
                "ours_s": without_v100.estimate(kernels, spec, parameters=parameters).step_s.p50,
                "center_s": center.estimate(kernels, spec, parameters=parameters).step_s.p50,
                "roofline_s": roofline_s(kernels, spec),
                "analytic_s": analytic_s(kernels, spec),
            }
        )
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument(
        "--traced-cache", type=Path, default=None, help="as python -m tools.estimators.gpu.train"
    )
    parser.add_argument(
        "--in-model",
        action="store_true",
        help="shape trees also on the in-model node latencies (train.py --in-model)",
    )
    parser.add_argument(
        "--spec-features",
        type=spec_classes_arg,
        default=SHIPPED_SPEC_CLASSES,
        metavar="CLASSES",
        help="those classes' shape trees also take the GPU-spec inputs (train.py "
        "--spec-features; 'all', 'none' or comma-separated classes; default the shipped "
        "model's, train.SHIPPED_SPEC_CLASSES)",
    )
    parser.add_argument(
        "--memory-floor",
        action=argparse.BooleanOptionalAction,
        default=SHIPPED_MEMORY_FLOOR,
        help="memory-bound kernels at least at their memory roofline (train.py --memory-floor)",
    )
    parser.add_argument(
        "--family-out",
        action="store_true",
        help="also leave each run's model family out of the level (a few more minutes)",
    )
    args = parser.parse_args()
    root = default_neusight_root(Settings().neusight)
    report: dict[str, Any] = {}
    data = load_training_rows(root, in_model=args.in_model)
    specs = load_device_specs(root)

    started = time.perf_counter()
    runs = load_e2e_runs(root, TRAINING_GPUS)
    traced = traced_runs(root, runs, args.traced_cache)
    validation = validate(
        root,
        data,
        log=False,
        traced=traced,
        spec_classes=args.spec_features,
        memory_floor=args.memory_floor,
    )
    report["logo_seconds"] = time.perf_counter() - started
    figures = summary(validation)
    report["summary"] = figures

    # End-to-end intervals: each GPU's p10/p90 from the other GPUs' held-out residuals.
    for run in validation.e2e:
        q = interval_quantiles(validation.residuals_by_gpu(exclude=run["gpu"]))
        point = run["predicted_ms"]
        run["covered"] = bool(
            point * np.exp(q["p10"]) <= run["measured_ms"] <= point * np.exp(q["p90"])
        )
    report["e2e"] = validation.e2e

    print(
        "\n## Leave one GPU out: each NeuSight training GPU predicted by a model fitted without it"
    )
    print("| labels | estimator | MAPE | max APE | under-prediction | p10-p90 coverage |")
    print("|---|---|---|---|---|---|")
    for op_class in OP_CLASSES:
        folds = [
            validation.kernel[g][op_class]
            for g in TRAINING_GPUS
            if op_class in validation.kernel[g]
        ]
        kernels_n = int(sum(f["kernels"] for f in folds))
        weights = np.array([f["kernels"] for f in folds])
        label = f"{op_class} kernels ({kernels_n})"
        for name, key in (
            ("per-operator (ours)", ""),
            ("roofline", "roofline"),
            ("analytic fallback", "analytic"),
        ):
            parts: list[dict[str, Any]] = [f if not key else f.get(key, {}) for f in folds]
            if not all(parts):
                continue
            s = {
                "mape": float(np.average([p["mape"] for p in parts], weights=weights)),
                "max_ape": float("nan"),
                "under_rate": float(np.average([p["under_rate"] for p in parts], weights=weights)),
            }
            print(_row(label, name, s).replace("| nan% |", "| - |"))
        nodes = [f["in_model"] for f in folds if "in_model" in f]
        if nodes:
            counts = np.array([f["nodes"] for f in nodes])
            label = f"{op_class} in-model nodes ({int(counts.sum())})"
            for name, key in (("per-operator (ours)", ""), ("roofline", "roofline")):
                parts = [f if not key else f[key] for f in nodes]
                s = {
                    "mape": float(np.average([p["mape"] for p in parts], weights=counts)),
                    "max_ape": float("nan"),
                    "under_rate": float(
                        np.average([p["under_rate"] for p in parts], weights=counts)
                    ),
                }
                print(_row(label, name, s).replace("| nan% |", "| - |"))
    rows = validation.e2e
    for label, subset in (
        ("end to end, all", rows),
        ("end to end, train (fw+bw, V100)", [r for r in rows if r["mode"] == "train"]),
        ("end to end, inference", [r for r in rows if r["mode"] == "inf"]),
    ):
        if not subset:
            continue
        label = f"{label} ({len(subset)})"
        coverage = f"{np.mean([r['covered'] for r in subset]):.2f}"
        for name, column in (
            ("per-operator (ours)", "predicted_ms"),
            ("roofline", "roofline_ms"),
            ("analytic fallback", "analytic_ms"),
        ):
            s = _summary([(r[column], r["measured_ms"]) for r in subset])
            print(_row(label, name, s, coverage if column == "predicted_ms" else "-"))
    print("\n| left-out GPU | runs | ours MAPE | ours max APE | pred/meas (median) | coverage |")
    print("|---|---|---|---|---|---|")
    for gpu in TRAINING_GPUS:
        subset = [r for r in rows if r["gpu"] == gpu]
        if subset:
            ratio = np.median([r["predicted_ms"] / r["measured_ms"] for r in subset])
            s = _summary([(r["predicted_ms"], r["measured_ms"]) for r in subset])
            cover = np.mean([r["covered"] for r in subset])
            print(
                f"| {gpu} | {len(subset)} | {s['mape']:.1%} | {s['max_ape']:.1%} "
                f"| x{ratio:.2f} | {cover:.2f} |"
            )

    print(
        "\n| training run (left-out V100) | forward pred/meas | backward pred/meas | bw/fw meas |"
    )
    print("|---|---|---|---|")
    for r in (r for r in rows if r["mode"] == "train"):
        bw_meas = r["measured_ms"] - r["measured_forward_ms"]
        bw_pred = r["predicted_ms"] - r["predicted_forward_ms"]
        print(
            f"| {r['model']} seq {r['seq']} batch {r['batch']} "
            f"| x{r['predicted_forward_ms'] / r['measured_forward_ms']:.2f} "
            f"| x{bw_pred / bw_meas:.2f} | {bw_meas / r['measured_forward_ms']:.2f} |"
        )

    if args.family_out:
        family_rows = validate_family_out(
            data, runs, traced, specs, args.spec_features, args.memory_floor
        )
        report["family_out"] = family_rows
        print("\n| left out: GPU and model family (level) | runs | ours MAPE | ours max APE |")
        print("|---|---|---|---|")
        families = sorted({r["family"] for r in family_rows})
        for label, subset in [("all", family_rows)] + [
            (f, [r for r in family_rows if r["family"] == f]) for f in families
        ]:
            s = _summary([(r["predicted_ms"], r["measured_ms"]) for r in subset])
            print(f"| {label} | {len(subset)} | {s['mape']:.1%} | {s['max_ape']:.1%} |")

    gavel_rows = _gavel(data, specs, traced, args.spec_features, memory_floor=args.memory_floor)
    print("\n## Gavel CNNs (ResNet-18/50, SGD step): V100 never seen")
    print(
        "| GPU | points | ours (NeuSight, no V100) | ours, level refitted on Gavel K80+P100 "
        "| roofline | analytic |"
    )
    print("|---|---|---|---|---|---|")
    for gpu in GAVEL_SPECS:
        subset = [r for r in gavel_rows if r["gpu"] == gpu]
        cells = []
        for column in ("ours_s", "center_s", "roofline_s", "analytic_s"):
            s = _summary([(r[column], r["measured_s"]) for r in subset])
            cells.append(f"{s['mape']:.1%} (under {s['under_rate']:.2f})")
        print(f"| {gpu} | {len(subset)} | " + " | ".join(cells) + " |")
    print("\n" + gavel_repeatability(gavel_rows))
    report["gavel"] = gavel_rows

    # Time of one estimate: one model on every GPU model of the seeded catalog.
    from knowledge_base.catalog import Catalog
    from tools.estimators.gpu.estimator import load_step_model
    from tools.estimators.gpu.specs import catalog_gpus

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
