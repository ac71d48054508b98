"""HARP's Table 1 on this project's own profiles: black-box / white-box / hybrid estimators
of time per training iteration and peak memory, on seen and unseen model families, with
all and with 20% of the training data; plus the cross-hardware result on Gavel's GPUs.

    python benchmarks/estimators.py                      # the table (15-20 min on 2 cores)
    python benchmarks/estimators.py --json out.json      # and every figure as JSON
    python benchmarks/estimators.py --quick              # a smoke run (few epochs)
    python benchmarks/estimators.py --base-study         # the hybrid's base, validated (~10 min)
    python benchmarks/estimators.py --fold-study         # new-family folds, validated nested
    python benchmarks/estimators.py --memory-study       # the memory base's live peak
    python benchmarks/estimators.py --refit-memory data/dnn_profiles/models   # refit memory

Data: ``data/dnn_profiles/cpu_sweep.jsonl`` (status ``ok`` rows; crashes and OOMs are out).
Protocol, fixed before any test figure was looked at:

- seen families: 20% of the configurations (repeats of one configuration together) are
  the test split, the rest the training data; every family is in both.
- unseen families: three folds of families, each tested by estimators trained on the
  other two folds, so no family is in both training and test: {resnet,
  resnet_bottleneck, mlp}, {vgg, vit, transformer}, {mobilenet_v2, lstm, dlrm} (ResNets
  together, and ViT with the Transformer: they share blocks). Figures pool the folds.
- 20% data: a seeded 20% of the training configurations.
- Every estimator is fitted on 80% of its training data. Intervals are calibrated and
  kinds ranked (HARP's rule, ``selected``) in two regimes, both inside the training
  data: in-family on the other 20% of its configurations, for test rows whose family is
  in training (seen); new-family on the training families, one family group at a time
  (linked families held out together), each predicted by the kinds refitted without
  it, for test rows of families not in training (unseen). ``--family-folds 3`` is the
  previous round's three folds of training families, ``--family-folds 0`` the earlier
  protocol (in-family validation for every row). The test split is used only to score;
  the test splits above are unchanged since they were fixed. Hyperparameters are the
  package defaults (the hybrid's tree depth, 3, was chosen on the new-family validation,
  training rows only), as was the hybrid's fitted linear base (``--hybrid-base``); nothing
  is tuned on a test split.
- MAPE of the p50; under = fraction of test rows whose p50 is below the truth; coverage =
  fraction inside the calibrated [p10, p90] (intended 0.80).
- Noise floor: configurations the sweep ran two or three times; mean absolute deviation
  from their mean, percent (the error a perfect estimator would still show).

Cross-hardware: ``tools.estimators.gpu.gavel_crosshw`` (train K80+P100, predict V100; and with
Pollux's T4 added to training), hardware described by specs only.
"""

from __future__ import annotations

import argparse
import functools
import json
import logging
import os
import platform
import sys
import time
from collections import Counter
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # run as a script from anywhere
    sys.path.insert(0, str(REPO))
# Multi-threaded torch on a shared machine: never spin-wait (see tools.profiling.profiler).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import numpy as np  # noqa: E402

from rightsize.settings import Settings  # noqa: E402
from tools.estimators.cpu.bundle import (  # noqa: E402
    HYBRID_BASE,
    HYBRID_GNN,
    HYBRID_PARAMS,
    KINDS,
    base_logs,
    example_inputs,
    family_folds,
    raw_quantiles,
    split_validation,
    train_bundle,
)
from tools.estimators.cpu.calibration import calibrate  # noqa: E402
from tools.estimators.cpu.dataset import (  # noqa: E402
    Example,
    GraphStore,
    default_dataset_path,
    load_examples,
    noise_floor,
)
from tools.estimators.cpu.features import analytic_estimates  # noqa: E402
from tools.estimators.cpu.metrics import score  # noqa: E402
from tools.estimators.gpu.gavel_crosshw import cross_hardware, load_gpu_points  # noqa: E402

