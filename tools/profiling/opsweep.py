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

``--geometry FILE`` derives, without timing anything, each stored operator row's shape
geometry (``opgraph.GEOMETRY_FIELDS``: spatial rank, kernel, stride, groups, channels,
output positions, M/N/K of matrix products) by tracing the item's step again with fake
tensors: one line per item, ``geometry`` aligned with its ``ops`` and the
``geometry_version`` it was computed with.

``--steps FILE`` then times the whole eager step of every zoo item of ``--out``
(``optiming.time_training_step``, same optimizer and threads) into ``FILE``, one line
per item (``id``, ``step_s``): the step measured under the same conditions as its
operators, beside the profiler's measurement made on another day.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import platform
import random
import statistics
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import torch

from tools.profiling.opgraph import GEOMETRY_FIELDS, GEOMETRY_VERSION, trace_step
from tools.profiling.optiming import (
    StepOpTimings,
    time_optimizer_update,
    time_step_ops,
    training_step_samples,
)
from tools.profiling.profiler import hardware_descriptors
from tools.profiling.zoo.registry import FAMILIES

__all__ = [
    "OP_FIELDS",
    "aggregate_ops",
    "geometry_rows",
    "main",
    "merge_step_lines",
    "provenance",
    "read_items",
    "step_line",
    "zoo_choices",
]

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
    from tools.estimators.cpu.dataset import load_examples

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
    return provenance(
        "python -m tools.profiling.opsweep " + " ".join(argv),
        "1 thread: calling thread CPU time; 2 threads: max(main, process - main) "
        "CPU time (optiming module docstring); least of 5 batches of calls",
    )


def provenance(command: str, timing: str, threads: Sequence[int] = (1, 2)) -> dict[str, Any]:
    """A timing file's first line: the host, the software, the command and its timing."""
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
        "threads": list(threads),
        "command": command,
        "started_at": datetime.now(UTC).isoformat(),
        "timing": timing,
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
    parser.add_argument("--step-runs", type=int, default=3, help="runs per step (--steps)")
    parser.add_argument(
        "--step-probes", default="", help="--steps: also these probes' steps (comma list)"
    )
    parser.add_argument(
        "--rnn-counts", type=Path, help="recurrent layers' operator counts of --out into FILE"
    )
    parser.add_argument(
        "--geometry", type=Path, help="operator geometry rows of --out's items into FILE"
    )
    args = parser.parse_args(argv)
    if args.steps is not None:
        return _steps(args.out, args.steps, args.step_runs, set(args.step_probes.split(",")) - {""})
    if args.rnn_counts is not None:
        return _rnn_counts(args.out, args.rnn_counts)
    if args.geometry is not None:
        return _geometry(args.out, args.geometry)
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


def _item_task(item: dict[str, Any], probes: dict[str, Any]) -> Any:
    """A zoo or probe item's training task, made anew (probes: ``probe_tasks`` by name)."""
    if item["kind"] == "zoo":
        return FAMILIES[item["family"]].task(item["params"], item["batch_size"])
    return probes[item["id"].removeprefix("probe-").rsplit("-t", 1)[0]]


def _probe_tasks(source: Path) -> dict[str, Any]:
    """The probe networks of ``source``'s sweep (``--probes``/``--seed`` of its command)."""
    from tools.profiling.opprobes import probe_tasks

    with source.open() as handle:
        words = json.loads(handle.readline()).get("command", "").split()

    def value(flag: str, default: int) -> int:
        return int(words[words.index(flag) + 1]) if flag in words else default

    return dict(probe_tasks(value("--probes", 12), value("--seed", 0)))


