"""Run-time predictors on every shared trace: accuracy, median APE, under-prediction, speed.

    python benchmarks/history.py                 # every trace in ../shared/data/traces
    python benchmarks/history.py --json          # the same as JSON
    python benchmarks/history.py --markdown      # the table docs/history.md quotes
    python benchmarks/history.py --trace KTH-SP2-1996-2.1-cln.swf.gz --limit 5000

Each trace runs through the real command, ``rightsize history-bench --trace F --json``,
in its own process, one trace at a time; "end-to-end s" is that process's wall time
(interpreter start, imports, read, replay, score), "jobs/s" is jobs read over it.
Predictors: the user's request, last-2 (EASY++, online: a user's last two *finished*
jobs), the model's p50 (the point with the best expected accuracy; the JSON's
``model_estimate`` is the same point and is not repeated in the table) and safe request,
the safe request capped at the user's request, and last-2 in submit order (the published
figures' variant, which uses run times not yet known at submit time; shown only to check
the metric code). Memory requests have their own benchmark, ``benchmarks/memory.py``.
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
PREDICTORS = [
    ("user_request", "user request"),
    ("last2", "last-2"),
    ("model_p50", "model p50"),
    ("model_safe", "model safe"),
    ("model_safe_at_request", "safe, capped at request"),
    ("last2_submit_order", "last-2, submit order*"),
]


def run_one(trace: Path, limit: int | None) -> dict[str, Any]:
    command = [
        sys.executable,
        "-c",
        "from rightsize.cli import main; main()",
        "history-bench",
        "--trace",
        str(trace),
        "--json",
    ]
    if limit is not None:
        command += ["--limit", str(limit)]
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, cwd=REPO, check=False)
    wall_s = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{trace.name}: exit {done.returncode}\n{done.stderr[-2000:]}")
    result: dict[str, Any] = json.loads(done.stdout)
    result["end_to_end_s"] = round(wall_s, 1)
    result["jobs_per_s"] = round(result["jobs_read"] / wall_s)
    return result


def _cells(figures: dict[str, float]) -> str:
    return f"{figures['accuracy']:.2f} / {figures['median_ape']:.0f} / {figures['under_rate']:.3f}"


def markdown(results: list[dict[str, Any]]) -> str:
    head = "| trace | jobs scored | end-to-end s | jobs/s | " + " | ".join(
        label for _, label in PREDICTORS
    )
    lines = [head + " |", "|" + "---|" * (4 + len(PREDICTORS))]
    for r in results:
        cells = [_cells(r["predictors"][key]) for key, _ in PREDICTORS]
        name = r["trace"].removesuffix(".swf.gz")
        lines.append(
            f"| {name} | {r['jobs']} | {r['end_to_end_s']:.0f} | {r['jobs_per_s']} | "
            + " | ".join(cells)
            + " |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", action="append", help="A file name in the traces folder")
    parser.add_argument("--limit", type=int, default=None, help="First N jobs of each trace")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args()
    names = args.trace or sorted(p.name for p in TRACES.glob("*.swf*"))
    results = []
    for name in names:
        results.append(run_one(TRACES / name, args.limit))
        print(f"done {name}: {results[-1]['end_to_end_s']} s", file=sys.stderr, flush=True)
    machine = {
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "machine": platform.machine(),
        "load_average_1m": os.getloadavg()[0],
    }
    if args.json:
        print(json.dumps({"machine": machine, "results": results}, indent=2))
        return
    print(markdown(results))
    print(
        "\ncells: accuracy / median APE % / under-prediction rate. "
        "* sees run times not yet known at submit time (reference only). "
        f"Machine: {machine['cpus']} CPUs ({machine['machine']}), Python {machine['python']}, "
        f"1-min load average at the end {machine['load_average_1m']:.1f}."
    )


if __name__ == "__main__":
    main()
