"""Levers on the per-operator GPU model's error for a GPU never seen (issue 16).

    nice -n 10 .venv/bin/python benchmarks/gpu_levers.py [--traced-cache PKL]
        [--seeds 0,1,2] [--spec-sets all,linear+bmm,linear+bmm+ln+softmax] [--gavel]

The folds of ``benchmarks/gpu_estimators.py`` (``train.fit_step_model``): for each left-out
GPU the shape trees are fitted without it, each other GPU's level is its mean log
(measured / shape) over its end-to-end runs against trees fitted without both, and the
left-out GPU's level is read off a function of those four levels and the specs. The
shape-only step times of every run under every excluded set (5 single GPUs, 10 pairs)
are computed once per tree variant, so each level rule is arithmetic on them:

1. tree variants: the shipped trees, and with the GPU-spec inputs (``--spec-features``) in
   the classes of each ``--spec-sets`` entry; every variant for each subsample ``--seeds``;
2. a fixed overhead per kernel added to the sum (the levels refitted on what is left);
3. the level of an unseen GPU: a line in log bandwidth (shipped), log peak FP32, log SMs,
   log L2, log ridge; ridge regression on log bandwidth and log peak; the feature chosen by
   nested leave-one-GPU-out among the lines; the nearest GPU; one constant; and the
   roofline alone times the bandwidth line (no shape trees);
4. (``--gavel``) Gavel's CNN steps on V100 by the model fitted without V100, and the error
   left after the one factor that fits V100's points best (what no level can remove).

Also lists the ten runs with the largest error (kernels, time a kernel).
"""

from __future__ import annotations

import argparse
import itertools
import math
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from tools.estimators.gpu.baselines import roofline_s
from tools.estimators.gpu.estimator import GpuStepModel
from tools.estimators.gpu.kernels import TRAINING_GPUS, default_neusight_root, load_device_specs
from tools.estimators.gpu.level import GpuLevel
from tools.estimators.gpu.neusight import load_e2e_runs
from tools.estimators.gpu.specs import GpuSpec
from tools.estimators.gpu.train import fit_all, load_training_rows, spec_classes_arg, traced_runs

Table = dict[tuple[str, ...], dict[int, float]]
LevelRule = Callable[[dict[str, float], str], float]
FEATURES: dict[str, Callable[[GpuSpec], float]] = {
    "bandwidth": lambda s: math.log(s.bandwidth_gbs),
    "peak FP32": lambda s: math.log(s.fp32_gflops),
    "SMs": lambda s: math.log(s.sms),
    "L2": lambda s: math.log(s.l2_mb),
    "ridge": lambda s: math.log(s.fp32_gflops / s.bandwidth_gbs),
}


def _pair(a: str, b: str) -> tuple[str, ...]:
    return tuple(g for g in TRAINING_GPUS if g in (a, b))


def shape_table(data: Any, runs: list[Any], traced: Any, specs: Any, spec_classes: tuple[str, ...],
                seed: int) -> Table:  # fmt: skip
    """Shape-only fw+bw seconds of each run on its GPU, by trees fitted without each
    single GPU and each pair that holds the run's GPU."""
    out: Table = {}
    excluded = [(g,) for g in TRAINING_GPUS] + list(itertools.combinations(TRAINING_GPUS, 2))
    for left_out in excluded:
        model = fit_all(data, exclude=left_out, spec_classes=spec_classes, seed=seed)
        shape_only = GpuStepModel(model.classes, level=GpuLevel(0.0, 0.0, 0.0, 0.0))
        out[left_out] = {
            i: shape_only.forward_backward_s(traced[r.key][0], specs[r.gpu])[0]
            for i, r in enumerate(runs)
            if r.gpu in left_out
        }
    return out


