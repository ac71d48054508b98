"""A plan's wait, learned against the planner's rule, for jobs at the moment they are submitted.

    python benchmarks/plan_waits.py                       # KTH-SP2 and SDSC-SP2
    python benchmarks/plan_waits.py --trace CTC-SP2-1996-3.1-cln.swf.gz --jobs 100

A plan asks for the wait of a job not yet submitted. For ``--jobs`` jobs of each trace,
drawn at random (seed 42) from ``--weeks`` weeks after ``--warmup-days`` of history, the
queue is rebuilt from the recorded times just before the job was submitted and the
question is asked the way a plan asks it (``tools.waits.learned.LearnedWaits.wait``: a
new job of its size and limit, last in line; the model trained at the week's cutoff from
the jobs that had started by then), and the way the planner's rule answers it
(``tools.waits.rule.rule_starts``: running jobs end at 0.4 x limit, conservative
backfilling, with the band ``rule_interval`` gives). Both against the recorded wait:
within 2x (10-minute floor on both), median absolute error, share inside p10-p90.

The cost of one plan: the training (once per system per process and week), then one
prediction per distinct (nodes, walltime) of the plan's options, timed on a grid of 28
sizes on the last instant's queue.
"""

from __future__ import annotations

import argparse
import math
import platform
import random
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tools.waits.jobs import load_history  # noqa: E402
from tools.waits.learned import LearnedWaits  # noqa: E402
from tools.waits.predictor import WaitPredictor  # noqa: E402
from tools.waits.rule import rule_interval, rule_starts  # noqa: E402
from tools.waits.snapshot import PendingJob  # noqa: E402

TRACES = REPO.parent / "shared" / "data" / "traces"
DAY_S = 86400.0
FLOOR_S = 600.0


def within_2x(predicted: np.ndarray, actual: np.ndarray) -> float:
    p, a = np.maximum(predicted, FLOOR_S), np.maximum(actual, FLOOR_S)
    return float(np.mean(np.maximum(p / a, a / p) <= 2.0))


def run_trace(path: Path, jobs: int, weeks: int, warmup_days: float) -> dict[str, object]:
    history = load_history(path)
    week = 7 * DAY_S
    start = math.ceil((float(history.submit_s.min()) + warmup_days * DAY_S) / week) * week
    end = start + weeks * week
    candidates = np.flatnonzero((history.submit_s >= start) & (history.submit_s < end))
    chosen = sorted(random.Random(42).sample(list(candidates), min(jobs, len(candidates))))
    predictor = WaitPredictor(history)
    rows: list[tuple[float, float, float, float, float, float, float]] = []
    train_s = 0.0
    predict_s: list[float] = []
    learned: LearnedWaits | None = None
    for index in chosen:
        submit = float(history.submit_s[index])
        cutoff = math.floor(submit / week) * week
        if cutoff not in predictor._submission_models:
            began = time.perf_counter()
            predictor.submission_model_for(submit)
            train_s += time.perf_counter() - began
        model = predictor.submission_model_for(submit)
        if model.booster is None:
            continue
        before = history.snapshot_at(submit - 1e-3)  # the queue the plan reads
        learned = LearnedWaits(path.name, before, predictor, model)
        began = time.perf_counter()
        answer = learned.wait(int(history.procs[index]), float(history.requested_s[index]))
        predict_s.append(time.perf_counter() - began)
        job = PendingJob(
            job_id="new-job",
            procs=int(history.procs[index]),
            submit_s=before.taken_at,
            requested_s=float(history.requested_s[index]),
        )
        with_job = before.model_copy(update={"pending": [*before.pending, job]})
        rule = float(rule_starts(with_job)[-1])  # the same question, the rule's answer
        low, high = rule_interval(rule)
        actual = float(history.start_s[index] - submit)
        taken = answer.taken_at
        rows.append(
            (actual, answer.wait_s, answer.p10_s - taken, answer.p90_s - taken, rule, low, high)
        )
    table = np.array(rows)
    actual = table[:, 0]

    def inside(low: np.ndarray, high: np.ndarray) -> float:
        floored = np.maximum(actual, FLOOR_S)
        return float(
            np.mean((floored >= np.maximum(low, FLOOR_S)) & (floored <= np.maximum(high, FLOOR_S)))
        )

    grid_s = 0.0
    if learned is not None:
        sizes = [
            (n, w)
            for n in (1, 2, 4, 8, 16, 32, 64)
            for w in (3600.0, 4 * 3600.0, 12 * 3600.0, 24 * 3600.0)
        ]
        fresh = LearnedWaits(learned.system, learned.snapshot, learned.predictor, learned.model)
        began = time.perf_counter()
        for nodes, walltime in sizes:
            fresh.wait(min(nodes, history.total_procs), walltime)
        grid_s = time.perf_counter() - began
        basis = fresh.basis(fresh.wait(1, 3600.0))
        queue = len(fresh.snapshot.pending)
    return {
        "trace": path.name,
        "jobs": len(rows),
        "learned_within_2x": within_2x(table[:, 1], actual),
        "rule_within_2x": within_2x(table[:, 4], actual),
        "learned_mae_h": float(np.median(np.abs(table[:, 1] - actual))) / 3600,
        "rule_mae_h": float(np.median(np.abs(table[:, 4] - actual))) / 3600,
        "learned_coverage": inside(table[:, 2], table[:, 3]),
        "rule_coverage": inside(table[:, 5], table[:, 6]),
        "trainings": len(predictor._submission_models),
        "train_s": train_s,
        "predict_ms": 1000 * float(np.median(predict_s)) if predict_s else 0.0,
        "grid_28_sizes_s": grid_s,
        "grid_queue": queue if learned is not None else 0,
        "basis": basis if learned is not None else "",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", action="append")
    parser.add_argument("--jobs", type=int, default=150)
    parser.add_argument("--weeks", type=int, default=3)
    parser.add_argument("--warmup-days", type=float, default=70.0)
    args = parser.parse_args()
    names = args.trace or ["KTH-SP2-1996-2.1-cln.swf.gz", "SDSC-SP2-1998-4.2-cln.swf.gz"]
    print(
        "| trace | jobs at submission | learned within 2x | rule within 2x | learned MAE h "
        "| rule MAE h | learned p10-p90 coverage | rule band coverage | train s (trainings) "
        "| one size ms | 28 sizes s (queue) |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    bases = []
    for name in names:
        r = run_trace(TRACES / name, args.jobs, args.weeks, args.warmup_days)
        print(
            f"| {r['trace']} | {r['jobs']} | {r['learned_within_2x']:.3f} | "
            f"{r['rule_within_2x']:.3f} | {r['learned_mae_h']:.2f} | {r['rule_mae_h']:.2f} | "
            f"{r['learned_coverage']:.2f} | {r['rule_coverage']:.2f} | "
            f"{r['train_s']:.1f} ({r['trainings']}) | {r['predict_ms']:.0f} | "
            f"{r['grid_28_sizes_s']:.2f} ({r['grid_queue']} pending) |",
            flush=True,
        )
        bases.append(f"{r['trace']}: {r['basis']}")
    print("\n".join(bases))
    print(f"host: {platform.machine()}, python {platform.python_version()}")


if __name__ == "__main__":
    main()