FOLDS = (
    ("resnet", "resnet_bottleneck", "mlp"),
    ("vgg", "vit", "transformer"),
    ("mobilenet_v2", "lstm", "dlrm"),
)
TARGETS = ("iteration_s", "peak_memory_mb")


def _subsample(examples: Sequence[Example], fraction: float, seed: int) -> list[Example]:
    if fraction >= 1:
        return list(examples)
    _, kept = split_validation(examples, fraction, seed)
    return kept


def _predict(
    train: Sequence[Example],
    test: Sequence[Example],
    store: GraphStore,
    epochs: int,
    family_folds: int | None,
    hybrid_gnn: bool,
    hybrid_params: dict[str, Any] | None = None,
    hybrid_base: str = HYBRID_BASE,
) -> dict[str, dict[str, np.ndarray]]:
    """target -> kind (and 'selected', 'analytic') -> (rows, 3) quantiles on ``test``.

    Also '_selected' (the kinds chosen) and '_validation' (the bundle's own validation:
    method, folds, and per regime, target and kind its MAPE, under-rate and coverage).
    """
    bundle = train_bundle(
        train,
        store,
        gnn_epochs=epochs,
        family_validation_folds=family_folds,
        hybrid_gnn=hybrid_gnn,
        hybrid_params=hybrid_params,
        hybrid_base=hybrid_base,
    )
    items = example_inputs(test, store)
    graphs = [store.get(e.key) for e in test]
    predicted = bundle.predict(items, graphs)
    out: dict[str, dict[str, np.ndarray]] = {}
    analytic = np.array([analytic_estimates(i) for i in items])
    chosen: dict[str, np.ndarray] = {}
    for target in TARGETS:
        out[target] = {kind: p.quantiles for kind, p in predicted[target].items()}
        chosen[target] = np.array([bundle.selected_kind(target, e.family) for e in test])
        out[target]["selected"] = np.stack(
            [out[target][str(k)][i] for i, k in enumerate(chosen[target])]
        )
        column = analytic[:, 0 if target == "iteration_s" else 1]
        out[target]["analytic"] = np.repeat(column[:, None], 3, axis=1)
    out["_selected"] = {t: np.unique(chosen[t]) for t in TARGETS}
    out["_validation"] = {
        "method": np.array([bundle.meta.validation_method or "in family"]),
        "folds": np.array([" | ".join(",".join(f) for f in bundle.meta.validation_folds)]),
    }
    meta = bundle.meta
    regimes = {"headline": (meta.validation, meta.ranking, meta.validation_rows)}
    if meta.in_family is not None:
        regimes["in_family"] = (
            meta.in_family.validation,
            meta.in_family.ranking,
            meta.in_family.rows,
        )
    for regime, (by_target, rankings, rows) in regimes.items():
        for target, by_kind in by_target.items():
            ranked = {r.name: r for r in rankings.get(target, [])}
            for kind, s in by_kind.items():
                r = ranked[kind]
                out["_validation"][f"{regime}/{target}/{kind}"] = np.array(
                    [
                        s.mape,
                        s.under_rate,
                        s.coverage if s.coverage is not None else np.nan,
                        rows,
                        r.under_predictions / max(rows, 1),
                        r.over_error_pct,
                    ]
                )
    return out


def _validation_line(
    pieces: list[tuple[list[Example], dict[str, dict[str, np.ndarray]]]], regime: str
) -> str:
    """The bundles' own validation figures (training data only), pooled over the folds:
    MAPE, under-rate and coverage as in the table, and what HARP's rule ranks - the
    calibrated p90's under-prediction rate and mean over-prediction."""
    parts = []
    for target, label in (("iteration_s", "time"), ("peak_memory_mb", "memory")):
        figures = []
        for kind in KINDS:
            found = [p["_validation"].get(f"{regime}/{target}/{kind}") for _, p in pieces]
            rows = [f for f in found if f is not None]
            if not rows:
                continue
            weights = np.array([f[3] for f in rows])
            mape, under, cov, _, p90_under, p90_over = (
                float(np.average([f[i] for f in rows], weights=weights)) for i in range(6)
            )
            figures.append(
                f"{kind} {mape:.1f}% (under {under:.2f}, cov {cov:.2f}; "
                f"p90 under {p90_under:.2f}, over {p90_over:.0f}%)"
            )
        parts.append(f"{label}: " + ", ".join(figures))
    return "; ".join(parts)


