"""CPU efficiency on every shared trace that records CPU time: MAE of each predictor.

    python benchmarks/cpu_efficiency.py                   # every trace, first 40,000 jobs
    python benchmarks/cpu_efficiency.py --trace LANL-CM5-1994-4.1-cln.swf.gz --limit 0
    python benchmarks/cpu_efficiency.py --json

Each trace runs through the real command, ``rightsize history-bench --trace F --target
cpu-efficiency --json --limit N``, in its own process, one at a time; a trace without
CPU time (SWF field 6) is reported as such (the command exits 2) and skipped. The
efficiency is CPU time / (run time x processors), capped at 1. Predictors: the user's
last efficiency and the median of their last ten (each the center's recent median for a
user with none), and the model's median; the model's 0.1-0.9 interval is scored by its
coverage and width. Three parts: all jobs, the first half (submit order) and the later
half (held out). ``--limit 0`` replays whole traces (minutes each on a busy machine).
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from history_targets import machine as this_machine
from history_targets import print_notes, run_traces

PREDICTORS = [("user_last", "user's last"), ("user_median", "user's median"), ("model", "model")]
PARTS = [("all_jobs", "all"), ("tune", "first half"), ("held_out", "later half (held out)")]


def markdown(results: list[dict[str, Any]]) -> str:
    head = " | ".join(f"MAE {label}" for _, label in PREDICTORS)
    lines = [
        f"| trace | part | jobs | mean efficiency | {head} | model vs best baseline "
        "| interval coverage / width | below 50 %: flagged, precision, recall |",
        "|" + "---|" * (7 + len(PREDICTORS)),
    ]
    for r in results:
        name = r["trace"].removesuffix(".swf.gz")
        for key, label in PARTS:
            part = r[key]
            mae = part["mae"]
            if not mae:
                continue
            best = min(mae["user_last"], mae["user_median"])
            change = (mae["model"] / best - 1) * 100
            cells = " | ".join(f"{mae[k]:.3f}" for k, _ in PREDICTORS)
            low = (
                f"{part['low_predicted']}, {part['low_precision'] or 0:.2f}, "
                f"{part['low_recall'] or 0:.2f}"
            )
            lines.append(
                f"| {name} | {label} | {part['jobs']} | {part['mean_efficiency']:.2f} | {cells} "
                f"| {change:+.0f} % | {part['interval_coverage']:.2f} / "
                f"{part['interval_width']:.2f} | {low} |"
            )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", action="append", help="A file name in the traces folder")
    parser.add_argument("--limit", type=int, default=40_000, help="First N jobs (0: all)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    results, skipped = run_traces(args.trace, "cpu-efficiency", args.limit or None)
    machine = this_machine()
    if args.json:
        print(json.dumps({"machine": machine, "results": results, "skipped": skipped}, indent=2))
        return
    print(markdown(results))
    print_notes(results)
    print(
        f"\nMachine: {machine['cpus']} CPUs, Python {machine['python']}, 1-min load average "
        f"at the end {machine['load_average_1m']:.1f}. Traces without CPU time: "
        f"{', '.join(sorted(skipped)) or 'none'}."
    )


if __name__ == "__main__":
    main()
