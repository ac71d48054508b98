"""Fit, validate (leave one GPU out) and ship the per-operator GPU cost model.

    python -m tools.estimators.gpu.train [--out data/gpu_models/opcost.json]
        [--traced-cache PKL] [--in-model] [--spec-features CLASSES] [--memory-floor]

For each training GPU, every operator class's shape model is refitted on the other four
GPUs' kernels and the level line on the other four GPUs' end-to-end runs (each of their
levels measured against shape models that saw neither them nor the left-out GPU); the
left-out GPU is predicted per class (kernels) and end to end (NeuSight's whole-model runs
on it). The end-to-end log residuals of those folds calibrate p10/p90
(``interval_quantiles``); the shipped model is then fitted on all five GPUs. Reads only
the shared NeuSight data (``--neusight`` overrides its folder). ``--in-model``
adds the in-model node latencies of the end-to-end runs to the shape trees' rows
(``inmodel``; a left-out GPU's go with its kernels); ``--spec-features CLASSES`` gives
those classes' trees the GPU-spec inputs (``opcost.SPEC_INPUTS``; default
``SHIPPED_SPEC_CLASSES``, ``all`` or ``none`` for the trees of every class with or
without them); ``--memory-floor`` holds element-wise, layer norm and softmax kernels at
least at their memory roofline and solves each run's level through that floor (not
shipped: leaving one GPU out it erred 7.3 / 7.7 / 7.9% against 7.0 / 7.2 / 7.4% on
seeds 0 / 1 / 2). The shipped model is fitted with the spec inputs in the linear,
convolution and element-wise trees and without the in-model nodes (docs/estimators.md
section 8 says why), so the plain command rebuilds it.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from tools.estimators.gpu.baselines import MATRIX_CLASSES, analytic_s, kernel_flops, roofline_s
from tools.estimators.gpu.estimator import DEFAULT_MODEL_PATH, GpuStepModel
from tools.estimators.gpu.features import OP_CLASSES, class_features
from tools.estimators.gpu.inmodel import load_in_model_rows, merge_rows
from tools.estimators.gpu.kernels import (
    TRAINING_GPUS,
    KernelRows,
    default_neusight_root,
    load_device_specs,
    load_kernels,
)
from tools.estimators.gpu.level import GpuLevel, fit_level
from tools.estimators.gpu.neusight import E2ERun, hf_task, load_e2e_runs
from tools.estimators.gpu.opcost import IN_MODEL_WEIGHT, fit_class
from tools.estimators.gpu.ops import GpuKernels, kernels_of
from tools.estimators.gpu.specs import GpuSpec
from tools.estimators.gpu.trace import trace_training_step

__all__ = [
    "SHIPPED_SPEC_CLASSES",
    "Validation",
    "e2e_kernels",
    "e2e_levels",
    "fit_all",
    "fit_step_model",
    "interval_quantiles",
    "load_training_rows",
    "main",
    "model_family",
    "spec_classes_arg",
    "summary",
    "traced_runs",
    "validate",
    "validate_family_out",
]


# The classes whose shape trees take the GPU-spec inputs in the shipped model
# (gpu-opcost-20261201): where they lower the leave-one-GPU-out error end to end (the
# element-wise and linear trees carry the gain). The batched products, layer norm and
# softmax go without: with them an L4 (the ridge, L2 and FLOP/s per SM of no training
# board) was priced up to 1.2-1.4x a T4 on those classes, for no gain on the runs.
SHIPPED_SPEC_CLASSES: tuple[str, ...] = ("linear", "conv", "elementwise")
# Whether the shipped model prices memory-bound kernels at least at their memory roofline
# (``GpuStepModel.memory_floor``).
SHIPPED_MEMORY_FLOOR = False


def fit_all(
    data: dict[str, KernelRows],
    exclude: str | tuple[str, ...] | None = None,
    spec_classes: tuple[str, ...] = (),
    seed: int = 0,
    memory_floor: bool = False,
) -> GpuStepModel:
    """The per-class shape models on every GPU's kernels but ``exclude``'s (no level);
    the classes in ``spec_classes`` also take the GPU-spec inputs (``opcost.SPEC_INPUTS``);
    ``seed``: the kernels' subsample and the trees' (``opcost.fit_class``);
    ``memory_floor``: the step model's (``GpuStepModel.memory_floor``)."""
    left_out = (exclude,) if isinstance(exclude, str) else tuple(exclude or ())
    classes = {}
    for op_class in OP_CLASSES:
        rows = data[op_class]
        if left_out:
            rows = rows.subset(~np.isin(rows.gpu, left_out))
        options: dict[str, Any] = {"spec_features": True} if op_class in spec_classes else {}
        if seed:
            options["seed"] = seed
        classes[op_class] = fit_class(rows, **options)
    return GpuStepModel(classes, memory_floor=memory_floor)


