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
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
TRACES = REPO.parent / "shared" / "data" / "traces"
PREDICTORS = [("user_last", "user's last"), ("user_median", "user's median"), ("model", "model")]
PARTS = [("all_jobs", "all"), ("tune", "first half"), ("held_out", "later half (held out)")]


def run_one(trace: Path, limit: int) -> dict[str, Any] | str:
    """The command's JSON, or why the trace has nothing to score."""
    command = [sys.executable, "-c", "from rightsize.cli import main; main()", "history-bench"]
    command += ["--trace", str(trace), "--target", "cpu-efficiency", "--json"]
    if limit:
        command += ["--limit", str(limit)]
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, cwd=REPO, check=False)
    wall_s = time.perf_counter() - started
    if done.returncode == 2:
        return str(json.loads(done.stdout)["error"])
    if done.returncode != 0:
        raise SystemExit(f"{trace.name}: exit {done.returncode}\n{done.stderr[-2000:]}")
    result: dict[str, Any] = json.loads(done.stdout)
    result["end_to_end_s"] = round(wall_s, 1)
    return result


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
    names = args.trace or sorted(p.name for p in TRACES.glob("*.swf*"))
    results: list[dict[str, Any]] = []
    skipped: dict[str, str] = {}
    for name in names:
        found = run_one(TRACES / name, args.limit)
        if isinstance(found, str):
            skipped[name] = found
            print(f"skipped {name}: {found}", file=sys.stderr, flush=True)
            continue
        results.append(found)
        print(f"done {name}: {found['end_to_end_s']} s", file=sys.stderr, flush=True)
    machine = {
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "load_average_1m": os.getloadavg()[0],
    }
    if args.json:
        print(json.dumps({"machine": machine, "results": results, "skipped": skipped}, indent=2))
        return
    print(markdown(results))
    for r in results:
        for note in r.get("notes", []):
            print(f"\n{r['trace']}: {note}")
    print(
        f"\nMachine: {machine['cpus']} CPUs, Python {machine['python']}, 1-min load average "
        f"at the end {machine['load_average_1m']:.1f}. Traces without CPU time: "
        f"{', '.join(sorted(skipped)) or 'none'}."
    )


if __name__ == "__main__":
    main()