def _steps(source: Path, out: Path, runs: int, probe_kinds: set[str]) -> int:
    """Whole eager steps of the zoo items of ``source`` (and of its probes of
    ``probe_kinds``, SGD) into ``out``, each with its recurrent layers' operator counts."""
    done = {i["id"] for i in read_items(out)} if out.exists() else set()
    fresh = not out.exists() or out.stat().st_size == 0
    wanted = [
        i
        for i in read_items(source)
        if i["id"] not in done
        and (i.get("kind") == "zoo" or (i.get("kind") == "probe" and i["probe"] in probe_kinds))
    ]
    probes = _probe_tasks(source) if any(i["kind"] == "probe" for i in wanted) else {}
    with out.open("a") as handle:
        if fresh:
            header = _provenance(["--out", str(source), "--steps", str(out)])
            header["timing"] = (
                f"optiming.training_step_samples: {runs} runs of 2 warm-up and 5 timed eager "
                "steps; 1 thread: the thread's CPU time, 2 threads: max(main, process - main); "
                "step_s the median of the runs' medians, least_s the least step"
            )
            handle.write(json.dumps(header) + "\n")
        for item in wanted:
            line = step_line(item, functools.partial(_item_task, item, probes), runs)
            handle.write(json.dumps(line) + "\n")
            handle.flush()
            print(f"{item['id']}: {line['step_s']:.4f} s", file=sys.stderr, flush=True)
    return 0


def step_line(item: Mapping[str, Any], make_task: Callable[[], Any], runs: int) -> dict[str, Any]:
    """One ``--steps`` line: ``item``'s whole eager step timed ``runs`` times, each on a
    task made anew (``make_task()``), with its recurrent layers' operator counts."""
    from tools.profiling.optiming import compute_nodes
    from tools.profiling.rnnmarks import RNN_META

    optimizer = item.get("optimizer", "sgd")
    samples: list[list[float]] = []
    for run in range(runs):
        torch.manual_seed(run)
        task = make_task()
        samples.append(training_step_samples(task, optimizer, int(item["threads"])))
    calls = [n.meta.get(RNN_META, -1) for n in compute_nodes(trace_step(task))]
    return {
        "id": item["id"],
        "step_s": statistics.median(statistics.median(r) for r in samples),
        "least_s": min(min(r) for r in samples),
        "samples_s": [[float(f"{v:.6g}") for v in r] for r in samples],
        "rnn_ops": sum(c >= 0 for c in calls),
        "rnn_calls": len({c for c in calls if c >= 0}),
        "parameters": sum(p.numel() for p in task.model.parameters() if p.requires_grad),
        "loadavg_1m": round(os.getloadavg()[0], 2),
    }


