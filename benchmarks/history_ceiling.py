"""How far can submit-time run-time prediction go? Ceilings for issue #5's targets.

    python benchmarks/history_ceiling.py                      # every shared trace
    python benchmarks/history_ceiling.py --trace KTH-SP2-1996-2.1-cln.swf.gz --json

The online estimator (``rightsize history-bench``) may only learn from jobs that ended
before a prediction is made. The predictors here break that rule on purpose, each in a
way that can only help them, so what they score bounds what an online predictor with the
same information could score:

- ``signature_loo_median``: a job's run time predicted by the median run time of every
  *other* job of its signature (same user, requested time and processors), past and
  future; the request where it has none.
- ``signature_loo_best``: the same group, but the one run time among the others with the
  best Tsafrir accuracy over the others (the group's best constant, leave-one-out).
- ``cv_p50``: the estimator's own submit-time features and candidate selector
  (``fit_snapshot``), trained on a random 4/5 of the *whole* trace and scored on the
  other fifth (5 folds): more training data than any online model has, from both sides
  of each job in time.
- ``cv_safe``: the same models' safe request at the smallest price of coverage whose
  under-prediction rate over the trace is at most 5 %, that price chosen *on the scored
  jobs themselves* (hindsight).

Jobs scored as in ``history-bench``: run time > 0 and a requested time, predictions
floored at 1 s. Accuracy is Tsafrir's mean of min(p, r) / max(p, r).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from knowledge_base.errors import InvalidInputError
from tools.estimators.history.estimator import (
    SAFE_WEIGHTS,
    HistoryConfig,
    HistoryEstimator,
    QuantileModel,
    allowance_s,
    fit_snapshot,
    predict_rows,
)
from tools.estimators.history.replay import history_job_from_swf
from tools.traces.swf import read_swf

REPO = Path(__file__).resolve().parents[1]
TRACES = REPO.parent / "shared" / "data" / "traces"
UNDER_BUDGET = 0.05
FloatArray = NDArray[np.float64]


def accuracy(predicted: FloatArray, actual: FloatArray) -> float:
    predicted = np.maximum(predicted, 1.0)
    return float(np.mean(np.minimum(predicted, actual) / np.maximum(predicted, actual)))


def signature_ceilings(run: FloatArray, request: FloatArray, keys: list[Any]) -> dict[str, float]:
    """Leave-one-out predictions from each job's signature group, future included."""
    groups: dict[Any, list[int]] = defaultdict(list)
    for index, key in enumerate(keys):
        groups[key].append(index)
    median, best = request.copy(), request.copy()
    rng = np.random.default_rng(0)
    for members in groups.values():
        size = len(members)
        if size < 2:
            continue
        values = run[members]
        for k, index in enumerate(members):
            median[index] = np.median(np.delete(values, k))
        # Candidates: the group's run times (a sample of 1,500 in bigger groups).
        picked = np.arange(size) if size <= 1500 else rng.choice(size, 1500, replace=False)
        points = values[picked]
        ratio = np.minimum(points[:, None], values[None, :]) / np.maximum(
            points[:, None], values[None, :]
        )
        totals = ratio.sum(axis=1)
        for k, index in enumerate(members):
            leave_out = totals - ratio[:, k]
            leave_out[picked == k] = -1.0  # a job may not predict itself
            best[index] = points[int(np.argmax(leave_out))]
    in_group = np.array([len(groups[key]) > 1 for key in keys])
    return {
        "signature_loo_median": accuracy(median, run),
        "signature_loo_best": accuracy(best, run),
        "share_with_a_signature_group": float(in_group.mean()),
    }