def _config_parts(examples: Sequence[Example], count: int, seed: int) -> list[list[Example]]:
    """``count`` folds of the configurations of ``examples`` (repeats together)."""
    keys = sorted({e.config_key for e in examples})
    order = np.random.default_rng(seed).permutation(len(keys))
    fold_of = {keys[index]: rank % count for rank, index in enumerate(order)}
    return [[e for e in examples if fold_of[e.config_key] == f] for f in range(count)]


def _base_study(examples: Sequence[Example], rest: Sequence[Example], store: GraphStore) -> None:
    """The hybrid over the analytic estimate against over the fitted linear base, on the
    benchmark's training data only (its test rows are never predicted): 5-fold CV of
    the seen settings' training configurations, and new-family folds (the bundle's three
    folds of families) inside each unseen setting's training families. XGBoost only
    (no GNN inputs), so it runs in minutes; p50 MAPE %."""
    bases = ("analytic", "linear")
    for fraction in (1.0, 0.2):
        label = f"{int(fraction * 100)}%"
        studies: dict[str, list[tuple[list[Example], list[Example]]]] = {"in-family": []}
        train = _subsample(rest, fraction, seed=1)
        for part in _config_parts(train, 5, seed=7):
            keys = {e.config_key for e in part}
            studies["in-family"].append(([e for e in train if e.config_key not in keys], part))
        studies["new-family"] = []
        for fold in FOLDS:
            fold_train = _subsample([e for e in examples if e.family not in fold], fraction, 1)
            for held in family_folds(fold_train, 3):
                inside = [e for e in fold_train if e.family not in held]
                studies["new-family"].append((inside, [e for e in fold_train if e.family in held]))
        for study, splits in studies.items():
            errors: dict[tuple[str, str], list[np.ndarray]] = {}
            for fit, held_out in splits:
                for base in bases:
                    raw = raw_quantiles(
                        fit, held_out, store, kinds=("hybrid",), hybrid_gnn=False, hybrid_base=base
                    )
                    for target in TARGETS:
                        truth = _truth(held_out, target)
                        p50 = np.exp(raw[target]["hybrid"][:, 1])
                        errors.setdefault((target, base), []).append(np.abs(p50 - truth) / truth)
            figures = "; ".join(
                f"{target} "
                + ", ".join(
                    f"{base} {np.mean(np.concatenate(errors[(target, base)])) * 100:.2f}"
                    for base in bases
                )
                for target in TARGETS
            )
            print(
                f"hybrid base, {study} validation, {label} ({len(splits)} splits, "
                f"{sum(len(h) for _, h in splits)} rows): {figures}",
                flush=True,
            )