def merge_step_lines(*sessions: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """``--steps`` lines of one item from several timing sessions as one line: every
    run's samples kept (``samples_s``), ``least_s`` the least step of all of them (noise
    on a shared host only adds time), ``step_s`` the median of all runs' medians, the
    sessions' loads in ``loads_1m``; the other fields from the first session."""
    merged: dict[str, dict[str, Any]] = {}
    for lines in sessions:
        for item_id, line in lines.items():
            if item_id not in merged:
                merged[item_id] = {**line, "samples_s": [], "loads_1m": []}
            into = merged[item_id]
            into["samples_s"] = [*into["samples_s"], *line["samples_s"]]
            into["loads_1m"] = [*into["loads_1m"], line.get("loadavg_1m")]
            into["least_s"] = min(float(v) for run in into["samples_s"] for v in run)
            into["step_s"] = statistics.median(statistics.median(r) for r in into["samples_s"])
            into["sessions"] = len(into["loads_1m"])
    return merged


def geometry_rows(ops: list[list[Any]], nodes: list[Any]) -> tuple[list[list[float]], int, int]:
    """Each stored operator row's geometry (``aggregate_ops``' key matched against the
    traced ``nodes``); rows no node matches get zeros. Returns the rows, how many were
    unmatched and how many keys had nodes of different shape geometry (the first is
    kept). ``view_ops``, which differs between operators of one key (the views before
    each), is their mean, so that a row's count times it is their total."""
    width = len(GEOMETRY_FIELDS)
    views_at = GEOMETRY_FIELDS.index("view_ops")
    found: dict[tuple[Any, ...], tuple[float, ...]] = {}
    views: dict[tuple[Any, ...], list[float]] = {}
    clashes = 0
    for n in nodes:
        key = (n.op, n.category, n.backward, n.flops, n.input_bytes, n.output_bytes, n.param_bytes)
        shape = n.geometry[:views_at] + n.geometry[views_at + 1 :]
        if key in found and found[key][:views_at] + found[key][views_at + 1 :] != shape:
            clashes += 1
        found.setdefault(key, n.geometry)
        own = n.geometry[views_at] if len(n.geometry) > views_at else 0.0
        views.setdefault(key, []).append(own)
    rows, unmatched = [], 0
    for o in ops:
        key = (o[0], o[1], bool(o[2]), *(float(v) for v in o[3:7]))
        geometry = found.get(key)
        if geometry is None:
            unmatched += 1
            rows.append([0.0] * width)
            continue
        row = list(geometry)
        if len(row) > views_at:
            row[views_at] = sum(views[key]) / len(views[key])
        rows.append(row)
    return rows, unmatched, clashes


def _geometry(source: Path, out: Path) -> int:
    """Operator geometry rows of ``source``'s zoo and probe items (fake-tensor traces)."""
    from tools.profiling.opgraph import op_graph

    items = [i for i in read_items(source) if i.get("kind") in {"zoo", "probe"}]
    probes = _probe_tasks(source) if any(i["kind"] == "probe" for i in items) else {}
    with out.open("w") as handle:
        provenance = _provenance(["--out", str(source), "--geometry", str(out)])
        provenance["timing"] = "none: fake-tensor traces (opgraph.node_geometry), shapes only"
        provenance["geometry_version"] = GEOMETRY_VERSION
        provenance["geometry_fields"] = list(GEOMETRY_FIELDS)
        handle.write(json.dumps(provenance) + "\n")
        for item in items:
            if item["kind"] == "zoo":
                with torch.device("meta"):
                    task = _item_task(item, probes)
            else:
                task = _item_task(item, probes)
            rows, unmatched, clashes = geometry_rows(item["ops"], op_graph(task).nodes)
            line = {
                "id": item["id"],
                "geometry_version": GEOMETRY_VERSION,
                "geometry": [[float(f"{v:.6g}") for v in r] for r in rows],
                "unmatched": unmatched,
                "clashes": clashes,
            }
            handle.write(json.dumps(line, separators=(",", ":")) + "\n")
            print(f"{item['id']}: {unmatched} unmatched, {clashes} clashes", file=sys.stderr)
    return 0


def _rnn_counts(source: Path, out: Path) -> int:
    """Recurrent layers' operator counts of ``source``'s zoo and probe items (traced with
    fake tensors; ``rnnmarks``): one line per item with a recurrent layer."""
    from tools.profiling.optiming import compute_nodes
    from tools.profiling.rnnmarks import RNN_META, has_recurrent

    items = [i for i in read_items(source) if i.get("kind") in {"zoo", "probe"}]
    probes = _probe_tasks(source) if any(i["kind"] == "probe" for i in items) else {}
    with out.open("w") as handle:
        provenance = _provenance(["--out", str(source), "--rnn-counts", str(out)])
        provenance["timing"] = "none: fake-tensor traces (rnnmarks), counts only"
        handle.write(json.dumps(provenance) + "\n")
        for item in items:
            task = _item_task(item, probes)
            if not has_recurrent(task.model):
                continue
            calls = [n.meta.get(RNN_META, -1) for n in compute_nodes(trace_step(task))]
            line = {
                "id": item["id"],
                "operators": len(calls),
                "rnn_ops": sum(c >= 0 for c in calls),
                "rnn_calls": len({c for c in calls if c >= 0}),
            }
            handle.write(json.dumps(line) + "\n")
            print(json.dumps(line), file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
