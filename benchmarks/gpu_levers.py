"""Levers on the per-operator GPU model's error for a GPU never seen (issue 16).

    nice -n 10 .venv/bin/python benchmarks/gpu_levers.py [--traced-cache PKL]
        [--seeds 0,1,2] [--spec-sets all,linear+bmm,linear+bmm+ln+softmax] [--gavel]
        [--host-floor] [--table-cache DIR]

The folds of ``benchmarks/gpu_estimators.py`` (``train.fit_step_model``): for each left-out
GPU the shape trees are fitted without it, each other GPU's level is its mean log
(measured / shape) over its end-to-end runs against trees fitted without both, and the
left-out GPU's level is read off a function of those four levels and the specs. The
shape-only step times of every run under every excluded set (5 single GPUs, 10 pairs)
are computed once per tree variant, so each level rule is arithmetic on them:

1. tree variants: the trees without GPU-spec inputs (shipped until 808cf4c), and with the
   GPU-spec inputs (``--spec-features``) in the classes of each ``--spec-sets`` entry;
   every variant for each subsample ``--seeds``;
2. a fixed overhead per kernel added to the sum (the levels refitted on what is left);
3. the level of an unseen GPU: a line in log bandwidth (shipped), log peak FP32, log SMs,
   log L2, log ridge; ridge regression on log bandwidth and log peak; the feature chosen by
   nested leave-one-GPU-out among the lines; the nearest GPU; one constant; and the
   roofline alone times the bandwidth line (no shape trees);
4. (``--gavel``) Gavel's CNN steps on V100 by the model fitted without V100, and the error
   left after the one factor that fits V100's points best (what no level can remove);
5. (``--host-floor``, only the ``--spec-sets`` variants; ``none``: the trees without spec
   inputs) the host floor: step = max(device, launches x per-launch time) (or a smooth
   maximum), the per-launch time fitted on Gavel's K80+P100 SGD steps priced by the
   fold's model (each GPU its own level, or the fold's line): Gavel V100 never seen (per
   step with the first rule; and, as a bound on the lever, a floor fitted on V100's own
   steps), and NeuSight leave one GPU out with each fold's floor (fitted without P100's
   Gavel steps when P100 is left out), with p10-p90 coverage.

Also lists the ten runs with the largest error (kernels, time a kernel).
"""

from __future__ import annotations

import argparse
import functools
import itertools
import math
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from rightsize.settings import Settings
from tools.estimators.gpu.baselines import roofline_s
from tools.estimators.gpu.estimator import GpuStepModel
from tools.estimators.gpu.kernels import TRAINING_GPUS, default_neusight_root, load_device_specs
from tools.estimators.gpu.level import GpuLevel
from tools.estimators.gpu.neusight import load_e2e_runs
from tools.estimators.gpu.ops import GpuKernels, kernels_of
from tools.estimators.gpu.specs import GpuSpec
from tools.estimators.gpu.trace import trace_training_step
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
                seed: int, items: list[GavelStep] | None = None
                ) -> tuple[Table, Table]:  # fmt: skip
    """Shape-only fw+bw seconds of each run on its GPU, by trees fitted without each
    single GPU and each pair that holds the run's GPU; and (``items``) the shape-only SGD
    step seconds of each Gavel step (optimizer included) under every excluded set."""
    out: Table = {}
    gavel: Table = {}
    excluded = [(g,) for g in TRAINING_GPUS] + list(itertools.combinations(TRAINING_GPUS, 2))
    for left_out in excluded:
        model = fit_all(data, exclude=left_out, spec_classes=spec_classes, seed=seed)
        shape_only = GpuStepModel(model.classes, level=GpuLevel(0.0, 0.0, 0.0, 0.0))
        out[left_out] = {
            i: shape_only.forward_backward_s(traced[r.key][0], specs[r.gpu])[0]
            for i, r in enumerate(runs)
            if r.gpu in left_out
        }
        gavel[left_out] = {
            i: shape_only.estimate(item.kernels, item.spec, parameters=item.parameters).step_s.p50
            for i, item in enumerate(items or [])
        }
    return out, gavel


def cached_tables(cache: Path | None, label: str, seed: int,
                  compute: Callable[[], tuple[Table, Table]]) -> tuple[Table, Table]:  # fmt: skip
    """``compute()``, pickled under ``cache`` (a folder) by variant and seed when given."""
    import pickle

    if cache is None:
        return compute()
    path = cache / f"tables-{label.replace(' ', '_').replace('+', '-')}-seed{seed}.pkl"
    if path.exists():
        tables: tuple[Table, Table] = pickle.loads(path.read_bytes())
        return tables
    tables = compute()
    cache.mkdir(parents=True, exist_ok=True)
    path.write_bytes(pickle.dumps(tables))
    return tables


