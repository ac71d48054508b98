"""Replay speed of the simulator on every shared trace: jobs per second by policy.

    python benchmarks/simulate.py [--repeats 5] [--only SDSC] [--json]

Loading the trace and compiling the core are not timed (the core is compiled, or loaded
from numba's cache, once per process); each figure is the median of ``--repeats`` whole-
trace replays. Jobs per second are counted on CPU (process) time, so a machine shared
with other work still measures the simulator; wall-clock seconds are printed beside.
Targets (issues #10, #17): EASY >= 500,000 jobs/s on SDSC-SP2 (with the
queue's order and with shortest-first backfilling), and never below 100,000 jobs/s on any
shared trace.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from simulations.replay import Estimate, Order, Policy, replay
from simulations.rightsize_policy import RightsizePolicy
from simulations.workload import load_swf

TRACES = Path(__file__).resolve().parents[2] / "shared" / "data" / "traces"
RUNS: tuple[tuple[str, Policy, Estimate, Order, Order, bool], ...] = (
    ("fcfs", "fcfs", "user", "fcfs", "fcfs", False),
    ("easy", "easy", "user", "fcfs", "fcfs", False),
    ("easy-sjbf", "easy", "user", "sjbf", "fcfs", False),
    ("easy++", "easy", "last2", "sjbf", "fcfs", False),
    ("easy-xf-queue", "easy", "user", "xf", "xf", False),
    ("easy++-xf-queue", "easy", "last2", "xf", "xf", False),
    ("easy++-xf-bound", "easy", "last2", "xf", "xf", True),
    ("conservative", "conservative", "user", "fcfs", "fcfs", False),
)
"""(row name, policy, estimate, backfill order, queue order, wait bound): EASY++ is last-2
estimates with SJBF; the xf-queue rows order the queue itself by expansion factor, as
``--policy rightsize`` does, and the bound row adds its shipped wait bound (the shipped
policy itself, with the history estimator's estimates, is timed by benchmarks/outcome.py)."""


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--traces", type=Path, default=TRACES)
    parser.add_argument("--only", default="", help="Only traces whose file name has this")
    args = parser.parse_args()
    rows = []
    # "**" is not a pattern pathlib accepts, so no --only is plain "*.swf.gz".
    pattern = f"*{args.only}*.swf.gz" if args.only else "*.swf.gz"
    for trace in sorted(args.traces.glob(pattern)):
        began = time.perf_counter()
        workload = load_swf(trace)
        load_s = time.perf_counter() - began
        bound_s = RightsizePolicy().starve_s(workload)
        for name, policy, estimate, order, queue_order, bounded in RUNS:
            runs = [
                replay(
                    workload,
                    policy=policy,
                    estimate=estimate,
                    order=order,
                    queue_order=queue_order,
                    starve_s=bound_s if bounded else None,
                )
                for _ in range(args.repeats)
            ]
            rates = [workload.jobs / max(r.result.cpu_seconds, 1e-9) for r in runs]
            rows.append(
                {
                    "trace": trace.name.split("-cln")[0].removesuffix(".swf.gz"),
                    "jobs": workload.jobs,
                    "procs": workload.machine_procs,
                    "policy": name,
                    "jobs_per_s": statistics.median(rates),
                    "cpu_seconds": statistics.median(r.result.cpu_seconds for r in runs),
                    "seconds": statistics.median(r.result.seconds for r in runs),
                    "mean_bsld": runs[0].result.mean_bsld,
                    "load_s": load_s,
                }
            )
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    print(
        f"# {os.cpu_count()} cores, Python {platform.python_version()}, "
        f"load average {os.getloadavg()[0]:.1f}; median of {args.repeats} replays"
    )
    print(
        f"{'trace':<18} {'jobs':>8} {'procs':>6} {'policy':<16} {'CPU jobs/s':>12} "
        f"{'CPU s':>7} {'wall s':>7} {'mean bsld':>10}"
    )
    for r in rows:
        print(
            f"{r['trace']:<18} {r['jobs']:>8,} {r['procs']:>6} {r['policy']:<16} "
            f"{r['jobs_per_s']:>12,.0f} {r['cpu_seconds']:>7.3f} {r['seconds']:>7.3f} "
            f"{r['mean_bsld']:>10.2f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
