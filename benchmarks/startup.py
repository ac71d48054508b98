"""Start-up time of the ``rightsize`` command line: median of N runs per command.

    python benchmarks/startup.py             # median of 5 per row
    python benchmarks/startup.py --runs 9 --json

Each row is a fresh interpreter (``python -m rightsize ...``), timed from spawn to exit:
``import rightsize.cli``, ``rightsize --help`` (target 0.5 s), ``rightsize CMD --help``
for every command (its start-up: the command's module loads, its options parse; target
1.5 s), and two whole commands that touch the knowledge base (``catalog list``) and plan
(``plan examples/resnet50.yaml``, which also loads the estimators it runs). A warm-up
run fills the OS file cache first; the home is a fresh temporary folder. Beside the wall
time, the child's CPU time (user + system): on a loaded machine the wall time grows with
the load, the CPU time hardly does, and ``python -c pass`` shows the interpreter's share.
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
sys.path.insert(0, str(REPO))

from rightsize.cli import COMMANDS  # noqa: E402  (light: it imports no command)

HELP_TARGET_S = 0.5
COMMAND_TARGET_S = 1.5


def _time(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(wall s, CPU s): CPU time (user + system of the child) hardly moves with the load."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    began = time.perf_counter()
    done = subprocess.run(argv, env=env, cwd=REPO, capture_output=True, check=False)
    took = time.perf_counter() - began
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode not in (0, 1):
        raise SystemExit(f"{' '.join(argv)} failed ({done.returncode}): {done.stderr[-400:]!r}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return took, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    cli = [sys.executable, "-m", "rightsize"]
    rows: list[tuple[str, list[str], float | None]] = [
        ("python -c pass (the interpreter alone)", [sys.executable, "-c", "pass"], None),
        ("import rightsize.cli", [sys.executable, "-c", "import rightsize.cli"], None),
        ("rightsize --help", [*cli, "--help"], HELP_TARGET_S),
        *((f"rightsize {n} --help", [*cli, n, "--help"], COMMAND_TARGET_S) for n in COMMANDS),
        ("rightsize catalog list --json", [*cli, "catalog", "list", "--json"], None),
        (
            "rightsize plan examples/resnet50.yaml --json",
            [*cli, "plan", "examples/resnet50.yaml", "--json"],
            None,
        ),
    ]
    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="rightsize-startup-") as home:
        env = {**os.environ, "RIGHTSIZE_HOME": home}
        for key in ("RIGHTSIZE_KB_URL", "RIGHTSIZE_MONGO_URL", "RIGHTSIZE_KAFKA_BOOTSTRAP"):
            env.pop(key, None)
        for label, argv, target in rows:
            _time(argv, env)  # warm-up: file cache, the seeded catalog on first use
            runs = [_time(argv, env) for _ in range(args.runs)]
            wall = statistics.median(t for t, _ in runs)
            cpu = statistics.median(c for _, c in runs)
            results.append(
                {
                    "command": label,
                    "median_s": round(wall, 3),
                    "median_cpu_s": round(cpu, 3),
                    "min_s": round(min(t for t, _ in runs), 3),
                    "target_s": target,
                    "ok": None if target is None else wall < target,
                }
            )
    machine = f"{platform.machine()}, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f}"
    if args.json:
        print(json.dumps({"runs": args.runs, "machine": machine, "results": results}, indent=2))
        return
    print(f"start-up, median of {args.runs} runs ({machine}); wall s, CPU s")
    width = max(len(r["command"]) for r in results)
    for r in results:
        goal = "" if r["target_s"] is None else f"  target {r['target_s']} s"
        verdict = {True: "  ok", False: "  SLOW", None: ""}[r["ok"]]
        print(
            f"  {r['command']:<{width}}  {r['median_s']:6.3f}  {r['median_cpu_s']:6.3f}"
            f"{goal}{verdict}"
        )


if __name__ == "__main__":
    main()