def load_training_rows(root: Path, in_model: bool = False) -> dict[str, KernelRows]:
    """NeuSight's isolated kernels of the training GPUs, with (``in_model``) the
    forward latencies of the nodes of their end-to-end runs (``inmodel``) appended."""
    data = load_kernels(root)
    if not in_model:
        return data
    nodes = load_in_model_rows(root, TRAINING_GPUS)
    return {c: merge_rows(rows, nodes[c]) for c, rows in data.items()}


_Z90 = 1.2815515655446004  # the standard normal's 90th percentile

Traced = dict[tuple[str, bool, int, int], tuple[GpuKernels, int]]


def e2e_kernels(root: Path, runs: list[E2ERun]) -> Traced:
    """Traced kernels (and parameter count) of each distinct model, mode, length, batch."""
    out: Traced = {}
    for run in runs:
        if run.key in out:
            continue
        task = hf_task(root, run.model, run.seq, run.batch)
        graph = trace_training_step(task, backward=run.train)
        out[run.key] = (kernels_of(graph), sum(p.numel() for p in task.model.parameters()))
    return out


def e2e_levels(
    model: GpuStepModel, runs: list[E2ERun], traced: Traced, specs: dict[str, GpuSpec]
) -> dict[str, float]:
    """Each GPU's mean log(measured / shape model) over its end-to-end runs (with the
    memory floor, each run's level solved through it: ``GpuStepModel.level_for``)."""
    shape_only = GpuStepModel(
        model.classes, level=GpuLevel(0.0, 0.0, 0.0, 0.0), memory_floor=model.memory_floor
    )
    residuals: dict[str, list[float]] = {}
    for run in runs:
        level = shape_only.level_for(traced[run.key][0], specs[run.gpu], run.latency_ms / 1e3)
        residuals.setdefault(run.gpu, []).append(level)
    return {gpu: float(np.mean(values)) for gpu, values in residuals.items()}


def fit_step_model(
    data: dict[str, KernelRows],
    runs: list[E2ERun],
    traced: Traced,
    specs: dict[str, GpuSpec],
    exclude: str | None = None,
    spec_classes: tuple[str, ...] = (),
    seed: int = 0,
    memory_floor: bool = False,
) -> GpuStepModel:
    """Shape models on the kernels, the level line on the end-to-end runs; both without
    ``exclude`` (the left-out GPU of a leave-one-GPU-out fold).

    Each GPU's level is measured against shape models fitted without that GPU's kernels
    too: a GPU never seen gets shape predictions from trees that never saw it, so the
    level line must map such out-of-sample predictions to whole-model times.
    """
    options: dict[str, Any] = {"spec_classes": spec_classes, "seed": seed}
    model = fit_all(data, exclude=exclude, memory_floor=memory_floor, **options)
    levels: dict[str, float] = {}
    for gpu in sorted({r.gpu for r in runs} - {exclude}):
        left_out = tuple(g for g in (exclude, gpu) if g is not None)
        inner = fit_all(data, exclude=left_out, memory_floor=memory_floor, **options)
        levels |= e2e_levels(inner, [r for r in runs if r.gpu == gpu], traced, specs)
    model.level = fit_level(levels, specs)
    return model


@dataclass(slots=True)
class Validation:
    """Leave-one-GPU-out results: per-class kernel errors and end-to-end predictions."""

    kernel: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)
    e2e: list[dict[str, Any]] = field(default_factory=list)

    def e2e_log_residuals(self) -> np.ndarray:
        return np.array([np.log(r["measured_ms"] / r["predicted_ms"]) for r in self.e2e])

    def residuals_by_gpu(self, exclude: str | None = None) -> dict[str, list[float]]:
        out: dict[str, list[float]] = {}
        for r in self.e2e:
            if r["gpu"] != exclude:
                out.setdefault(r["gpu"], []).append(math.log(r["measured_ms"] / r["predicted_ms"]))
        return out