def _memory_study(rest: Sequence[Example], store: GraphStore) -> None:
    """The memory base's live-peak term (``features.MEMORY_LIVE``: the activations' live
    peak, the live peak keeping the gradients, or both) and its state weight (fitted, or
    1: ``bundle.MEMORY_STATE_WEIGHT``) on the benchmark's training data
    only (its test rows are never predicted): one fold per family group held out, each
    predicted by the memory hybrid (no GNN inputs) and by its linear base alone, fitted
    on the other groups; p50 MAPE % and the worst family group's."""
    from tools.estimators.cpu import bundle, features
    from tools.estimators.cpu.memory_refit import fit_memory_hybrid

    chosen, state_weight = features.MEMORY_LIVE, bundle.MEMORY_STATE_WEIGHT
    variants: list[tuple[str, float | None]] = [(v, None) for v in ("live", "activations", "both")]
    variants += [(live, 1.0) for live in ("live", "activations")]
    for live, state in variants:
        features.MEMORY_LIVE = live  # type: ignore[assignment]
        bundle.MEMORY_STATE_WEIGHT = state
        try:
            errors: dict[str, list[np.ndarray]] = {"base": [], "hybrid": []}
            worst: dict[str, float] = {"base": 0.0, "hybrid": 0.0}
            weights: list[float] = []
            for held in family_folds(rest):
                inside = [e for e in rest if e.family not in held]
                outside = [e for e in rest if e.family in held]
                model = fit_memory_hybrid(inside, store)
                truth = _truth(outside, "peak_memory_mb")
                items = example_inputs(outside, store)
                base = np.exp(base_logs(items, model.weights)["peak_memory_mb"])
                hybrid = np.exp(model.raw(outside, store)[:, 1])
                for kind, p50 in (("base", base), ("hybrid", hybrid)):
                    ape = np.abs(p50 - truth) / truth
                    errors[kind].append(ape)
                    worst[kind] = max(worst[kind], float(np.mean(ape)) * 100)
                weights = model.weights["peak_memory_mb"]
            figures = ", ".join(
                f"{kind} {np.mean(np.concatenate(e)) * 100:.2f}% (worst family group "
                f"{worst[kind]:.1f}%)"
                for kind, e in errors.items()
            )
            print(
                f"memory base live={live}, state weight {state or 'fitted'}: {figures}; "
                "last fold's base weights "
                f"{[round(w, 3) for w in weights]}",
                flush=True,
            )
        finally:
            features.MEMORY_LIVE, bundle.MEMORY_STATE_WEIGHT = chosen, state_weight


def _refit_memory(
    folder: Path, examples: Sequence[Example], store: GraphStore, grown: bool = False
) -> None:
    """Refit the memory hybrid of the bundle in ``folder`` on ``examples`` (the data it
    was trained on; ``grown``: and rows appended since) and write its files back (the
    other estimators' files untouched)."""
    from tools.estimators.cpu.bundle import EstimatorBundle
    from tools.estimators.cpu.memory_refit import refit_memory

    bundle = EstimatorBundle.load(folder)
    before = bundle.meta.validation["peak_memory_mb"]["hybrid"].mape
    old_folds = len(bundle.meta.validation_folds)
    figures = refit_memory(bundle, examples, store, grown=grown)
    bundle.hybrid["peak_memory_mb"].save(folder / "hybrid_peak_memory_mb.ubj.gz")
    (folder / "bundle.json").write_text(bundle.meta.model_dump_json(indent=1))
    ranking = [
        f"{r.name} (under {r.under_predictions}, over {r.over_error_pct:.1f}%, "
        f"p50 {r.central_mape_pct or 0:.1f}%)"
        for r in bundle.meta.ranking["peak_memory_mb"]
    ]
    print(
        f"memory hybrid refitted in {folder}: new-family p50 MAPE {before:.2f}% -> "
        f"{figures.get('new_family_mape', float('nan')):.2f}%, in family "
        f"{figures.get('in_family_mape', float('nan')):.2f}%; base weights "
        f"{[round(w, 3) for w in bundle.meta.hybrid_base['peak_memory_mb']]}; "
        f"new-family ranking: {'; '.join(ranking)}",
        flush=True,
    )
    _print_memory_folds(bundle.meta.validation_folds, examples, figures, old_folds)


def _print_memory_folds(
    folds: Sequence[Sequence[str]],
    examples: Sequence[Example],
    figures: dict[str, float],
    old_folds: int,
) -> None:
    """Each new-family fold's raw p50 MAPE, and the row-weighted mean over the folds the
    bundle had before the refit (the figure comparable with its stored one)."""
    rows = Counter(e.family for e in examples)
    weighted = [0.0, 0]
    for number, fold in enumerate(folds):
        mape = figures.get(f"fold_{number}")
        if mape is None:
            continue
        n = sum(rows[family] for family in fold)
        if number < old_folds:
            weighted[0] += mape * n
            weighted[1] += n
        print(f"  fold {'+'.join(fold)} ({n} rows): raw p50 MAPE {mape:.2f}%", flush=True)
    if weighted[1]:
        print(
            f"  the {old_folds} folds the bundle had before ({int(weighted[1])} rows): raw p50 "
            f"MAPE {weighted[0] / weighted[1]:.2f}%",
            flush=True,
        )


