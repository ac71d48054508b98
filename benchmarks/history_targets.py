"""What ``benchmarks/memory.py`` and ``benchmarks/cpu_efficiency.py`` share: each shared
trace through ``rightsize history-bench --target T --json`` in its own process, one at a
time, and the machine the figures were taken on."""

from __future__ import annotations

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


def run_one(trace: Path, target: str, limit: int | None) -> dict[str, Any] | str:
    """The command's JSON (with ``end_to_end_s``), or why the trace has nothing to score
    (the command exits 2 naming what the trace lacks)."""
    command = [sys.executable, "-c", "from rightsize.cli import main; main()", "history-bench"]
    command += ["--trace", str(trace), "--target", target, "--json"]
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


def run_traces(
    names: list[str] | None, target: str, limit: int | None
) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """Every named trace (None: all shared traces), in order: the results, and the traces
    skipped with the reason; progress on stderr."""
    results: list[dict[str, Any]] = []
    skipped: dict[str, str] = {}
    for name in names or sorted(p.name for p in TRACES.glob("*.swf*")):
        found = run_one(TRACES / name, target, limit)
        if isinstance(found, str):
            skipped[name] = found
            print(f"skipped {name}: {found}", file=sys.stderr, flush=True)
            continue
        results.append(found)
        print(f"done {name}: {found['end_to_end_s']} s", file=sys.stderr, flush=True)
    return results, skipped


def machine() -> dict[str, Any]:
    """Python, CPUs, architecture and the 1-minute load average now."""
    return {
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "machine": platform.machine(),
        "load_average_1m": os.getloadavg()[0],
    }


def print_notes(results: list[dict[str, Any]]) -> None:
    """The command's notes on each trace (a used field that copies the request, ...)."""
    for r in results:
        for note in r.get("notes", []):
            print(f"\n{r['trace']}: {note}")
