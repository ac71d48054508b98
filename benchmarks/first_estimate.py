"""How long a user's first ``rightsize estimate`` takes, and the next one of the same file.

    python benchmarks/first_estimate.py            # median of 3 per row
    python benchmarks/first_estimate.py --runs 5 --json

Each row is a fresh interpreter (``python -m rightsize estimate ...``) on
``examples/models/small_cnn.py`` at batch 32, timed from spawn to exit: ``first`` on a
fresh home (nothing traced, nothing registered), ``again`` on the home the first left
(the model file's traces are read by content from ``HOME/traces``). A warm-up run fills
the OS file cache first. Beside the wall time, the child's CPU time (user + system): on
a loaded machine the wall time grows with the load, the CPU time hardly does. Target
(issue #40): a first ``estimate`` under 5 s.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
TARGET_S = 5.0
MODEL = ["--model-file", "examples/models/small_cnn.py", "--model-class", "SmallCNN"]


def _time(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    began = time.perf_counter()
    done = subprocess.run(argv, env=env, cwd=REPO, capture_output=True, check=False)
    took = time.perf_counter() - began
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({done.returncode}): {done.stderr[-400:]!r}")
    return took, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    base = [sys.executable, "-m", "rightsize", "estimate", *MODEL, "--batch-size", "32", "--json"]
    rows = [
        ("--hardware local", ["--hardware", "local"]),
        ("--hardware all", ["--hardware", "all"]),
    ]
    env = {k: v for k, v in os.environ.items() if not k.startswith("RIGHTSIZE_")}
    env["PYTHONPATH"] = str(REPO)
    with tempfile.TemporaryDirectory(prefix="rightsize-first-") as warm:
        _time([*base, *rows[0][1]], {**env, "RIGHTSIZE_HOME": warm})  # the OS file cache
    results: list[dict[str, Any]] = []
    for label, extra in rows:
        firsts, agains = [], []
        for _ in range(args.runs):
            with tempfile.TemporaryDirectory(prefix="rightsize-first-") as home:
                run_env = {**env, "RIGHTSIZE_HOME": home}
                firsts.append(_time([*base, *extra], run_env))
                agains.append(_time([*base, *extra], run_env))
        for kind, runs in (("first", firsts), ("again", agains)):
            wall = statistics.median(t for t, _ in runs)
            results.append(
                {
                    "command": f"estimate {label} ({kind})",
                    "median_s": round(wall, 2),
                    "median_cpu_s": round(statistics.median(c for _, c in runs), 2),
                    "target_s": TARGET_S if kind == "first" else None,
                    "ok": wall < TARGET_S if kind == "first" else None,
                }
            )
    machine = f"{platform.machine()}, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f}"
    if args.json:
        print(json.dumps({"runs": args.runs, "machine": machine, "results": results}, indent=2))
        return
    print(f"first estimate, median of {args.runs} runs ({machine}); wall s, CPU s")
    width = max(len(r["command"]) for r in results)
    for r in results:
        goal = "" if r["target_s"] is None else f"  target {r['target_s']} s"
        verdict = {True: "  ok", False: "  SLOW", None: ""}[r["ok"]]
        figures = f"{r['median_s']:6.2f}  {r['median_cpu_s']:6.2f}"
        print(f"  {r['command']:<{width}}  {figures}{goal}{verdict}")


if __name__ == "__main__":
    main()