_HeldOut = tuple[list[Example], dict[str, dict[str, np.ndarray]]]


def _held_out(
    pool: Sequence[Example],
    store: GraphStore,
    fits: dict[frozenset[str], _HeldOut],
    excluded: frozenset[str],
    wanted: Sequence[str],
) -> tuple[list[Example], dict[str, np.ndarray]]:
    """The rows of ``wanted`` families and the hybrid's raw log quantiles on them, from the
    hybrid fitted on ``pool`` without the ``excluded`` families (cached in ``fits``)."""
    if excluded not in fits:
        out = [e for e in pool if e.family in excluded]
        fit = [e for e in pool if e.family not in excluded]
        fits[excluded] = (out, raw_quantiles(fit, out, store, kinds=("hybrid",), hybrid_gnn=False))
    out, raw = fits[excluded]
    mask = np.array([e.family in wanted for e in out])
    rows = [e for e in out if e.family in wanted]
    return rows, {target: raw[target]["hybrid"][mask] for target in TARGETS}


def _fold_study(examples: Sequence[Example], store: GraphStore) -> None:
    """How the new-family calibration's folds (three folds of families, or one per family
    group) carry to a family the calibrated model never saw, on the benchmark's training
    data only (its test rows are never predicted). Nested: inside each unseen setting's
    training families, every family group in turn plays the new family, predicted by the
    hybrid fitted on the other training families and calibrated by new-family folds of
    those, as ``train_bundle`` would. XGBoost only (no GNN inputs). Prints the pseudo-new
    families' p10-p90 coverage (intended 0.80) and the calibration folds' p50 MAPE %."""
    schemes: dict[str, int | None] = {"3 folds": 3, "one per group": None}
    for fraction in (1.0, 0.2):
        label = f"{int(fraction * 100)}%"
        inside_cover: dict[tuple[str, str], list[np.ndarray]] = {}
        fold_errors: dict[tuple[str, str], list[np.ndarray]] = {}
        new_errors: dict[str, list[np.ndarray]] = {}
        for fold in FOLDS:
            fold_train = _subsample([e for e in examples if e.family not in fold], fraction, 1)
            # One fit per set of excluded families, predicting all of them: a (rest minus
            # held) fit serves the (new, held) pair and the (held, new) pair alike.
            fits: dict[frozenset[str], _HeldOut] = {}
            held_out = partial(_held_out, fold_train, store, fits)
            for new in family_folds(fold_train, None):
                rest = [e for e in fold_train if e.family not in new]
                new_rows, new_raw = held_out(frozenset(new), new)
                for target in TARGETS:
                    truth = _truth(new_rows, target)
                    p50 = np.exp(new_raw[target][:, 1])
                    new_errors.setdefault(target, []).append(np.abs(p50 - truth) / truth)
                for scheme, count in schemes.items():
                    parts = [
                        held_out(frozenset(new) | frozenset(h), h)
                        for h in family_folds(rest, count)
                    ]
                    for target in TARGETS:
                        q = np.concatenate([raw[target] for _, raw in parts])
                        y = np.log(np.concatenate([_truth(rows, target) for rows, _ in parts]))
                        fold_errors.setdefault((scheme, target), []).append(
                            np.abs(np.exp(q[:, 1]) - np.exp(y)) / np.exp(y)
                        )
                        calibrated = np.exp(calibrate(q, y).apply(new_raw[target]))
                        truth = _truth(new_rows, target)
                        inside_cover.setdefault((scheme, target), []).append(
                            (calibrated[:, 0] <= truth) & (truth <= calibrated[:, 2])
                        )
        for scheme in schemes:
            figures = "; ".join(
                f"{target} coverage {np.mean(np.concatenate(inside_cover[(scheme, target)])):.2f}"
                f" (calibration folds' MAPE "
                f"{np.mean(np.concatenate(fold_errors[(scheme, target)])) * 100:.1f}%)"
                for target in TARGETS
            )
            print(f"new-family calibration, {scheme}, {label}: {figures}", flush=True)
        mape = ", ".join(
            f"{target} {np.mean(np.concatenate(new_errors[target])) * 100:.1f}%"
            for target in TARGETS
        )
        print(f"  pseudo-new families' MAPE (model fitted on all the others), {label}: {mape}")


