"""Memory requests on every shared trace that records memory: OOM rate and waste.

    python benchmarks/memory.py                     # every trace in ../shared/data/traces
    python benchmarks/memory.py --trace LANL-CM5-1994-4.1-cln.swf.gz
    python benchmarks/memory.py --limit 50000 --json

Each trace runs through the real command, ``rightsize history-bench --trace F --target
memory --json``, in its own process, one at a time; a trace without used memory (SWF
field 7) is reported as such (the command exits 2) and skipped. Rules: the user's own
request (field 10), last-three-max x k (k = 1, 1.5, 2), last-three-max with k tuned
knowing the answers to the model's OOM rate (not runnable live: the yardstick), and the
model's request. Three parts per trace: all jobs, the first half (where settings were
chosen) and the later half (held out). The issue's target: model OOM <= 2 % and model
waste <= 0.7 x the tuned last-three-max waste.

Only LANL-CM5 records real use; HPC2N's field 7 equals its request on almost every job
(the command says so in its notes): its figures are not evidence of use.
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
RULES = [
    ("user_request", "user request"),
    ("last3_max_x1", "last-3-max x1"),
    ("last3_max_x1.5", "last-3-max x1.5"),
    ("last3_max_x2", "last-3-max x2"),
    ("last3_max_tuned", "last-3-max, k tuned*"),
    ("model", "model"),
]
PARTS = [("all_jobs", "all"), ("tune", "first half (tune)"), ("held_out", "later half (held out)")]


def run_one(trace: Path, limit: int | None) -> dict[str, Any] | str:
    """The command's JSON, or why the trace has nothing to score."""
    command = [sys.executable, "-c", "from rightsize.cli import main; main()", "history-bench"]
    command += ["--trace", str(trace), "--target", "memory", "--json"]
    if limit is not None:
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


def _cell(figures: dict[str, Any] | None) -> str:
    if figures is None:
        return "-"
    k = f" (k {figures['factor']:.2f})" if figures.get("factor") is not None else ""
    return f"{figures['oom_rate'] * 100:.2f} % / {figures['waste']:.2f}{k}"


def markdown(results: list[dict[str, Any]]) -> str:
    lines = [
        "| trace | part | jobs | " + " | ".join(label for _, label in RULES) + " | model / tuned |",
        "|" + "---|" * (4 + len(RULES)),
    ]
    for r in results:
        name = r["trace"].removesuffix(".swf.gz")
        for key, label in PARTS:
            part = r[key]
            jobs = part["predictors"].get("model", {}).get("jobs", 0)
            ratio = part.get("model_waste_vs_tuned")
            cells = [_cell(part["predictors"].get(rule)) for rule, _ in RULES]
            lines.append(
                f"| {name} | {label} | {jobs} | "
                + " | ".join(cells)
                + f" | {'-' if ratio is None else f'{ratio:.2f}'} |"
            )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", action="append", help="A file name in the traces folder")
    parser.add_argument("--limit", type=int, default=None, help="First N jobs of each trace")
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
        "machine": platform.machine(),
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
        "\ncells: OOM rate (request < use) / waste (sum(max(request - use, 0)) / sum(use)), "
        "per processor. * k chosen knowing the answers, to the model's OOM rate on the same "
        f"jobs. Machine: {machine['cpus']} CPUs ({machine['machine']}), Python "
        f"{machine['python']}, 1-min load average at the end {machine['load_average_1m']:.1f}. "
        f"Traces without used memory: {', '.join(sorted(skipped)) or 'none'}."
    )


if __name__ == "__main__":
    main()