def _errors(predicted: np.ndarray, actual: np.ndarray) -> dict[str, float]:
    return {
        "mape": float(np.mean(np.abs(predicted / actual - 1))),
        "under_rate": float(np.mean(predicted < actual)),
        "bias": float(predicted.sum() / actual.sum()),
    }


def _in_model_metrics(model: GpuStepModel, rows: KernelRows) -> dict[str, Any]:
    """One class's in-model node rows on one left-out GPU: ours (in-model shape x
    whole-model level) and the roofline."""
    assert model.level is not None
    shape = model.classes[rows.op_class].shape_ms(rows.dims, rows.spec, in_model=True)
    ours = shape * np.exp(model.level.at(np.log(rows.spec["bandwidth_gbs"])))
    roofline, _ = class_features(rows.op_class, rows.dims, rows.spec)
    actual = rows.latency_ms
    return {
        "nodes": float(len(rows)),
        **_errors(ours, actual),
        "time_weighted_error": float(np.abs(ours - actual).sum() / actual.sum()),
        "roofline": _errors(roofline, actual),
    }


def _kernel_metrics(model: GpuStepModel, rows: KernelRows) -> dict[str, Any]:
    """One class on one left-out GPU: ours (shape x level), the roofline, the analytic."""
    assert model.level is not None
    shape = model.classes[rows.op_class].shape_ms(rows.dims, rows.spec, in_model=False)
    ours = shape * np.exp(model.level.at(np.log(rows.spec["bandwidth_gbs"])))
    isolated = model.classes[rows.op_class].predict_ms(rows.dims, rows.spec)
    roofline, _ = class_features(rows.op_class, rows.dims, rows.spec)
    actual = rows.latency_ms
    out: dict[str, Any] = {
        "kernels": float(len(rows)),
        **_errors(ours, actual),
        "time_weighted_error": float(np.abs(ours - actual).sum() / actual.sum()),
        "isolated_level_mape": _errors(isolated, actual)["mape"],
        "roofline": _errors(roofline, actual),
    }
    if rows.op_class in MATRIX_CLASSES:
        from tools.planning.hardware import GPU_EFFICIENCY

        flops = kernel_flops(rows.op_class, rows.dims)
        out["analytic"] = _errors(flops / (rows.spec["fp32_gflops"] * 1e6 * GPU_EFFICIENCY), actual)
    return out


def validate(
    root: Path,
    data: dict[str, KernelRows],
    log: bool = True,
    traced: Traced | None = None,
    spec_classes: tuple[str, ...] = (),
    memory_floor: bool = False,
) -> Validation:
    """Each training GPU predicted by a model fitted (kernels and level) without it."""
    specs = load_device_specs(root)
    runs = load_e2e_runs(root, TRAINING_GPUS)
    traced = traced if traced is not None else e2e_kernels(root, runs)
    result = Validation()
    for gpu in TRAINING_GPUS:
        started = time.perf_counter()
        model = fit_step_model(
            data,
            runs,
            traced,
            specs,
            exclude=gpu,
            spec_classes=spec_classes,
            memory_floor=memory_floor,
        )
        result.kernel[gpu] = {}
        for c in OP_CLASSES:
            mask = (data[c].gpu == gpu) & ~data[c].in_model_mask
            if np.any(mask):
                result.kernel[gpu][c] = _kernel_metrics(model, data[c].subset(mask))
            nodes = (data[c].gpu == gpu) & data[c].in_model_mask
            if np.any(nodes) and c in result.kernel[gpu]:
                result.kernel[gpu][c]["in_model"] = _in_model_metrics(model, data[c].subset(nodes))
        for run in (r for r in runs if r.gpu == gpu):
            kernels, _ = traced[run.key]
            point_s, _ = model.forward_backward_s(kernels, specs[gpu])
            times = model.kernel_times_ms(kernels, specs[gpu])
            forward_ms = sum(
                float(t[~np.array(kernels.backward[c], dtype=bool)].sum())
                for c, t in times.items()
                if len(t)
            )
            result.e2e.append(
                {
                    "gpu": gpu,
                    "model": run.model,
                    "mode": "train" if run.train else "inf",
                    "seq": run.seq,
                    "batch": run.batch,
                    "measured_ms": run.latency_ms,
                    "measured_forward_ms": run.forward_ms,
                    "predicted_ms": point_s * 1e3,
                    "predicted_forward_ms": forward_ms,
                    "roofline_ms": roofline_s(kernels, specs[gpu]) * 1e3,
                    "analytic_ms": analytic_s(kernels, specs[gpu]) * 1e3,
                }
            )
        if log:
            print(f"fold {gpu}: {time.perf_counter() - started:.0f} s", flush=True)
    return result