def _truth(examples: Sequence[Example], target: str) -> np.ndarray:
    return np.array([getattr(e, target) for e in examples])


def _scores(
    pieces: list[tuple[list[Example], dict[str, dict[str, np.ndarray]]]],
) -> dict[str, dict[str, dict[str, float | None]]]:
    """kind -> target -> figures, pooled over the pieces (folds)."""
    table: dict[str, dict[str, dict[str, float | None]]] = {}
    for kind in (*KINDS, "selected", "analytic"):
        table[kind] = {}
        for target in TARGETS:
            q = np.concatenate([pred[target][kind] for _, pred in pieces])
            truth = np.concatenate([_truth(test, target) for test, _ in pieces])
            s = score(q[:, 1], truth, q[:, 0], q[:, 2])
            table[kind][target] = {
                "mape": s.mape,
                "under_rate": s.under_rate,
                "coverage": None if kind == "analytic" else s.coverage,
                "rows": s.rows,
            }
    return table


def _time_by_group(
    pieces: list[tuple[list[Example], dict[str, dict[str, np.ndarray]]]], kind: str
) -> dict[str, float]:
    """Time MAPE of ``kind`` per time basis and thread count (where the error sits)."""
    groups = np.concatenate([[f"{e.time_basis}/t{e.threads}" for e in test] for test, _ in pieces])
    p50 = np.concatenate([pred["iteration_s"][kind][:, 1] for _, pred in pieces])
    truth = np.concatenate([_truth(test, "iteration_s") for test, _ in pieces])
    return {
        group: float(np.mean(np.abs(p50 - truth)[groups == group] / truth[groups == group]) * 100)
        for group in sorted(set(groups.tolist()))
    }


def _family_folds_arg(text: str) -> int | None:
    """``--family-folds``: 'groups' (one fold per family group) or a count."""
    return None if text == "groups" else int(text)


