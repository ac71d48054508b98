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
from typing import Any

from history_targets import machine as this_machine
from history_targets import print_notes, run_traces

RULES = [
    ("user_request", "user request"),
    ("last3_max_x1", "last-3-max x1"),
    ("last3_max_x1.5", "last-3-max x1.5"),
    ("last3_max_x2", "last-3-max x2"),
    ("last3_max_tuned", "last-3-max, k tuned*"),
    ("model", "model"),
]
PARTS = [("all_jobs", "all"), ("tune", "first half (tune)"), ("held_out", "later half (held out)")]


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
    results, skipped = run_traces(args.trace, "memory", args.limit)
    machine = this_machine()
    if args.json:
        print(json.dumps({"machine": machine, "results": results, "skipped": skipped}, indent=2))
        return
    print(markdown(results))
    print_notes(results)
    print(
        "\ncells: OOM rate (request < use) / waste (sum(max(request - use, 0)) / sum(use)), "
        "per processor. * k chosen knowing the answers, to the model's OOM rate on the same "
        f"jobs. Machine: {machine['cpus']} CPUs ({machine['machine']}), Python "
        f"{machine['python']}, 1-min load average at the end {machine['load_average_1m']:.1f}. "
        f"Traces without used memory: {', '.join(sorted(skipped)) or 'none'}."
    )


if __name__ == "__main__":
    main()