def model_family(model: str) -> str:
    """NeuSight's model name without its size (``gpt3_xl`` and ``gpt3_27``: ``gpt3``)."""
    return model.split("_", 1)[0]


def validate_family_out(
    data: dict[str, KernelRows],
    runs: list[E2ERun],
    traced: Traced,
    specs: dict[str, GpuSpec],
    spec_classes: tuple[str, ...] = (),
    memory_floor: bool = False,
) -> list[dict[str, Any]]:
    """Each run predicted with its GPU left out and its model family left out of the
    level: the level line is fitted on the other GPUs' runs of the other families (each
    measured against shape models that saw neither GPU, as in ``fit_step_model``). The
    shape trees see no model unless the rows hold in-model nodes (``--in-model``: then
    the family's nodes on the other GPUs stay in them)."""
    out: list[dict[str, Any]] = []
    for gpu in TRAINING_GPUS:
        residuals: dict[str, list[tuple[str, float]]] = {}
        for other in sorted({r.gpu for r in runs} - {gpu}):
            inner = fit_all(
                data, exclude=(gpu, other), spec_classes=spec_classes, memory_floor=memory_floor
            )
            shape_only = GpuStepModel(
                inner.classes, level=GpuLevel(0.0, 0.0, 0.0, 0.0), memory_floor=memory_floor
            )
            for run in (r for r in runs if r.gpu == other):
                level = shape_only.level_for(traced[run.key][0], specs[other], run.latency_ms / 1e3)
                residuals.setdefault(other, []).append((model_family(run.model), level))
        model = fit_all(data, exclude=gpu, spec_classes=spec_classes, memory_floor=memory_floor)
        for family in sorted({model_family(r.model) for r in runs if r.gpu == gpu}):
            levels = {
                other: float(np.mean([v for f, v in values if f != family]))
                for other, values in residuals.items()
                if any(f != family for f, _ in values)
            }
            model.level = fit_level(levels, specs)
            for run in (r for r in runs if r.gpu == gpu and model_family(r.model) == family):
                point_s, _ = model.forward_backward_s(traced[run.key][0], specs[gpu])
                out.append(
                    {
                        "gpu": gpu,
                        "family": family,
                        "mode": "train" if run.train else "inf",
                        "measured_ms": run.latency_ms,
                        "predicted_ms": point_s * 1e3,
                    }
                )
    return out


def spec_classes_arg(text: str) -> tuple[str, ...]:
    """``--spec-features``: 'all', 'none' or comma-separated operator classes (an unknown
    one is named with the known ones)."""
    if text.strip() == "all":
        return OP_CLASSES
    if text.strip() == "none":
        return ()
    classes = tuple(c.strip() for c in text.split(",") if c.strip())
    unknown = [c for c in classes if c not in OP_CLASSES]
    if unknown or not classes:
        named = ", ".join(unknown) if unknown else repr(text)
        raise argparse.ArgumentTypeError(
            f"unknown operator class {named} (known: all, none, {', '.join(OP_CLASSES)})"
        )
    return classes


