"""Latency of a full what-if over the whole seeded catalog (119 queues), after warm-up.

    python benchmarks/planning.py                 # a table
    python benchmarks/planning.py --runs 500 --json

The workload is seed 001's (``examples/resnet50.yaml``: ResNet-50, 20k images, 50 epochs,
batch sizes 32 and 64) with its system and partition filters removed, so every one of the
catalog's 119 partitions is enumerated, estimated (analytic fallback), built (walltime,
memory, cascades, the policy check of every job), priced, given an expected wait (the
example Pitzer queue snapshot) and ranked. One timed call is ``tools.planning.selector.plan``
(what-if + constraints + objective); the queue model is built once per snapshot, as a
long-running planner would, and its build time is reported on its own. Target: p99 <= 50 ms.
Wall-clock latency is the figure; the thread's CPU time is printed beside it because on a
shared machine the wall-clock tail is mostly time spent descheduled (the load average is
printed too).

Two passes: with the collector as it is, and after ``gc.freeze()`` (what a long-running
planner does once after start-up, so full collections stop walking the catalog and the
imported libraries on every request). The tail of the first pass is those collections.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # run as a script from anywhere
    sys.path.insert(0, str(REPO))

from knowledge_base.seed import load_seed_catalog  # noqa: E402
from tools.planning.queue import QueueModel, load_snapshots  # noqa: E402
from tools.planning.selector import plan  # noqa: E402
from tools.planning.workload_files import load_workload  # noqa: E402


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=300)
    parser.add_argument("--warmup", type=int, default=30)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    catalog = load_seed_catalog()
    spec = load_workload(REPO / "examples" / "resnet50.yaml")
    spec = spec.model_copy(
        update={"goals": spec.goals.model_copy(update={"systems": None, "exclude_partitions": []})}
    )
    snapshots = load_snapshots(REPO / "examples" / "pitzer-queue.json")
    now = snapshots[0].taken_at

    started = time.perf_counter()
    queue = QueueModel(snapshots, catalog)
    for system in catalog.systems:  # build every pool's profile now, not in the first call
        for partition in system.partitions:
            queue.wait(system, partition, 1, 3600)
    queue_build_ms = (time.perf_counter() - started) * 1e3

    def once() -> tuple[float, float, int, int]:
        start, start_cpu = time.perf_counter(), time.thread_time()
        selection = plan(spec, catalog, now=now, queue=queue)
        elapsed = (time.perf_counter() - start) * 1e3
        cpu = (time.thread_time() - start_cpu) * 1e3
        return elapsed, cpu, len(selection.ranked), len(selection.infeasible)

    def measure() -> dict[str, float]:
        for _ in range(args.warmup):
            once()
        samples = [once() for _ in range(args.runs)]
        latencies = [s[0] for s in samples]
        cpu = [s[1] for s in samples]
        return {
            "p50_ms": round(statistics.median(latencies), 2),
            "p99_ms": round(_percentile(latencies, 0.99), 2),
            "max_ms": round(max(latencies), 2),
            "cpu_p50_ms": round(statistics.median(cpu), 2),
            "cpu_p99_ms": round(_percentile(cpu, 0.99), 2),
        }

    default_gc = measure()
    gc.collect()
    gc.freeze()
    frozen = measure()
    _, _, feasible, infeasible = once()
    result = {
        "partitions": sum(len(s.partitions) for s in catalog.systems),
        "feasible_plans": feasible,
        "infeasible_options": infeasible,
        "runs": args.runs,
        "default_gc": default_gc,
        "after_gc_freeze": frozen,
        "queue_model_build_ms": round(queue_build_ms, 2),
        "target_p99_ms": 50,
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, "
        f"Python {platform.python_version()}",
        "load_average": [round(x, 2) for x in os.getloadavg()],
    }
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(
        f"what-if over {result['partitions']} partitions: {result['feasible_plans']} feasible "
        f"plans, {result['infeasible_options']} infeasible options"
    )
    for label, figures in (("default GC", default_gc), ("after gc.freeze()", frozen)):
        print(
            f"{label}: p50 {figures['p50_ms']} ms, p99 {figures['p99_ms']} ms, "
            f"max {figures['max_ms']} ms (this thread's CPU time: p50 {figures['cpu_p50_ms']} "
            f"ms, p99 {figures['cpu_p99_ms']} ms) over {args.runs} runs after {args.warmup} "
            "warm-up; target p99 <= 50 ms"
        )
    print(f"queue model build (once per snapshot): {result['queue_model_build_ms']} ms")
    print(f"machine: {result['machine']}; load average {result['load_average']}")


if __name__ == "__main__":
    main()