def logo(table: Table, runs: list[Any], traced: Any, rule: LevelRule, overhead_us: float = 0.0
         ) -> list[tuple[str, Any, float]]:  # fmt: skip
    """(left-out GPU, run, predicted / measured) for every run, its GPU never seen."""
    out = []
    for gpu in TRAINING_GPUS:
        levels = {}
        for other in TRAINING_GPUS:
            if other == gpu:
                continue
            shape = table[_pair(gpu, other)]
            left = {
                i: runs[i].latency_ms / 1e3 - traced[runs[i].key][0].count * overhead_us / 1e6
                for i in shape
                if runs[i].gpu == other
            }
            levels[other] = float(np.mean([math.log(left[i] / shape[i]) for i in left]))
        level = rule(levels, gpu)
        for i, shape_s in table[(gpu,)].items():
            run = runs[i]
            predicted_s = shape_s * math.exp(level) + traced[run.key][0].count * overhead_us / 1e6
            out.append((gpu, run, predicted_s * 1e3 / run.latency_ms))
    return out


def line(feature: Callable[[GpuSpec], float], specs: dict[str, GpuSpec]) -> LevelRule:
    def rule(levels: dict[str, float], gpu: str) -> float:
        names = sorted(levels)
        x = np.array([feature(specs[n]) for n in names])
        y = np.array([levels[n] for n in names])
        slope, intercept = np.polyfit(x, y, 1)
        return float(np.clip(intercept + slope * feature(specs[gpu]), y.min(), y.max()))

    return rule


def ridge2(alpha: float, specs: dict[str, GpuSpec]) -> LevelRule:
    def rule(levels: dict[str, float], gpu: str) -> float:
        names = sorted(levels)
        pick = (FEATURES["bandwidth"], FEATURES["peak FP32"])
        x = np.array([[f(specs[n]) for f in pick] for n in names])
        y = np.array([levels[n] for n in names])
        mean = x.mean(axis=0)
        centred = x - mean
        w = np.linalg.solve(centred.T @ centred + alpha * np.eye(2), centred.T @ (y - y.mean()))
        point = np.array([f(specs[gpu]) for f in pick]) - mean
        return float(np.clip(y.mean() + point @ w, y.min(), y.max()))

    return rule


def nested(specs: dict[str, GpuSpec], picks: list[str]) -> LevelRule:
    """The line whose feature predicts the other GPUs' levels best, each from the rest."""

    def rule(levels: dict[str, float], gpu: str) -> float:
        def inner_error(name: str) -> float:
            fn = line(FEATURES[name], specs)
            return sum(
                abs(fn({k: v for k, v in levels.items() if k != h}, h) - levels[h]) for h in levels
            )

        best = min(FEATURES, key=inner_error)
        picks.append(best)
        return line(FEATURES[best], specs)(levels, gpu)

    return rule


def nearest(feature: Callable[[GpuSpec], float], specs: dict[str, GpuSpec]) -> LevelRule:
    def rule(levels: dict[str, float], gpu: str) -> float:
        target = feature(specs[gpu])
        return min(levels.items(), key=lambda kv: abs(feature(specs[kv[0]]) - target))[1]

    return rule