def interval_quantiles(residuals_by_gpu: dict[str, list[float]]) -> dict[str, float]:
    """p10/p90 log offsets from held-out end-to-end log residuals (measured / predicted).

    Residuals cluster by GPU (a GPU's level is off for all its runs alike), so pooled
    quantiles are too narrow for a GPU never seen: they covered 0.56 of the runs of each
    left-out GPU. The interval is the prediction interval of one run of a new GPU under a
    random GPU effect: centred on the mean of the k per-GPU mean residuals, with the
    variance between those means times (1 + 1/k) (that centre is itself estimated from k
    GPUs) plus the variance within GPUs, and Student's t with k - 1 degrees of freedom
    (each GPU weighs the same, whatever its number of runs). With the normal quantile and
    no 1 + 1/k the left-out GPUs' coverage was 0.68 on the in-model trees (0.76 before
    them); with both, 0.79 (0.82).
    """
    from scipy.stats import t as student_t

    groups = [np.asarray(v, dtype=np.float64) for v in residuals_by_gpu.values() if len(v)]
    if not groups:
        raise ValueError("no residuals to calibrate the interval on")
    means = np.array([g.mean() for g in groups])
    within = np.concatenate([g - g.mean() for g in groups])
    k = len(means)
    between_var = float(means.var(ddof=1)) * (1.0 + 1.0 / k) if k > 1 else 0.0
    within_var = float(within.var(ddof=1)) if len(within) > 1 else 0.0
    quantile = float(student_t.ppf(0.9, k - 1)) if k > 1 else _Z90
    spread = quantile * math.sqrt(between_var + within_var)
    centre = float(means.mean())
    return {"p10": centre - spread, "p50": 0.0, "p90": centre + spread}


def summary(validation: Validation) -> dict[str, Any]:
    """The figures the model file records: per class (kernels) and end to end."""
    rows = validation.e2e
    out: dict[str, Any] = {"e2e": {}, "kernel_by_class": {}}
    for label, subset in (
        ("all", rows),
        ("train", [r for r in rows if r["mode"] == "train"]),
        ("inf", [r for r in rows if r["mode"] == "inf"]),
    ):
        if not subset:
            continue
        measured = np.array([r["measured_ms"] for r in subset])
        out["e2e"][label] = {
            "runs": len(subset),
            **{
                name: {
                    **_errors(np.array([r[column] for r in subset]), measured),
                    "max_ape": float(
                        np.max(np.abs(np.array([r[column] for r in subset]) / measured - 1))
                    ),
                }
                for name, column in (
                    ("ours", "predicted_ms"),
                    ("roofline", "roofline_ms"),
                    ("analytic", "analytic_ms"),
                )
            },
        }
    for op_class in OP_CLASSES:
        folds = [k[op_class] for k in validation.kernel.values() if op_class in k]
        if not folds:
            continue
        weights = np.array([f["kernels"] for f in folds])
        entry: dict[str, Any] = {
            "ours_mape": float(np.average([f["mape"] for f in folds], weights=weights)),
            "roofline_mape": float(
                np.average([f["roofline"]["mape"] for f in folds], weights=weights)
            ),
        }
        nodes = [f["in_model"] for f in folds if "in_model" in f]
        if nodes:
            counts = np.array([f["nodes"] for f in nodes])
            entry["in_model_nodes"] = int(counts.sum())
            entry["in_model_mape"] = float(np.average([f["mape"] for f in nodes], weights=counts))
            entry["in_model_roofline_mape"] = float(
                np.average([f["roofline"]["mape"] for f in nodes], weights=counts)
            )
            entry["in_model_time_weighted_error"] = float(
                np.average([f["time_weighted_error"] for f in nodes], weights=counts)
            )
        if all("analytic" in f for f in folds):
            entry["analytic_mape"] = float(
                np.average([f["analytic"]["mape"] for f in folds], weights=weights)
            )
        out["kernel_by_class"][op_class] = entry
    return out


def traced_runs(root: Path, runs: list[E2ERun], cache: Path | None = None) -> Traced:
    """``e2e_kernels``, read from / written to a pickle ``cache`` when one is given."""
    import pickle

    if cache is not None and cache.exists():
        traced: Traced = pickle.loads(cache.read_bytes())
        if all(run.key in traced for run in runs):
            return traced
    traced = e2e_kernels(root, runs)
    if cache is not None:
        cache.write_bytes(pickle.dumps(traced))
    return traced


