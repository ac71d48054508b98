"""The profiled dataset as training examples, each with its training step's op graph.

Rows come from a sweep's JSONL (``tools.profiling.sweep``); only status ``ok`` rows are
examples (crashes and out-of-memory runs stay out of training data).

The time target is the step time on a dedicated machine: ``measurement.
iteration_dedicated_s`` (wall time minus the time the child's threads waited for a CPU;
see ``tools.profiling.profiler``). Rows profiled before that was recorded use their
median per-step process CPU time when they ran on one thread (the same quantity there)
and are left out of training when they ran on two (``time_basis="wall"``: their wall
times carry an unknown share of other users' load). The op graph of a
configuration depends on family, architecture and batch size, not on threads or
optimizer, and tracing it takes 0.1-3 s, so graphs are cached as ``.npz`` files under
a cache folder (``GraphStore``) and built in worker processes when missing.

The committed dataset is ``data/dnn_profiles/cpu_sweep.jsonl`` in the repository;
the settings' ``dnn_profiles`` (``RIGHTSIZE_DNN_PROFILES``) point ``rightsize profile
train`` elsewhere (a file, or a folder holding that file; ``default_dataset_path``).
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
from collections.abc import Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from multiprocessing import get_context
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

from knowledge_base.errors import InvalidInputError
from knowledge_base.records import ProfileStatus
from tools.estimators.cpu.paths import DATASET_NAME, default_dataset_path
from tools.profiling.analytic import HardwareSpec, cpu_spec
from tools.profiling.opgraph import CATEGORIES, OpGraph
from tools.profiling.sweep import load_rows

__all__ = [
    "DATASET_NAME",
    "GRAPH_FORMAT",
    "NODE_FEATURES",
    "Example",
    "GraphData",
    "GraphStore",
    "default_dataset_path",
    "graph_data",
    "graph_key",
    "load_examples",
    "noise_floor",
]

log = logging.getLogger(__name__)

NODE_FEATURES: tuple[str, ...] = (
    *(f"cat_{c}" for c in CATEGORIES),
    "backward",
    "log_flops",
    "log_input_bytes",
    "log_output_bytes",
    "log_param_bytes",
)
_LOG_SCALE = 20.0  # log1p of FLOPs/bytes in a training step stays below ~25
# What a stored graph holds (its summary's fields, ``OpGraph.summary``): part of its file
# name, so graphs traced by older code are traced again. 2: ``peak_activation_bytes``.
GRAPH_FORMAT = 2


@dataclass(frozen=True, slots=True)
class Example:
    """One profiled configuration that ran: what it was, where, and what it measured."""

    id: str
    family: str
    params: dict[str, int]
    batch_size: int
    threads: int
    optimizer: str
    repeat: int
    iteration_s: float
    peak_memory_mb: float
    spread_s: float
    cpu_model: str
    hardware: HardwareSpec
    wall_s: float = 0.0  # the raw median wall time (ProfileRecord.iteration_s)
    time_basis: str = "dedicated"  # dedicated | cpu | wall (see the module docstring)
    cpu_isa: str = ""  # the profiling host's vector ISA (avx512, avx2, sse); "" not recorded

    @property
    def key(self) -> str:
        return graph_key(self.family, self.params, self.batch_size)

    @property
    def config_key(self) -> str:
        """Identifies the configuration regardless of repeat (for the noise floor)."""
        return f"{self.key}-t{self.threads}-{self.optimizer}"


def graph_key(family: str, params: dict[str, int], batch_size: int) -> str:
    content = json.dumps([family, sorted(params.items()), batch_size])
    return f"{family}-{hashlib.sha1(content.encode()).hexdigest()[:16]}"


def load_examples(path: Path | None = None, *, include_wall: bool = False) -> list[Example]:
    """The ``ok`` rows of a sweep file as examples; raises when the file is missing.

    Rows whose only time is a contended wall time are left out unless ``include_wall``.
    """
    source = path or default_dataset_path()
    if not source.exists():
        raise InvalidInputError(
            "no profiled dataset here (run `rightsize profile sweep`, or set "
            "RIGHTSIZE_DNN_PROFILES)",
            field="dataset",
            value=str(source),
        )
    examples: list[Example] = []
    for row in load_rows(source):
        record = row.record
        if record.status is not ProfileStatus.OK or record.iteration_s is None:
            continue
        if record.peak_memory_mb is None or record.iteration_s <= 0:
            continue
        config = record.config
        params = {
            k: int(v)
            for k, v in config.items()
            if k not in {"batch_size", "optimizer", "threads", "warmup", "iterations", "repeat"}
            and isinstance(v, int | float)
            and not isinstance(v, bool)
        }
        threads = int(config.get("threads", 1))
        cpu_model = str(record.hardware.get("cpu_model", "unknown"))
        dedicated = row.measurement.get("iteration_dedicated_s")
        cpu = row.measurement.get("iteration_cpu_s")
        if isinstance(dedicated, float):
            time_s, basis = dedicated, "dedicated"
        elif threads == 1 and isinstance(cpu, float):
            time_s, basis = cpu, "cpu"
        elif include_wall:
            time_s, basis = float(record.iteration_s), "wall"
        else:
            continue
        examples.append(
            Example(
                id=record.id,
                family=record.family,
                params=params,
                batch_size=int(config["batch_size"]),
                threads=threads,
                optimizer=str(config.get("optimizer", "sgd")),
                repeat=int(config.get("repeat", 0)),
                iteration_s=max(time_s, 1e-6),
                peak_memory_mb=max(1.0, float(record.peak_memory_mb)),
                spread_s=float(record.iteration_s_spread or 0.0),
                cpu_model=cpu_model,
                hardware=cpu_spec(cpu_model, threads),
                wall_s=float(record.iteration_s),
                time_basis=basis,
                cpu_isa=str(record.hardware.get("cpu_isa", "")),
            )
        )
    return examples


def noise_floor(examples: Sequence[Example]) -> dict[str, float]:
    """Spread of repeated runs of one configuration: mean |x - mean| / mean, percent.

    ``time_mape_pct`` on the time target, ``wall_time_mape_pct`` on raw wall times.
    """
    groups: dict[str, list[Example]] = {}
    for example in examples:
        groups.setdefault(example.config_key, []).append(example)
    time_dev: list[float] = []
    wall_dev: list[float] = []
    memory_dev: list[float] = []
    for members in groups.values():
        if len(members) < 2:
            continue
        for values, out in (
            ([m.iteration_s for m in members], time_dev),
            ([m.wall_s or m.iteration_s for m in members], wall_dev),
            ([m.peak_memory_mb for m in members], memory_dev),
        ):
            array = np.array(values)
            out.extend(np.abs(array - array.mean()) / array.mean() * 100)
    within = [e.spread_s / (e.wall_s or e.iteration_s) * 100 for e in examples]
    return {
        "repeated_configs": float(sum(len(m) >= 2 for m in groups.values())),
        "time_mape_pct": float(np.mean(time_dev)) if time_dev else math.nan,
        "wall_time_mape_pct": float(np.mean(wall_dev)) if wall_dev else math.nan,
        "memory_mape_pct": float(np.mean(memory_dev)) if memory_dev else math.nan,
        "within_run_spread_pct": float(np.median(within)) if within else math.nan,
    }


@dataclass(slots=True)
class GraphData:
    """An op graph as arrays: node features, edges, and its summary totals."""

    x: NDArray[np.float32]
    edge_index: NDArray[np.int64]
    summary: dict[str, float] = field(default_factory=dict)
    # per node, the recurrent layer call whose C++ loop dispatched it (-1 none); None:
    # no recurrent layer (not saved: the zoo's graphs are read for the bundle only)
    rnn_call: NDArray[np.int64] | None = None
    # per node, its shape geometry (``opgraph.GEOMETRY_FIELDS``, raw values) for the
    # per-operator CPU model; None where the graph was stored without it
    geometry: NDArray[np.float64] | None = None
    # per node, its ATen operator's name (what a pricing report names); None where the
    # graph was stored without them
    ops: tuple[str, ...] | None = None

    @property
    def rnn_counts(self) -> tuple[int, int]:
        """Operators dispatched by recurrent layers' loops, and those layers' calls."""
        if self.rnn_call is None:
            return 0, 0
        inner = self.rnn_call[self.rnn_call >= 0]
        return int(inner.size), int(np.unique(inner).size)

    def save(self, path: Path) -> None:
        names = sorted(self.summary)
        tmp = path.with_name(path.name + ".tmp.npz")
        np.savez_compressed(
            tmp,
            x=self.x,
            edge_index=self.edge_index,
            summary_names=np.array(names),
            summary_values=np.array([self.summary[n] for n in names], dtype=np.float64),
        )
        tmp.replace(path)

    @classmethod
    def load(cls, path: Path) -> GraphData:
        with np.load(path) as data:
            names = [str(n) for n in data["summary_names"]]
            values = data["summary_values"].tolist()
            return cls(
                x=data["x"].astype(np.float32),
                edge_index=data["edge_index"].astype(np.int64),
                summary=dict(zip(names, values, strict=True)),
            )


def graph_data(graph: OpGraph) -> GraphData:
    """Node features (``NODE_FEATURES``) and edges of an op graph."""
    x = np.zeros((max(1, len(graph.nodes)), len(NODE_FEATURES)), dtype=np.float32)
    offset = len(CATEGORIES)
    for i, node in enumerate(graph.nodes):
        x[i, CATEGORIES.index(node.category)] = 1.0
        x[i, offset] = 1.0 if node.backward else 0.0
        x[i, offset + 1] = math.log1p(node.flops) / _LOG_SCALE
        x[i, offset + 2] = math.log1p(node.input_bytes) / _LOG_SCALE
        x[i, offset + 3] = math.log1p(node.output_bytes) / _LOG_SCALE
        x[i, offset + 4] = math.log1p(node.param_bytes) / _LOG_SCALE
    edges = np.array(graph.edges, dtype=np.int64).reshape(-1, 2).T
    calls = np.array([n.rnn_call for n in graph.nodes], dtype=np.int64)
    rnn = calls if calls.size and int(calls.max()) >= 0 else None
    geometry = np.array([n.geometry for n in graph.nodes], dtype=np.float64)
    return GraphData(
        x=x,
        edge_index=edges,
        summary=graph.summary(),
        rnn_call=rnn,
        geometry=geometry.reshape(len(graph.nodes), -1) if len(graph.nodes) else None,
        ops=tuple(n.op for n in graph.nodes),
    )


def _build_zoo_graph(item: tuple[str, dict[str, int], int, str]) -> str:
    """Worker: trace one zoo configuration and save its graph (returns the key)."""
    import torch

    from tools.profiling.opgraph import op_graph
    from tools.profiling.zoo import family

    name, params, batch, path = item
    torch.set_num_threads(1)
    with torch.device("meta"):
        task = family(name).task(params, batch)
    graph_data(op_graph(task)).save(Path(path))
    return Path(path).stem


class GraphStore:
    """Op graphs of zoo configurations, cached under ``folder`` as ``KEY.gN.npz`` (N:
    ``GRAPH_FORMAT``)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._memory: dict[str, GraphData] = {}

    def path(self, key: str) -> Path:
        return self.folder / f"{key}.g{GRAPH_FORMAT}.npz"

    def missing(self, examples: Iterable[Example]) -> list[Example]:
        seen: set[str] = set()
        out: list[Example] = []
        for example in examples:
            if example.key not in seen and not self.path(example.key).exists():
                seen.add(example.key)
                out.append(example)
        return out

    def build(self, examples: Iterable[Example], workers: int = 1) -> int:
        """Trace every missing graph of ``examples``; returns how many were built."""
        todo = self.missing(examples)
        if not todo:
            return 0
        self.folder.mkdir(parents=True, exist_ok=True)
        items = [(e.family, e.params, e.batch_size, str(self.path(e.key))) for e in todo]
        log.info("tracing %d op graphs with %d workers", len(items), workers)
        if workers <= 1:
            for item in items:
                _build_zoo_graph(item)
        else:
            context = get_context("spawn")  # the caller may have run torch: never fork it
            with ProcessPoolExecutor(workers, mp_context=context) as pool:
                for _ in pool.map(_build_zoo_graph, items, chunksize=4):
                    pass
        return len(items)

    def get(self, key: str) -> GraphData:
        known = self._memory.get(key)
        if known is None:
            known = self._memory[key] = GraphData.load(self.path(key))
        return known

    def put(self, key: str, data: GraphData) -> None:
        self._memory[key] = data