def fold_levels(table: Table, runs: list[Any], traced: Any, gpu: str, overhead_us: float = 0.0
                ) -> dict[str, float]:  # fmt: skip
    """Each other GPU's level in the fold that leaves ``gpu`` out: its mean log
    (measured - overhead) / shape over its runs, against trees that saw neither."""
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
    return levels


def logo(table: Table, runs: list[Any], traced: Any, rule: LevelRule, overhead_us: float = 0.0
         ) -> list[tuple[str, Any, float]]:  # fmt: skip
    """(left-out GPU, run, predicted / measured) for every run, its GPU never seen."""
    out = []
    for gpu in TRAINING_GPUS:
        levels = fold_levels(table, runs, traced, gpu, overhead_us)
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


# -- the host floor (lever 5) ---------------------------------------------------------------
# step_s = smooth_max(device_s, launches x per_launch_s): the host issues kernels no faster
# than a per-launch time, overlapped with the GPU's work (an additive per-kernel overhead,
# lever 2, made the fit worse). Launches: the traced kernels and, for an SGD step of the
# harness era (non-foreach, PyTorch 1.x), 5 a parameter tensor: the weight decay, the
# momentum buffer's scale and add, the weight update, and zeroing the gradient.
SGD_LAUNCHES_PER_TENSOR = 5


@dataclass(frozen=True, slots=True)
class GavelStep:
    """One Gavel SGD step (ResNet-18/50) on one of its GPUs, traced."""

    gpu: str
    model: str
    batch: int
    step_s: float
    kernels: GpuKernels
    parameters: int
    parameter_tensors: int
    spec: GpuSpec


def gavel_steps() -> list[GavelStep]:
    from gpu_estimators import GAVEL_SPECS, _gavel_task, gavel_points

    traced: dict[tuple[str, int], tuple[GpuKernels, int, int]] = {}
    out = []
    for gpu, name, batch, step_s in gavel_points():
        if (name, batch) not in traced:
            task = _gavel_task(name, batch)
            params = [p for p in task.model.parameters() if p.requires_grad]
            traced[(name, batch)] = (
                kernels_of(trace_training_step(task)),
                sum(p.numel() for p in params),
                len(params),
            )
        out.append(GavelStep(gpu, name, batch, step_s, *traced[(name, batch)], GAVEL_SPECS[gpu]))
    return out


def launches(step: GavelStep) -> int:
    """Kernels a Gavel SGD step launches: traced, and the optimizer's per tensor."""
    return step.kernels.count + step.parameter_tensors * SGD_LAUNCHES_PER_TENSOR


def smooth_max(a: Any, b: Any, power: float) -> Any:
    """(a^p + b^p)^(1/p) of non-negative times (the maximum for p = inf)."""
    if math.isinf(power):
        return np.maximum(a, b)
    top = np.maximum(np.maximum(a, b), 1e-300)
    return top * ((np.asarray(a) / top) ** power + (np.asarray(b) / top) ** power) ** (1 / power)


@dataclass(slots=True)
class HostFloor:
    per_launch_s: float
    power: float = math.inf
    fitted: dict[str, Any] = field(default_factory=dict)

    def host_s(self, count: int) -> float:
        return count * self.per_launch_s

    def step_s(self, device_s: float, count: int) -> float:
        return float(smooth_max(device_s, self.host_s(count), self.power))


@dataclass(frozen=True, slots=True)
class HostPoint:
    group: str  # the GPU (with own_level, each keeps its own scale of its device times)
    device_s: float
    launches: int
    measured_s: float


_SCALES = np.exp(np.arange(-1.5, 1.5001, 0.005))