def next_version(out: Path, today: dt.date) -> str:
    """The model's version: today's date, with a letter after it when the file at ``out``
    already holds a fit of today (``20261126``, then ``20261126b``): one id, one fit."""
    version = today.strftime("%Y%m%d")
    try:
        previous = str(json.loads(out.read_text(encoding="utf-8"))["meta"]["version"])
    except (OSError, ValueError, KeyError, TypeError):
        return version
    if not previous.startswith(version):
        return version
    letter = previous[len(version) :] or "a"
    return version + chr(ord(letter[-1]) + 1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_MODEL_PATH)
    parser.add_argument("--neusight", type=Path, default=None)
    parser.add_argument(
        "--in-model",
        action="store_true",
        help="also fit the shape trees on the in-model node latencies of the end-to-end "
        "runs (tools.estimators.gpu.inmodel; not shipped: see docs/estimators.md section 8)",
    )
    parser.add_argument(
        "--spec-features",
        type=spec_classes_arg,
        default=SHIPPED_SPEC_CLASSES,
        metavar="CLASSES",
        help="comma-separated operator classes, 'all' or 'none', whose shape trees also "
        f"take the GPU-spec inputs (opcost.SPEC_INPUTS; default, the shipped model's: "
        f"{','.join(SHIPPED_SPEC_CLASSES)}): see docs/estimators.md section 8",
    )
    parser.add_argument(
        "--memory-floor",
        action=argparse.BooleanOptionalAction,
        default=SHIPPED_MEMORY_FLOOR,
        help="price element-wise, layer norm and softmax kernels at least at their memory "
        "roofline, the level solved through that floor (GpuStepModel.memory_floor; "
        f"shipped: {SHIPPED_MEMORY_FLOOR})",
    )
    parser.add_argument(
        "--traced-cache",
        type=Path,
        default=None,
        help="pickle of the traced end-to-end models: read if it exists, else written "
        "(tracing the 13 Hugging Face models takes minutes; delete it when ops.py changes)",
    )
    args = parser.parse_args(argv)
    root = args.neusight or default_neusight_root()
    started = time.perf_counter()
    data = load_training_rows(root, in_model=args.in_model)
    specs = load_device_specs(root)
    runs = load_e2e_runs(root, TRAINING_GPUS)
    traced = traced_runs(root, runs, args.traced_cache)
    print(f"traced {len(traced)} models: {time.perf_counter() - started:.0f} s", flush=True)
    spec_classes: tuple[str, ...] = args.spec_features
    floor: bool = args.memory_floor
    validation = validate(root, data, traced=traced, spec_classes=spec_classes, memory_floor=floor)
    residuals = validation.e2e_log_residuals()
    model = fit_step_model(data, runs, traced, specs, spec_classes=spec_classes, memory_floor=floor)
    figures = summary(validation)
    model.log_residual_quantiles = interval_quantiles(validation.residuals_by_gpu())
    ours = figures["e2e"]["all"]["ours"]
    model.meta = {
        "version": next_version(args.out, dt.date.today()),
        "trained_on": list(TRAINING_GPUS),
        "source": "NeuSight ASPLOS'25 artifact (MIT), shared/data/dnn_profiles/neusight: "
        + (
            "isolated kernels and the in-model forward latencies of the end-to-end runs' "
            f"nodes (weight {IN_MODEL_WEIGHT:g}) for the shape models"
            if args.in_model
            else "isolated kernels for the shape models"
        )
        + ", single-GPU end-to-end runs for the level"
        + (f"; GPU-spec inputs in the {','.join(spec_classes)} trees" if spec_classes else ""),
        "retrain": "python -m tools.estimators.gpu.train --out data/gpu_models/opcost.json"
        + (" --in-model" if args.in_model else "")
        + f" --spec-features {','.join(spec_classes) if spec_classes else 'none'}"
        + (" --memory-floor" if floor else " --no-memory-floor"),
        "fit_seconds": round(time.perf_counter() - started, 1),
        "validation": {
            "method": "leave one GPU out: shape models (its kernels and its runs' nodes) "
            "and level refitted without that GPU",
            "e2e_mape": ours["mape"],
            "e2e_max_ape": ours["max_ape"],
            "analytic_e2e_mape": figures["e2e"]["all"]["analytic"]["mape"],
            "roofline_e2e_mape": figures["e2e"]["all"]["roofline"]["mape"],
            "summary": figures,
            "e2e_runs": validation.e2e,
            "kernel": validation.kernel,
        },
    }
    model.save(args.out)
    print(
        f"saved {args.out}: e2e leave-one-GPU-out MAPE {ours['mape']:.3f} "
        f"(max {ours['max_ape']:.3f}; analytic {figures['e2e']['all']['analytic']['mape']:.3f}, "
        f"roofline {figures['e2e']['all']['roofline']['mape']:.3f}) over {len(residuals)} runs",
        flush=True,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