def row(label: str, rows: list[tuple[str, Any, float]]) -> str:
    ape = np.array([abs(r - 1) for _, _, r in rows])
    train = [abs(r - 1) for _, run, r in rows if run.train]
    per = " / ".join(
        f"{np.mean([abs(r - 1) for g, _, r in rows if g == gpu]):.1%}" for gpu in TRAINING_GPUS
    )
    return (
        f"| {label} | {ape.mean():.1%} | {ape.max():.1%} | {np.mean(train):.1%} "
        f"(max {np.max(train):.1%}) | {per} |"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traced-cache", type=Path, default=None)
    parser.add_argument("--seeds", default="0", help="comma-separated subsample seeds")
    parser.add_argument(
        "--spec-sets",
        default="all",
        help="comma-separated; each entry 'all' or classes joined by '+'",
    )
    parser.add_argument("--gavel", action="store_true", help="Gavel V100 for each variant")
    args = parser.parse_args()
    root = default_neusight_root()
    data = load_training_rows(root)
    specs = load_device_specs(root)
    runs = load_e2e_runs(root, TRAINING_GPUS)
    traced = traced_runs(root, runs, args.traced_cache)
    seeds = [int(s) for s in args.seeds.split(",")]
    variants: list[tuple[str, tuple[str, ...]]] = [("shipped trees", ())] + [
        (f"spec inputs in {entry}", spec_classes_arg(entry.replace("+", ",")))
        for entry in args.spec_sets.split(",")
    ]
    bandwidth = line(FEATURES["bandwidth"], specs)
    print("| variant (level line in log bandwidth) | e2e MAPE | max APE | training steps "
          "| P4 / P100 / T4 / V100 / A100 |")  # fmt: skip
    print("|---|---|---|---|---|")
    shipped: Table = {}
    for (label, spec_classes), seed in itertools.product(variants, seeds):
        table = shape_table(data, runs, traced, specs, spec_classes, seed)
        shipped = table if not spec_classes and seed == 0 else shipped
        print(row(f"{label}, seed {seed}", logo(table, runs, traced, bandwidth)), flush=True)
    if not shipped:
        return 0

    print("\n| shipped trees, seed 0: rule | e2e MAPE | max APE | training steps "
          "| P4 / P100 / T4 / V100 / A100 |")  # fmt: skip
    print("|---|---|---|---|---|")
    for overhead_us in (5.0, 10.0, 20.0, 40.0):
        rows = logo(shipped, runs, traced, bandwidth, overhead_us)
        print(row(f"+ {overhead_us:g} us a kernel", rows))
    for name, feature in FEATURES.items():
        print(row(f"level line in log {name}", logo(shipped, runs, traced, line(feature, specs))))
    for alpha in (0.01, 0.1, 1.0):
        print(row(f"level ridge, log bandwidth + log peak, alpha {alpha:g}",
                  logo(shipped, runs, traced, ridge2(alpha, specs))))  # fmt: skip
    picks: list[str] = []
    nested_rows = logo(shipped, runs, traced, nested(specs, picks))
    print(row(f"level line, feature by nested LOGO (picked: {', '.join(picks)})", nested_rows))
    for name in ("bandwidth", "peak FP32"):
        print(row(f"level of the nearest GPU in log {name}",
                  logo(shipped, runs, traced, nearest(FEATURES[name], specs))))  # fmt: skip
    const: LevelRule = lambda levels, gpu: float(np.mean(list(levels.values())))  # noqa: E731
    print(row("level: one constant", logo(shipped, runs, traced, const)))
    roofline = {
        k: {i: roofline_s(traced[runs[i].key][0], specs[runs[i].gpu]) for i in v}
        for k, v in shipped.items()
    }
    print(row("no shape trees: roofline x level line", logo(roofline, runs, traced, bandwidth)))

    print("\n| largest errors (shipped) | GPU | batch | kernels | measured ms | pred/meas "
          "| ms a kernel |")  # fmt: skip
    print("|---|---|---|---|---|---|---|")
    worst = sorted(logo(shipped, runs, traced, bandwidth), key=lambda t: -abs(t[2] - 1))[:10]
    for gpu, run, ratio in worst:
        count = traced[run.key][0].count
        print(f"| {run.model} {'train' if run.train else 'inf'} seq {run.seq} | {gpu} "
              f"| {run.batch} | {count} | {run.latency_ms:.0f} | x{ratio:.3f} "
              f"| {run.latency_ms / count:.2f} |")  # fmt: skip
    print(f"(least time a kernel over all runs: "
          f"{min(r.latency_ms / traced[r.key][0].count for r in runs):.3f} ms)")  # fmt: skip

    if args.gavel:
        from gpu_estimators import _gavel

        print("\n| Gavel V100, never seen | MAPE | best single factor | MAPE after it |")
        print("|---|---|---|---|")
        for (label, spec_classes), seed in itertools.product(variants, seeds):
            points = [r for r in _gavel(data, specs, traced, spec_classes, seed)
                      if r["gpu"] == "v100"]  # fmt: skip
            ratios = np.array([r["ours_s"] / r["measured_s"] for r in points])
            best = float(np.exp(-np.median(np.log(ratios))))
            print(f"| {label}, seed {seed} | {np.mean(np.abs(ratios - 1)):.1%} | x{best:.3f} "
                  f"| {np.mean(np.abs(ratios * best - 1)):.1%} |", flush=True)  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
