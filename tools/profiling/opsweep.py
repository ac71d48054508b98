"""The per-operator CPU timing dataset: zoo steps, probe networks, optimizer updates.

``python -m tools.profiling.opsweep --out data/cpu_opcost/op_timings.jsonl`` appends one
JSON line per timed item (resumable: ids already in the file are skipped):

- ``zoo``: a configuration of ``cpu_sweep.jsonl`` (so its whole-step time was measured
  by the profiler), every working operator of its step timed on the row's thread count
  (``optiming.time_step_ops``), with the row's measured step time beside it;
- ``probe``: a probe network (``opprobes``: operator classes and shapes the zoo lacks),
  its operators timed at 1 and 2 threads;
- ``update``: ``optimizer.step()`` (SGD with momentum, Adam) over a seeded set of
  parameter shapes at 1 and 2 threads.

Operators with identical features inside one step are stored once with a count
(``ops``: ``[op, category, backward, flops, input_bytes, output_bytes, param_bytes,
count, critical_s, thread_s, process_s, wall_s]``, times the median over the copies).
The first line of a new file is the provenance: machine, torch, thread counts,
``OMP_WAIT_POLICY``, the command.

``--steps FILE`` then times the whole eager step of every zoo item of ``--out``
(``optiming.time_training_step``, same optimizer and threads) into ``FILE``, one line
per item (``id``, ``step_s``): the step measured under the same conditions as its
operators, beside the profiler's measurement made on another day.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import sys
import time
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import torch

from tools.profiling.optiming import (
    StepOpTimings,
    time_optimizer_update,
    time_step_ops,
    time_training_step,
)
from tools.profiling.profiler import hardware_descriptors
from tools.profiling.zoo.registry import FAMILIES

__all__ = ["OP_FIELDS", "aggregate_ops", "main", "read_items", "zoo_choices"]

OP_FIELDS = (
    "op",
    "category",
    "backward",
    "flops",
    "input_bytes",
    "output_bytes",
    "param_bytes",
    "count",
    "critical_s",
    "thread_s",
    "process_s",
    "wall_s",
)


def aggregate_ops(timed: StepOpTimings) -> list[list[Any]]:
    groups: dict[tuple[Any, ...], list[tuple[float, float, float, float]]] = {}
    for item in timed.ops:
        n = item.node
        key = (n.op, n.category, n.backward, n.flops, n.input_bytes, n.output_bytes, n.param_bytes)
        groups.setdefault(key, []).append(
            (item.critical_s, item.thread_s, item.process_s, item.wall_s)
        )
    rows: list[list[Any]] = []
    for key, values in groups.items():
        medians = [float(f"{statistics.median(v[i] for v in values):.4g}") for i in range(4)]
        rows.append([*key, len(values), *medians])
    return rows


def read_items(path: Path) -> list[dict[str, Any]]:
    """Every item of a timing file (the provenance line excluded)."""
    items = []
    with path.open() as handle:
        for line in handle:
            if line.strip():
                item = json.loads(line)
                if item.get("kind") != "provenance":
                    items.append(item)
    return items


def zoo_choices(per_family: int, max_step_s: float, seed: int) -> list[Any]:
    """Per family and thread count, ``per_family`` seeded sweep rows with short steps."""
    if per_family <= 0:
        return []
    from tools.estimators.dnn.dataset import load_examples

    rng = random.Random(seed)
    chosen = []
    examples = [e for e in load_examples() if e.iteration_s <= max_step_s]
    for family in sorted(FAMILIES):
        for threads in (1, 2):
            pool = [e for e in examples if e.family == family and e.threads == threads]
            seen: set[str] = set()
            rng.shuffle(pool)
            for example in pool:
                if example.key in seen:
                    continue
                if len(seen) >= per_family:
                    break
                seen.add(example.key)
                chosen.append(example)
    return chosen


def _update_shapes(rng: random.Random) -> list[tuple[int, ...]]:
    tensors = rng.choice((4, 16, 64, 160))
    shapes: list[tuple[int, ...]] = []
    for _ in range(tensors):
        if rng.random() < 0.4:
            shapes.append((rng.choice((16, 64, 256, 1024)),))
        else:
            shapes.append((rng.choice((16, 64, 256, 512)), rng.choice((16, 64, 256, 1152))))
    return shapes


def _provenance(argv: list[str]) -> dict[str, Any]:
    hw = hardware_descriptors(1)
    return {
        "kind": "provenance",
        "cpu_model": hw.get("cpu_model"),
        "cpu_isa": hw.get("cpu_isa"),
        "cpu_cores": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", ""),
        "threads": [1, 2],
        "command": "python -m tools.profiling.opsweep " + " ".join(argv),
        "started_at": datetime.now(UTC).isoformat(),
        "timing": "1 thread: calling thread CPU time; 2 threads: max(main, process - main) "
        "CPU time (optiming module docstring); least of 5 batches of calls",
    }


def _items(args: argparse.Namespace) -> Iterable[tuple[str, Any]]:
    for example in zoo_choices(args.zoo_per_family, args.max_step_s, args.seed):
        yield f"zoo-{example.key}-t{example.threads}", example
    yield from ((f"update-{i}", i) for i in range(args.updates))
    from tools.profiling.opprobes import probe_tasks

    for name, task in probe_tasks(args.probes, args.seed):
        yield f"probe-{name}", (name, task)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--zoo-per-family", type=int, default=5)
    parser.add_argument("--max-step-s", type=float, default=0.12)
    parser.add_argument("--probes", type=int, default=12, help="networks per probe")
    parser.add_argument("--updates", type=int, default=12)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--steps", type=Path, help="time the zoo items' whole steps into FILE")
    args = parser.parse_args(argv)
    if args.steps is not None:
        return _steps(args.out, args.steps)
    done: set[str] = set()
    if args.out.exists():
        done = {item["id"] for item in read_items(args.out)}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    fresh = not args.out.exists() or args.out.stat().st_size == 0
    with args.out.open("a") as handle:

        def write(item: dict[str, Any]) -> None:
            handle.write(json.dumps(item, separators=(",", ":")) + "\n")
            handle.flush()
            os.fsync(handle.fileno())

        if fresh:
            write(_provenance(sys.argv[1:] if argv is None else argv))
        for item_id, what in _items(args):
            if item_id in done:
                continue
            began = time.monotonic()
            if item_id.startswith("zoo-"):
                torch.manual_seed(0)
                task = FAMILIES[what.family].task(what.params, what.batch_size)
                timed = time_step_ops(task, what.threads)
                write(
                    {
                        "id": item_id,
                        "kind": "zoo",
                        "family": what.family,
                        "example": what.id,
                        "params": what.params,
                        "batch_size": what.batch_size,
                        "threads": what.threads,
                        "optimizer": what.optimizer,
                        "parameters": timed.parameters,
                        "measured_step_s": what.iteration_s,
                        "time_basis": what.time_basis,
                        "loadavg_1m": round(timed.loadavg_1m, 2),
                        "ops": aggregate_ops(timed),
                    }
                )
            elif item_id.startswith("update-"):
                rng = random.Random(args.seed * 7919 + what)
                shapes = _update_shapes(rng)
                for optimizer in ("sgd", "adam"):
                    for threads in (1, 2):
                        timing = time_optimizer_update(shapes, optimizer, threads)
                        write(
                            {
                                "id": f"{item_id}-{optimizer}-t{threads}",
                                "kind": "update",
                                **timing.as_dict(),
                            }
                        )
                write({"id": item_id, "kind": "done"})
            else:
                name, task = what
                for threads in (1, 2):
                    timed = time_step_ops(task, threads)
                    write(
                        {
                            "id": f"{item_id}-t{threads}",
                            "kind": "probe",
                            "probe": name.rsplit("-", 1)[0],
                            "threads": threads,
                            "loadavg_1m": round(timed.loadavg_1m, 2),
                            "ops": aggregate_ops(timed),
                        }
                    )
                write({"id": item_id, "kind": "done"})
            print(f"{item_id}: {time.monotonic() - began:.1f} s", file=sys.stderr, flush=True)
    return 0


def _steps(source: Path, out: Path) -> int:
    done = {i["id"] for i in read_items(out)} if out.exists() else set()
    with out.open("a") as handle:
        for item in read_items(source):
            if item.get("kind") != "zoo" or item["id"] in done:
                continue
            torch.manual_seed(0)
            task = FAMILIES[item["family"]].task(item["params"], item["batch_size"])
            step_s = time_training_step(task, item["optimizer"], int(item["threads"]))
            line = {"id": item["id"], "step_s": step_s, "loadavg_1m": round(os.getloadavg()[0], 2)}
            handle.write(json.dumps(line) + "\n")
            handle.flush()
            print(f"{item['id']}: {step_s:.4f} s", file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