def fit_host_floor(points: list[HostPoint], power: float = math.inf, own_level: bool = True,
                   tolerance: float = 0.001) -> HostFloor:  # fmt: skip
    """The least per-launch time (a grid of 0-200 us by 0.25) whose mean APE over the
    points is within ``tolerance`` of the least reached. With ``own_level`` each GPU's
    device times take their best scale at every candidate, so the floor explains only
    steps flatter in the batch than their kernels, not a GPU's level error; the tolerance
    keeps a floor that only meets one step's noise at zero."""
    grid_us = np.arange(0.0, 200.001, 0.25)
    scales = _SCALES[:, None] if own_level else np.ones((1, 1))
    groups = {}
    for g in sorted({p.group for p in points}):
        mine = [p for p in points if p.group == g]
        groups[g] = tuple(np.array([getattr(p, k) for p in mine], dtype=np.float64)
                          for k in ("device_s", "launches", "measured_s"))  # fmt: skip
    totals = np.zeros(len(grid_us))
    for device, count, measured in groups.values():
        for j, c_us in enumerate(grid_us):
            predicted = smooth_max(scales * device[None, :], (count * c_us * 1e-6)[None, :], power)
            totals[j] += np.min(np.abs(predicted / measured[None, :] - 1).sum(axis=1))
    mean = totals / len(points)
    best = int(np.flatnonzero(mean <= mean.min() + tolerance)[0])
    fitted = {
        "gpus": sorted(groups),
        "mape_without": float(mean[0]),
        "mape_with": float(mean[best]),
    }
    return HostFloor(float(grid_us[best]) * 1e-6, power, fitted)


def level_at(levels: dict[str, float], specs: dict[str, GpuSpec], spec: GpuSpec) -> float:
    """The fold's level line in log bandwidth read at any GPU's spec (clipped)."""
    names = sorted(levels)
    x = np.array([FEATURES["bandwidth"](specs[n]) for n in names])
    y = np.array([levels[n] for n in names])
    slope, intercept = np.polyfit(x, y, 1)
    return float(np.clip(intercept + slope * FEATURES["bandwidth"](spec), y.min(), y.max()))


# The host floor is fitted on Gavel's training GPUs; a fold that leaves out the NeuSight
# board that is also a Gavel GPU leaves that GPU's Gavel steps out of the fit too.
FLOOR_FIT_GPUS = ("k80", "p100")
SAME_BOARD = {"Tesla_P100-PCIE-16GB": "p100", "Tesla_V100-PCIE-32GB": "v100"}
V100 = "Tesla_V100-PCIE-32GB"
FloorRule = tuple[str, float, bool]
FLOOR_RULES: list[FloorRule] = [
    ("max, each GPU its own level in the fit", math.inf, True),
    ("max, the fold's levels in the fit", math.inf, False),
    ("smooth max p=4, own levels", 4.0, True),
    ("smooth max p=8, own levels", 8.0, True),
]


def gavel_device_s(tables: tuple[Table, Table], runs: list[Any], traced: Any,
                   specs: dict[str, GpuSpec], items: list[GavelStep], gpu: str
                   ) -> dict[int, float]:  # fmt: skip
    """Each Gavel step's device time (optimizer included) by the fold leaving ``gpu`` out."""
    table, gavel = tables
    levels = fold_levels(table, runs, traced, gpu)
    return {
        i: shape_s * math.exp(level_at(levels, specs, items[i].spec))
        for i, shape_s in gavel[(gpu,)].items()
    }


def fold_floor(device: dict[int, float], items: list[GavelStep], gpu: str, rule: FloorRule
               ) -> HostFloor:  # fmt: skip
    fit_on = [g for g in FLOOR_FIT_GPUS if SAME_BOARD.get(gpu) != g]
    points = [
        HostPoint(items[i].gpu, device_s, launches(items[i]), items[i].step_s)
        for i, device_s in device.items()
        if items[i].gpu in fit_on
    ]
    return fit_host_floor(points, rule[1], own_level=rule[2])


def logo_floor(tables: tuple[Table, Table], runs: list[Any], traced: Any,
               specs: dict[str, GpuSpec], items: list[GavelStep], rule: FloorRule | None
               ) -> tuple[list[tuple[str, Any, float]], list[float], float]:  # fmt: skip
    """Leave-one-GPU-out with the host floor: each fold's floor fitted on the Gavel steps
    of the GPUs it keeps, priced by that fold's model. Also each fold's per-launch us and
    the largest host / device time over the runs."""
    table, _ = tables
    bandwidth = line(FEATURES["bandwidth"], specs)
    out = []
    per_launch_us = []
    ratio = 0.0
    for gpu in TRAINING_GPUS:
        level = bandwidth(fold_levels(table, runs, traced, gpu), gpu)
        floor = None
        if rule is not None:
            device = gavel_device_s(tables, runs, traced, specs, items, gpu)
            floor = fold_floor(device, items, gpu, rule)
            per_launch_us.append(floor.per_launch_s * 1e6)
        for i, shape_s in table[(gpu,)].items():
            run = runs[i]
            device_s = shape_s * math.exp(level)
            predicted_s = device_s
            if floor is not None:
                count = traced[run.key][0].count
                predicted_s = floor.step_s(device_s, count)
                ratio = max(ratio, floor.host_s(count) / device_s)
            out.append((gpu, run, predicted_s * 1e3 / run.latency_ms))
    return out, per_launch_us, ratio