def _folds_label(folds: int | None) -> str:
    return "groups" if folds is None else str(folds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", type=Path, default=None)
    parser.add_argument("--graphs", type=Path, default=Path("~/.rightsize/dnn/graphs"))
    parser.add_argument("--gnn-epochs", type=int, default=60)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="5 GNN epochs (a smoke run)")
    parser.add_argument(
        "--family-folds",
        type=_family_folds_arg,
        default=None,
        help="Folds of training families for the new-family validation: 'groups' (default, "
        "one per family group), a number of folds, or 0 (in-family validation only)",
    )
    parser.add_argument(
        "--hybrid-inputs",
        choices=("analytic", "analytic+gnn"),
        default="analytic+gnn" if HYBRID_GNN else "analytic",
        help="The hybrid's inputs: hardware, op-graph totals, analytic estimates (and the GNN's)",
    )
    parser.add_argument(
        "--hybrid-max-depth",
        type=int,
        default=None,
        help=f"The hybrid's tree depth (default {HYBRID_PARAMS.get('max_depth', 6)})",
    )
    parser.add_argument(
        "--hybrid-base",
        choices=("linear", "analytic"),
        default=HYBRID_BASE,
        help="What the hybrid corrects: the analytic terms weighted on the training rows "
        "(linear) or the analytic estimate as it is",
    )
    parser.add_argument(
        "--base-study",
        action="store_true",
        help="Only validate the hybrid's base (analytic against linear) on training data",
    )
    parser.add_argument(
        "--fold-study",
        action="store_true",
        help="Only check the new-family calibration folds (3 or one per group), nested, "
        "on training data",
    )
    parser.add_argument(
        "--memory-study",
        action="store_true",
        help="Only validate the memory base's live-peak term on training data",
    )
    parser.add_argument(
        "--refit-memory",
        type=Path,
        default=None,
        metavar="FOLDER",
        help="Only refit the memory hybrid of the bundle in FOLDER on the whole dataset",
    )
    parser.add_argument(
        "--dataset-grew",
        action="store_true",
        help="With --refit-memory: the dataset has rows appended since the bundle was "
        "trained (new families held out as one more fold; time estimators kept)",
    )
    parser.add_argument("--json", type=Path, default=None, help="Also write figures here")
    parser.add_argument(
        "--shared-data", type=Path, default=REPO.parent / "shared" / "data" / "dnn_profiles"
    )
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", stream=sys.stderr)
    epochs = 5 if args.quick else args.gnn_epochs
    hybrid_gnn = args.hybrid_inputs == "analytic+gnn"
    hybrid_params = (
        HYBRID_PARAMS
        if args.hybrid_max_depth is None
        else {**HYBRID_PARAMS, "max_depth": args.hybrid_max_depth}
    )
    began = time.monotonic()

    source = args.dataset or default_dataset_path(Settings().dnn_profiles)
    examples = load_examples(source)
    ok_rows = len(load_examples(source, include_wall=True))
    store = GraphStore(args.graphs.expanduser())
    store.build(examples, workers=args.workers)
    floor = noise_floor(examples)
    floor_by_threads = {t: noise_floor([e for e in examples if e.threads == t]) for t in (1, 2)}

    if args.refit_memory is not None:
        _refit_memory(args.refit_memory, examples, store, grown=args.dataset_grew)
        return
    rest, test = split_validation(examples, 0.2, seed=0)
    if args.memory_study:
        _memory_study(rest, store)
        return
    if args.base_study:
        _base_study(examples, rest, store)
        return
    if args.fold_study:
        _fold_study(examples, store)
        return
    # Every setting trains the same way; only its training and test rows differ.
    predict = functools.partial(
        _predict,
        store=store,
        epochs=epochs,
        family_folds=args.family_folds,
        hybrid_gnn=hybrid_gnn,
        hybrid_params=hybrid_params,
        hybrid_base=args.hybrid_base,
    )
    results: dict[str, object] = {}
    settings: list[
        tuple[str, str, list[tuple[list[Example], dict[str, dict[str, np.ndarray]]]]]
    ] = []
    for fraction in (1.0, 0.2):
        label = f"{int(fraction * 100)}%"
        logging.info("seen families, %s of the training data", label)
        train = _subsample(rest, fraction, seed=1)
        settings.append(
            (
                "seen",
                label,
                [(test, predict(train, test))],
            )
        )
        pieces = []
        for fold in FOLDS:
            logging.info("unseen families %s, %s of the training data", fold, label)
            fold_test = [e for e in examples if e.family in fold]
            fold_train = _subsample([e for e in examples if e.family not in fold], fraction, 1)
            pieces.append((fold_test, predict(fold_train, fold_test)))
        settings.append(("unseen", label, pieces))

    rows = []
    for families, label, pieces in settings:
        table = _scores(pieces)
        chosen = {
            t: sorted({str(k) for _, p in pieces for k in p["_selected"][t]}) for t in TARGETS
        }
        folds = [str(p["_validation"]["folds"][0]) for _, p in pieces]
        headline = "in_family" if families == "seen" and args.family_folds != 0 else "headline"
        validation = _validation_line(pieces, headline)
        by_group = {kind: _time_by_group(pieces, kind) for kind in (*KINDS, "selected")}
        results[f"{families}/{label}"] = {
            "scores": table,
            "selected": chosen,
            "validation_folds": folds,
            "validation": validation,
            "time_mape_by_group": by_group,
        }
        for kind, by_target in table.items():
            rows.append(
                (kind, families, label, by_target["iteration_s"], by_target["peak_memory_mb"])
            )

    gpu: dict[str, dict[str, Any]] = {}
    points = load_gpu_points(args.shared_data) if args.shared_data.exists() else []
    for train_gpus in (["k80", "p100"], ["k80", "p100", "t4"]):
        if points:
            result = cross_hardware(points, train_gpus, "v100")
            gpu["+".join(train_gpus)] = result.model_dump()

    def pct(value: float | None) -> str:
        return "-" if value is None else f"{value:6.2f}"

    def frac(value: float | None) -> str:
        return "-" if value is None else f"{value:4.2f}"

    bases = Counter(f"{e.time_basis}/t{e.threads}" for e in examples)
    print(
        f"# DNN estimators on {len(examples)} of the {ok_rows} ok profiles in {source.name} "
        f"({len({e.config_key for e in examples})} configurations, "
        f"{len({e.family for e in examples})} families; time basis/threads: "
        f"{', '.join(f'{k} {v}' for k, v in sorted(bases.items()))}; "
        f"{ok_rows - len(examples)} two-thread rows with only a contended wall time left out), "
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
        f"GNN epochs {epochs}, family folds {_folds_label(args.family_folds)}, "
        f"hybrid inputs {args.hybrid_inputs}"
        + f", hybrid depth {hybrid_params.get('max_depth', 6)}, hybrid base {args.hybrid_base}"
    )
    print(
        f"noise floor: {int(floor['repeated_configs'])} repeated configurations; "
        f"time {floor['time_mape_pct']:.2f}% (raw wall time {floor['wall_time_mape_pct']:.2f}%), "
        f"memory {floor['memory_mape_pct']:.2f}% (mean |x - mean| / mean); within-run spread "
        f"of the timed steps, median {floor['within_run_spread_pct']:.2f}% (max - min over median)"
    )
    for threads, by in floor_by_threads.items():
        print(
            f"noise floor, {threads} thread(s): {int(by['repeated_configs'])} repeated "
            f"configurations; time {by['time_mape_pct']:.2f}%, memory {by['memory_mape_pct']:.2f}%"
        )
    print()
    print(
        "| estimator | families | train data | time MAPE % | time under | time p10-p90 cov "
        "| memory MAPE % | memory under | memory p10-p90 cov |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for kind, families, label, t, m in rows:
        print(
            f"| {kind} | {families} | {label} | {pct(t['mape'])} | {frac(t['under_rate'])} | "
            f"{frac(t['coverage'])} | {pct(m['mape'])} | {frac(m['under_rate'])} | "
            f"{frac(m['coverage'])} |"
        )
    for key, value in results.items():
        assert isinstance(value, dict)
        regime = "in-family" if key.startswith("seen") or args.family_folds == 0 else "new-family"
        print(f"selected by HARP's rule on {regime} validation, {key}: {value['selected']}")
        if not key.startswith("seen") and any(value["validation_folds"]):
            print(f"  new-family validation folds per test fold: {value['validation_folds']}")
        print(f"  {regime} validation (training data only): {value['validation']}")
        groups = value["time_mape_by_group"]
        assert isinstance(groups, dict)
        print(
            f"  time MAPE % by time basis/threads, {key}: "
            + "; ".join(
                f"{kind} " + ", ".join(f"{g} {v:.1f}" for g, v in by.items())
                for kind, by in groups.items()
            )
        )
    print()
    for name, outcome in gpu.items():
        figures = ", ".join(
            f"{k} {v['mape']:.1f}% (under {v['under_rate']:.2f})"
            for k, v in outcome["test"].items()
        )
        print(
            f"cross-hardware: train {name}, predict V100 ({outcome['rows_test']} points): "
            f"{figures}; selected on leave-one-GPU-out among the training GPUs: "
            f"{outcome['selected']} (HARP's rule on calibrated p90s; on the point estimates "
            f"it would pick {outcome['selected_point']})"
        )
    print(f"\nelapsed {time.monotonic() - began:.0f} s")
    if args.json is not None:
        payload = {
            "examples": len(examples),
            "ok_rows": ok_rows,
            "noise_floor": floor,
            "noise_floor_by_threads": floor_by_threads,
            "settings": results,
            "cross_hardware": gpu,
            "gnn_epochs": epochs,
            "family_folds": _folds_label(args.family_folds),
            "hybrid_inputs": args.hybrid_inputs,
            "hybrid_params": hybrid_params,
            "hybrid_base": args.hybrid_base,
        }
        args.json.write_text(json.dumps(payload, indent=1, default=str))


if __name__ == "__main__":
    main()
