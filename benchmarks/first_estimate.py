"""How long a user's first ``rightsize estimate`` takes, and the next one of the same file.

    python benchmarks/first_estimate.py                  # median of 3 per row
    python benchmarks/first_estimate.py --runs 5 --json
    python benchmarks/first_estimate.py --baseline DIR   # and another checkout, interleaved

Each row is a fresh interpreter (``python -m rightsize estimate ...``) on
``examples/models/small_cnn.py`` at batch 32, timed from spawn to exit: ``first`` on a
fresh home (nothing traced, nothing registered), ``again`` on the home the first left
(the model file's traces are read by content from ``HOME/traces``). Rows: the README's
invocation (no ``--hardware``: this machine), ``--hardware all`` and ``--gpu "NVIDIA
Tesla T4"``. A warm-up run fills the OS file cache first. Beside the wall time, the
child's CPU time (user + system, its own children included): on a loaded machine the
wall time grows with the load, the CPU time hardly does. ``--baseline DIR`` (a checkout
of another commit, e.g. ``git worktree add /tmp/base main``) runs the same rows there,
each of its runs beside one of this tree's, so both see the same load. Target (issue
#40): a first ``estimate`` under 5 s.
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


def _time(argv: list[str], env: dict[str, str], repo: Path) -> tuple[float, float]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    began = time.perf_counter()
    done = subprocess.run(argv, env=env, cwd=repo, capture_output=True, check=False)
    took = time.perf_counter() - began
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({done.returncode}): {done.stderr[-400:]!r}")
    return took, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


ROWS = [
    ("(README: this machine)", []),
    ("--hardware all", ["--hardware", "all"]),
    ('--gpu "NVIDIA Tesla T4"', ["--gpu", "NVIDIA Tesla T4"]),
]


def _pair(repo: Path, extra: list[str], env: dict[str, str]) -> tuple[Any, Any]:
    """(first, again) timings of one row in ``repo``, on a fresh home."""
    base = [sys.executable, "-m", "rightsize", "estimate", *MODEL, "--batch-size", "32", "--json"]
    run_env = {**env, "PYTHONPATH": str(repo)}
    with tempfile.TemporaryDirectory(prefix="rightsize-first-") as home:
        run_env["RIGHTSIZE_HOME"] = home
        first = _time([*base, *extra], run_env, repo)
        return first, _time([*base, *extra], run_env, repo)


def _summary(label: str, kind: str, runs: list[tuple[float, float]]) -> dict[str, Any]:
    wall = statistics.median(t for t, _ in runs)
    return {
        "command": f"estimate {label} ({kind})",
        "median_s": round(wall, 2),
        "median_cpu_s": round(statistics.median(c for _, c in runs), 2),
        "target_s": TARGET_S if kind == "first" else None,
        "ok": wall < TARGET_S if kind == "first" else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--baseline", type=Path, help="Another checkout to time beside this one")
    args = parser.parse_args()
    trees = {"this tree": REPO}
    if args.baseline is not None:
        trees["baseline"] = args.baseline.resolve()
    env = {k: v for k, v in os.environ.items() if not k.startswith("RIGHTSIZE_")}
    for repo in trees.values():
        _pair(repo, ROWS[0][1], env)  # the OS file cache
    results: dict[str, list[dict[str, Any]]] = {name: [] for name in trees}
    for label, extra in ROWS:
        timed: dict[str, list[tuple[Any, Any]]] = {name: [] for name in trees}
        for _ in range(args.runs):
            for name, repo in trees.items():
                timed[name].append(_pair(repo, extra, env))
        for name, pairs in timed.items():
            results[name].append(_summary(label, "first", [f for f, _ in pairs]))
            results[name].append(_summary(label, "again", [a for _, a in pairs]))
    machine = f"{platform.machine()}, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f}"
    if args.json:
        document = {"runs": args.runs, "machine": machine, "results": results["this tree"]}
        if args.baseline is not None:
            document["baseline"] = {"repo": str(args.baseline), "results": results["baseline"]}
        print(json.dumps(document, indent=2))
        return
    print(f"first estimate, median of {args.runs} runs ({machine}); wall s, CPU s")
    for name, rows in results.items():
        if len(results) > 1:
            print(f" {name} ({trees[name]})")
        width = max(len(r["command"]) for r in rows)
        for r in rows:
            goal = "" if r["target_s"] is None else f"  target {r['target_s']} s"
            verdict = {True: "  ok", False: "  SLOW", None: ""}[r["ok"]]
            figures = f"{r['median_s']:6.2f}  {r['median_cpu_s']:6.2f}"
            print(f"  {r['command']:<{width}}  {figures}{goal}{verdict}")


if __name__ == "__main__":
    main()