def coverage(rows: list[tuple[str, Any, float]]) -> float:
    """p10-p90 coverage: each GPU's interval from the other GPUs' log residuals only."""
    from tools.estimators.gpu.train import interval_quantiles

    covered = []
    for gpu, _, ratio in rows:
        others: dict[str, list[float]] = {}
        for g, _, r in rows:
            if g != gpu:
                others.setdefault(g, []).append(-math.log(r))
        q = interval_quantiles(others)
        covered.append(math.exp(q["p10"]) <= 1.0 / ratio <= math.exp(q["p90"]))
    return float(np.mean(covered))


def host_floor_report(label: str, tables: tuple[Table, Table], runs: list[Any], traced: Any,
                      specs: dict[str, GpuSpec], items: list[GavelStep], detail: bool
                      ) -> None:  # fmt: skip
    """Gavel V100 never seen, and NeuSight leave-one-GPU-out, without and with the floor."""
    device = gavel_device_s(tables, runs, traced, specs, items, V100)
    v100 = [i for i in device if items[i].gpu == "v100"]
    print(
        f"\n| {label}: Gavel V100 never seen | per-launch us | K80+P100 fit MAPE "
        "(without -> with) | V100 MAPE | max APE | best single factor | MAPE after it |"
    )
    print("|---|---|---|---|---|---|---|")
    chosen: HostFloor | None = None
    for rule in [None, *FLOOR_RULES]:
        floor = fold_floor(device, items, V100, rule) if rule is not None else None
        chosen = floor if rule is FLOOR_RULES[0] else chosen
        ratios = np.array([
            (floor.step_s(device[i], launches(items[i])) if floor else device[i])
            / items[i].step_s
            for i in v100
        ])  # fmt: skip
        best = float(np.exp(-np.median(np.log(ratios))))
        fit = (
            f"{floor.fitted['mape_without']:.1%} -> {floor.fitted['mape_with']:.1%}"
            if floor else "-"
        )  # fmt: skip
        print(f"| {rule[0] if rule else 'no floor'} "
              f"| {floor.per_launch_s * 1e6:.2f} | {fit} | " if floor else "| no floor | - | - | ",
              end="")  # fmt: skip
        print(f"{np.mean(np.abs(ratios - 1)):.1%} | {np.max(np.abs(ratios - 1)):.1%} "
              f"| x{best:.3f} | {np.mean(np.abs(ratios * best - 1)):.1%} |")  # fmt: skip
    # What the floor could give if V100's own host were known (V100 is then seen: a bound
    # on the lever, not a held-out figure).
    oracle = fit_host_floor(
        [HostPoint("v100", device[i], launches(items[i]), items[i].step_s) for i in v100]
    )
    ratios = np.array([oracle.step_s(device[i], launches(items[i])) / items[i].step_s
                       for i in v100])  # fmt: skip
    ape = np.abs(ratios - 1)
    print(f"| oracle: max, fitted on V100's own steps (seen) | {oracle.per_launch_s * 1e6:.2f} "
          f"| - | {ape.mean():.1%} | {ape.max():.1%} | - | - |")  # fmt: skip
    print(
        f"\n| {label}: NeuSight leave one GPU out | e2e MAPE | max APE | training steps "
        "| P4 / P100 / T4 / V100 / A100 | coverage | per-launch us by fold | host/device max |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for rule in [None, *FLOOR_RULES]:
        rows, per_launch_us, ratio = logo_floor(tables, runs, traced, specs, items, rule)
        cells = row(rule[0] if rule else "no floor", rows)
        fold_us = " / ".join(f"{u:.1f}" for u in per_launch_us) or "-"
        print(f"{cells} {coverage(rows):.2f} | {fold_us} | {ratio:.2f} |")
    if not detail or chosen is None:
        return
    print(
        f"\n| {label}, {FLOOR_RULES[0][0]}: Gavel step | launches | measured ms | device ms "
        "| host ms | predicted ms | pred/meas without | with |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for i in sorted(device, key=lambda i: (items[i].gpu, items[i].model, items[i].batch)):
        item = items[i]
        host_ms = chosen.host_s(launches(item)) * 1e3
        predicted_ms = chosen.step_s(device[i], launches(item)) * 1e3
        print(f"| {item.gpu} {item.model} batch {item.batch} | {launches(item)} "
              f"| {item.step_s * 1e3:.1f} | {device[i] * 1e3:.1f} | {host_ms:.1f} "
              f"| {predicted_ms:.1f} | x{device[i] / item.step_s:.3f} "
              f"| x{predicted_ms / 1e3 / item.step_s:.3f} |")  # fmt: skip


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
    parser.add_argument(
        "--host-floor",
        action="store_true",
        help="only the --spec-sets variants ('none': the trees without spec inputs), each "
        "without and with the host floor (tools.estimators.gpu.host) fitted on Gavel's "
        "K80+P100 steps: Gavel V100 never seen and NeuSight leave one GPU out",
    )
    parser.add_argument(
        "--table-cache",
        type=Path,
        default=None,
        help="folder: the shape-only tables of each variant and seed are pickled there "
        "and read back (delete it when the trees' code or data change)",
    )
    args = parser.parse_args()
    root = default_neusight_root(Settings().neusight)
    data = load_training_rows(root)
    specs = load_device_specs(root)
    runs = load_e2e_runs(root, TRAINING_GPUS)
    traced = traced_runs(root, runs, args.traced_cache)
    seeds = [int(s) for s in args.seeds.split(",")]
    plain_variant: list[tuple[str, tuple[str, ...]]] = [("no spec inputs", ())]
    variants = [] if args.host_floor else plain_variant
    variants += [
        (f"spec inputs in {entry}", spec_classes_arg(entry.replace("+", ",")))
        for entry in args.spec_sets.split(",")
    ]
    items = gavel_steps() if args.host_floor else None
    bandwidth = line(FEATURES["bandwidth"], specs)
    print("| variant (level line in log bandwidth) | e2e MAPE | max APE | training steps "
          "| P4 / P100 / T4 / V100 / A100 |")  # fmt: skip
    print("|---|---|---|---|---|")
    plain: Table = {}
    all_tables: dict[tuple[str, int], tuple[Table, Table]] = {}
    for (label, spec_classes), seed in itertools.product(variants, seeds):
        compute = functools.partial(shape_table, data, runs, traced, specs, spec_classes, seed,
                                    items)  # fmt: skip
        tables = cached_tables(args.table_cache, label, seed, compute)
        all_tables[(label, seed)] = tables
        table = tables[0]
        plain = table if not spec_classes and seed == 0 else plain
        print(row(f"{label}, seed {seed}", logo(table, runs, traced, bandwidth)), flush=True)
    if items is not None:
        for (label, seed), tables in all_tables.items():
            host_floor_report(f"{label}, seed {seed}", tables, runs, traced, specs, items,
                              detail=seed == seeds[0])  # fmt: skip
        return 0
    if not plain:
        return 0

    print("\n| no spec inputs, seed 0: rule | e2e MAPE | max APE | training steps "
          "| P4 / P100 / T4 / V100 / A100 |")  # fmt: skip
    print("|---|---|---|---|---|")
    for overhead_us in (5.0, 10.0, 20.0, 40.0):
        rows = logo(plain, runs, traced, bandwidth, overhead_us)
        print(row(f"+ {overhead_us:g} us a kernel", rows))
    for name, feature in FEATURES.items():
        print(row(f"level line in log {name}", logo(plain, runs, traced, line(feature, specs))))
    for alpha in (0.01, 0.1, 1.0):
        print(row(f"level ridge, log bandwidth + log peak, alpha {alpha:g}",
                  logo(plain, runs, traced, ridge2(alpha, specs))))  # fmt: skip
    picks: list[str] = []
    nested_rows = logo(plain, runs, traced, nested(specs, picks))
    print(row(f"level line, feature by nested LOGO (picked: {', '.join(picks)})", nested_rows))
    for name in ("bandwidth", "peak FP32"):
        print(row(f"level of the nearest GPU in log {name}",
                  logo(plain, runs, traced, nearest(FEATURES[name], specs))))  # fmt: skip
    const: LevelRule = lambda levels, gpu: float(np.mean(list(levels.values())))  # noqa: E731
    print(row("level: one constant", logo(plain, runs, traced, const)))
    roofline = {
        k: {i: roofline_s(traced[runs[i].key][0], specs[runs[i].gpu]) for i in v}
        for k, v in plain.items()
    }
    print(row("no shape trees: roofline x level line", logo(roofline, runs, traced, bandwidth)))

    print("\n| largest errors (no spec inputs) | GPU | batch | kernels | measured ms | pred/meas "
          "| ms a kernel |")  # fmt: skip
    print("|---|---|---|---|---|---|---|")
    worst = sorted(logo(plain, runs, traced, bandwidth), key=lambda t: -abs(t[2] - 1))[:10]
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
