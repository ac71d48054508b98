"""Queue waits on every shared trace: within 2x, median absolute error, p10-p90 coverage.

    python benchmarks/waits.py                   # every trace in ../shared/data/traces
    python benchmarks/waits.py --markdown        # the table docs/waits.md quotes
    python benchmarks/waits.py --json
    python benchmarks/waits.py --trace KTH-SP2-1996-2.1-cln.swf.gz --weeks 3

For each trace: ``--weeks`` training cutoffs spread evenly over the trace (after
``--warmup-days`` of history), and ``--per-week`` random instants (seeded) in the week
after each; at every instant the queue is rebuilt from the recorded times and each
pending job's predicted remaining wait is compared with the recorded one. Within 2x uses
a 10-minute floor on both; coverage is the share of recorded waits inside p10-p90 (same
floor). Beside the model: its simulation alone (conservative backfilling with run times
learned online), and the two baselines: conservative backfilling with the requested
times (the ``squeue --start`` analogue) and the median wait of the last day's starts.

Leave-one-trace-out: each configuration in ``CONFIGS`` runs on every trace; for each
held-out trace the configuration with the best mean within-2x on the *other* traces is
the one reported for it (the model itself always learns online from the held-out
trace's own past, as at a center). "predict s" is the slowest single predict of the
replay once trained, and the last line times one predict on a 500-job queue.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tools.waits.jobs import JobTable, load_history  # noqa: E402
from tools.waits.predictor import WaitConfig, WaitPredictor  # noqa: E402
from tools.waits.replay import InstantWaits, replay_waits, score  # noqa: E402

TRACES = REPO.parent / "shared" / "data" / "traces"
DAY_S = 86400.0
CONFIGS: dict[str, WaitConfig] = {
    "window 60 d, depth 5": WaitConfig(),
    "window 30 d, depth 5": WaitConfig(window_s=30 * DAY_S),
    "window 60 d, depth 3": WaitConfig(depth=3, trees=200),
}
COLUMNS = [
    ("p50", "model p50"),
    ("simulation", "simulation only"),
    ("request", "requests (squeue --start)"),
    ("recent", "last day's median"),
]


def instants_for(
    table: JobTable, weeks: int, per_week: int, warmup_days: float, seed: int
) -> list[float]:
    rng = np.random.default_rng(seed)
    first = float(table.submit_s.min()) + warmup_days * DAY_S
    last = float(table.submit_s.max()) - 14 * DAY_S
    week = 7 * DAY_S
    cutoffs = np.floor(np.linspace(first, last, weeks) / week) * week
    out: list[float] = []
    for cutoff in cutoffs:
        out.extend(float(round(t)) for t in rng.uniform(cutoff, cutoff + week, per_week))
    return sorted(out)


def run_trace(path: Path, args: argparse.Namespace) -> dict[str, Any]:
    table = load_history(path)
    instants = instants_for(table, args.weeks, args.per_week, args.warmup_days, args.seed)
    found: dict[str, Any] = {
        "trace": path.name,
        "jobs": len(table),
        "instants": len(instants),
        "configs": {},
    }
    for name, config in CONFIGS.items():
        if args.config and name != args.config:
            continue
        began = time.perf_counter()
        replay: list[InstantWaits] = replay_waits(table, instants, WaitPredictor(table, config))
        found["configs"][name] = {
            "scores": {key: score(replay, key).model_dump() for key, _ in COLUMNS},
            "seconds": time.perf_counter() - began,
            "max_predict_s": max((i.predict_s for i in replay), default=0.0),
        }
        print(f"{path.name} [{name}] {found['configs'][name]['seconds']:.0f} s", file=sys.stderr)
    return found


def _mean_within(results: list[dict[str, Any]], name: str) -> float:
    return float(np.mean([r["configs"][name]["scores"]["p50"]["within_2x"] for r in results]))


def leave_one_out(results: list[dict[str, Any]]) -> dict[str, str]:
    """For each trace, the configuration best on the others (mean model within-2x)."""
    chosen = {}
    for held in results:
        others = [r for r in results if r is not held]
        names = list(held["configs"])
        chosen[held["trace"]] = (
            max(names, key=lambda name: _mean_within(others, name)) if others else names[0]
        )
    return chosen


def time_500(path: Path) -> float:
    """One predict on a queue of 500 pending jobs, the model already trained."""
    table = load_history(path)
    counts = [
        (len(table.pending_index(t)), t)
        for t in np.linspace(
            table.submit_s.min() + 90 * DAY_S, table.submit_s.max() - 14 * DAY_S, 400
        )
    ]
    _, busiest = max(counts)
    snapshot = table.snapshot_at(float(busiest))
    pending = list(snapshot.pending)
    while len(pending) < 500:  # pad with copies so the queue holds exactly 500 jobs
        pending += [
            job.model_copy(update={"job_id": f"{job.job_id}-{len(pending)}"})
            for job in snapshot.pending
        ]
    snapshot = snapshot.model_copy(update={"pending": pending[:500]})
    predictor = WaitPredictor(table)
    predictor.model_for(snapshot.taken_at)
    began = time.perf_counter()
    predictor.predict(snapshot)
    return time.perf_counter() - began


HEADER = (
    "| trace | jobs scored | config (chosen on the others) | model within 2x | simulation only "
    "| requests (squeue --start) | last day's median | model MAE h | requests MAE h "
    "| last day's MAE h | p10-p90 coverage |"
)


def markdown(results: list[dict[str, Any]], chosen: dict[str, str]) -> str:
    lines = [HEADER, "|---|---|---|---|---|---|---|---|---|---|---|"]
    for result in results:
        name = chosen[result["trace"]]
        s = result["configs"][name]["scores"]
        cells = [
            result["trace"],
            str(s["p50"]["jobs"]),
            name,
            *(f"{s[key]['within_2x']:.3f}" for key in ("p50", "simulation", "request", "recent")),
            *(f"{s[key]['median_abs_error_h']:.2f}" for key in ("p50", "request", "recent")),
            f"{s['p50']['coverage']:.2f}",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--trace", action="append", help="a file name in the traces folder (repeatable)"
    )
    parser.add_argument("--weeks", type=int, default=5)
    parser.add_argument("--per-week", type=int, default=4)
    parser.add_argument("--warmup-days", type=float, default=70.0)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--config", choices=list(CONFIGS), help="run only this configuration")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args()
    paths = [TRACES / name for name in args.trace] if args.trace else sorted(TRACES.glob("*.swf*"))
    results = [run_trace(path, args) for path in paths]
    chosen = leave_one_out(results)
    busiest = max(paths, key=lambda p: p.stat().st_size)
    took = time_500(busiest)
    if args.json:
        print(
            json.dumps(
                {
                    "results": results,
                    "chosen": chosen,
                    "predict_500_s": took,
                    "machine": platform.processor() or platform.machine(),
                },
                indent=2,
            )
        )
        return
    print(markdown(results, chosen))
    print(
        f"\none predict on 500 pending jobs ({busiest.name}, trained): {took:.2f} s "
        f"on {platform.machine()}"
    )


if __name__ == "__main__":
    main()