def cross_validated(
    rows: NDArray[np.float32], labels: FloatArray, config: HistoryConfig, folds: int
) -> dict[str, Any]:
    """The selector trained on random folds of the whole trace; safe price in hindsight."""
    fold = np.random.default_rng(0).integers(0, folds, len(rows))
    models: list[QuantileModel] = []
    for k in range(folds):
        train = fold != k
        window = labels[train]
        models.append(
            fit_snapshot(
                rows[train],
                window,
                config,
                grace_s=allowance_s(window, config.target_under_rate / 2),
                safe_grace_s=allowance_s(window, config.target_under_rate / 8),
                version=1,
                safe_weight=SAFE_WEIGHTS[-1],
            )
        )
    run = labels[:, 3]

    def predict(weight: float) -> tuple[FloatArray, FloatArray]:
        p50, safe = np.empty(len(rows)), np.empty(len(rows))
        for k, model in enumerate(models):
            test = fold == k
            batch = predict_rows(dataclasses.replace(model, safe_weight=weight), rows[test])
            p50[test], safe[test] = batch.runtime_p50_s, batch.runtime_safe_s
        return p50, safe

    p50, _ = predict(SAFE_WEIGHTS[-1])
    # Coverage grows with the price: the smallest price within the budget, by bisection.
    low, high = 0, len(SAFE_WEIGHTS) - 1
    while low < high:
        middle = (low + high) // 2
        _, safe = predict(SAFE_WEIGHTS[middle])
        if float(np.mean(safe < run)) <= UNDER_BUDGET:
            high = middle
        else:
            low = middle + 1
    _, safe = predict(SAFE_WEIGHTS[low])
    return {
        "cv_p50": accuracy(p50, run),
        "cv_p50_under_rate": float(np.mean(p50 < run)),
        "cv_safe": accuracy(safe, run),
        "cv_safe_under_rate": float(np.mean(safe < run)),
        "cv_safe_price": SAFE_WEIGHTS[low],
    }


def ceilings(trace: Path, config: HistoryConfig, folds: int) -> dict[str, Any]:
    started = time.perf_counter()
    header, swf_jobs, _ = read_swf(trace)
    jobs = [history_job_from_swf(job, header) for job in swf_jobs]
    scored = [
        job for job in jobs if job.run_s is not None and job.run_s > 0 and job.requested_time_s
    ]
    run = np.array([job.run_s for job in scored], dtype=np.float64)
    request = np.array([job.requested_time_s for job in scored], dtype=np.float64)
    keys = [(job.user, job.requested_time_s, job.procs) for job in scored]
    result: dict[str, Any] = {"trace": trace.name, "jobs": len(scored)}
    result.update(signature_ceilings(run, request, keys))
    # The estimator's submit-time rows, made as the jobs happened; never trained.
    features = HistoryEstimator(config.model_copy(update={"first_train_jobs": 10**12}))
    features.learn_history(jobs)
    rows, labels = features.finished_table()
    has_request = ~np.isnan(labels[:, 2])
    result.update(cross_validated(rows[has_request], labels[has_request], config, folds))
    result["seconds"] = round(time.perf_counter() - started, 1)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", action="append", help="file name in ../shared/data/traces")
    parser.add_argument("--trees", type=int, default=60, help="rounds per model (default 60)")
    parser.add_argument("--depth", type=int, default=6, help="tree depth (default 6)")
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    for name, value, least in (("--folds", args.folds, 2), ("--trees", args.trees, 1)):
        if value < least:
            parser.error(f"{name} must be at least {least}, got {value}")
    if args.depth < 1:
        parser.error(f"--depth must be at least 1, got {args.depth}")
    names = args.trace or sorted(path.name for path in TRACES.glob("*.swf*"))
    config = HistoryConfig(estimate_trees=args.trees, estimate_depth=args.depth, threads=1)
    if not args.json:
        print(
            f"# ceilings (future allowed), selector {args.trees} rounds of depth {args.depth},"
            f" {args.folds} random folds; accuracy (under-prediction rate)"
        )
        print(
            "| trace | jobs | signature LOO median | signature LOO best |"
            " CV p50 | CV safe, price in hindsight | s |"
        )
        print("|---|---|---|---|---|---|---|")
    for name in names:
        try:
            row = ceilings(TRACES / name, config, args.folds)
        except InvalidInputError as error:
            parser.exit(2, f"history_ceiling: {error}\n")
        if args.json:
            print(json.dumps(row), flush=True)
            continue
        print(
            f"| {row['trace']} | {row['jobs']} | {row['signature_loo_median']:.3f} |"
            f" {row['signature_loo_best']:.3f} |"
            f" {row['cv_p50']:.3f} ({row['cv_p50_under_rate']:.3f}) |"
            f" {row['cv_safe']:.3f} ({row['cv_safe_under_rate']:.3f}) | {row['seconds']} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
