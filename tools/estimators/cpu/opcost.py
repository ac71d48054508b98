"""Per-operator CPU cost model: a training step's time as the sum of its operators' times.

Trained on the per-operator timings of ``tools.profiling.opsweep`` (this machine's
CPU; every working operator of zoo steps and of probe networks, timed one at a time at
1 and 2 threads) so that a model of a family the zoo lacks is estimated from operators
that were timed, not from whole steps of other families.

Two levels, both explicit:

1. **Operator.** XGBoost regression of log(seconds) of one operator on what the op
   graph says of it (``dataset.NODE_FEATURES``: category, forward/backward, log FLOPs,
   log bytes in, out and of parameters) and the thread count; weighted by how often
   the operator occurs in its step.
2. **Step.** ``step_s = a_t x sum(compute operators) + o_t x sum(other operators) +
   b_t x operators + c_t x update_s`` per thread count ``t`` (compute: convolutions,
   matrix multiplies, attention, RNN kernels): ``a`` and ``o`` carry what isolated
   timings miss (caches warm in a loop of one operator, cold in a step; the timings'
   machine state against the steps'), apart for compute-bound and memory- or
   dispatch-bound operators, which differ in both; ``b`` the per-operator cost of the
   eager step (Python modules, autograd's engine, the threads' fork/join), ``update_s``
   the optimizer's ``step()`` (a line in the parameter count fitted on the ``update``
   timings, per optimizer and threads). ``a, b, c >= 0``, fitted by non-negative least
   squares of the relative error on the zoo's measured steps (``cpu_sweep.jsonl``).

Validation and intervals, at the whole-step level, leaving one zoo family group out
at a time (families built from the same blocks together, as the bundle's new-family
folds): the operator model is refitted without the group's operators (probe networks
always stay in), the step coefficients without its steps, and the group's steps
predicted. Each probe family is left out the same way (its operators from the booster,
its steps from the step law): residuals of a family the model never saw, as a model
file outside the zoo is. p10/p90 are the p50 times the 10th/90th percentiles of the
held-out ratios (measured / estimated) of both kinds of fold; MAPE, under-prediction
rate and coverage of the held-out predictions are kept in the model file.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import xgboost as xgb
from numpy.typing import NDArray

from knowledge_base.errors import InvalidInputError
from tools.estimators.cpu.coverage import timed_domain
from tools.estimators.cpu.dataset import NODE_FEATURES
from tools.estimators.cpu.eager import (
    RANDOM_S_PER_ELEMENT,
    eager_extras,
    eager_operators,
    raw_geometry,
)
from tools.estimators.cpu.opboost import (
    _FLOPS_COLUMN,
    _LOG_SCALE,
    OP_TARGETS,
    WORK_BOOSTER_FILE,
    Booster,
    HybridBooster,
    category_bounds,
    op_seconds,
    with_threads,
    work_s,
)
from tools.profiling.opgraph import CATEGORIES, GEOMETRY_VERSION

if TYPE_CHECKING:
    from tools.estimators.cpu.step_law import StepRow

__all__ = [
    "FAMILY_GROUPS",
    "FEATURE_SETS",
    "GEOMETRY_COLUMNS",
    "OPCOST_ID_PREFIX",
    "OP_TARGETS",
    "OpCostModel",
    "StepItem",
    "default_model_dir",
    "fit_opcost",
    "node_rows",
    "op_seconds",
    "step_items",
]

COMPUTE_CATEGORIES = frozenset({"conv", "matmul", "attention", "rnn"})
_COMPUTE_COLUMNS = [CATEGORIES.index(c) for c in sorted(COMPUTE_CATEGORIES)]

OPCOST_ID_PREFIX = "cpu-opcost"
FAMILY_GROUPS: tuple[tuple[str, ...], ...] = (
    ("resnet", "resnet_bottleneck"),
    ("transformer", "vit"),
    ("vgg",),
    ("mobilenet_v2",),
    ("lstm",),
    ("mlp",),
    ("dlrm",),
)
OP_PARAMS: dict[str, Any] = {
    "objective": "reg:squarederror",
    "tree_method": "hist",
    "learning_rate": 0.08,
    "max_depth": 6,
    "min_child_weight": 2.0,
    "subsample": 0.9,
    "colsample_bytree": 0.9,
    "nthread": 2,
    "seed": 0,
}
OP_ROUNDS = 200

# The operator booster's input columns, by feature version (the model file names its
# version; a file of any other version or column list is refused, never misread).
# Version 2 adds the operators' shape geometry (``opgraph.node_geometry``, version
# ``GEOMETRY_VERSION``): what tells a 1-D from a 2-D convolution of the same FLOPs and
# bytes, a depthwise from a dense one, a tall from a wide matrix product.
GEOMETRY_COLUMNS: tuple[str, ...] = (
    "spatial_rank",
    "log_kernel",
    "log_stride",
    "log_groups",
    "log_channels_in",
    "log_channels_out",
    "log_out_spatial",
    "out_rank",
    "log_out_inner",
    "log_intensity",  # FLOPs per byte read and written
)
FEATURE_SETS: dict[int, tuple[str, ...]] = {
    1: (*NODE_FEATURES, "threads"),
    2: (*NODE_FEATURES, *GEOMETRY_COLUMNS, "threads"),
}


def geometry_columns(
    x: NDArray[np.float64], geometry: NDArray[np.float64] | Sequence[Sequence[float]]
) -> NDArray[np.float64]:
    """``GEOMETRY_COLUMNS`` of operators given by their ``NODE_FEATURES`` rows ``x`` and
    raw geometry rows (``opgraph.GEOMETRY_FIELDS`` order)."""
    g = raw_geometry(geometry)
    if g.shape[0] != x.shape[0]:
        raise InvalidInputError(
            f"{g.shape[0]} geometry rows for {x.shape[0]} operators",
            field="geometry",
            value=g.shape[0],
        )
    logs = np.log1p(np.maximum(g, 0.0))
    flops = np.expm1(x[:, _FLOPS_COLUMN] * _LOG_SCALE)
    moved = np.expm1(x[:, _FLOPS_COLUMN + 1] * _LOG_SCALE) + np.expm1(
        x[:, _FLOPS_COLUMN + 2] * _LOG_SCALE
    )
    intensity = np.log1p(flops) - np.log1p(moved)
    return np.column_stack(
        [
            g[:, 0],
            logs[:, 1],
            logs[:, 2],
            logs[:, 3],
            logs[:, 4],
            logs[:, 5],
            logs[:, 6],
            g[:, 7],
            logs[:, 8],
            intensity,
        ]
    )


def default_model_dir() -> Path:
    return Path(__file__).resolve().parents[3] / "data" / "cpu_opcost"


def _feature_row(
    category: str, backward: bool, flops: float, inp: float, out: float, par: float
) -> list[float]:
    row = [0.0] * len(NODE_FEATURES)
    row[CATEGORIES.index(category) if category in CATEGORIES else CATEGORIES.index("other")] = 1.0
    offset = len(CATEGORIES)
    row[offset] = 1.0 if backward else 0.0
    for i, value in enumerate((flops, inp, out, par)):
        row[offset + 1 + i] = math.log1p(value) / _LOG_SCALE
    return row


def node_rows(
    ops: Sequence[Sequence[Any]], geometry: Sequence[Sequence[float]] | None = None
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Features (``NODE_FEATURES`` order, then ``GEOMETRY_COLUMNS`` where ``geometry``
    gives the rows' raw geometry) and counts of stored operator rows
    (``opsweep.OP_FIELDS``)."""
    x = np.array([_feature_row(o[1], bool(o[2]), o[3], o[4], o[5], o[6]) for o in ops])
    x = x.reshape(-1, len(NODE_FEATURES))
    counts = np.array([float(o[7]) for o in ops])
    if geometry is not None:
        x = np.hstack([x, geometry_columns(x, geometry)])
    return x, counts


def item_geometry(
    geometry: Mapping[str, Mapping[str, Any]] | None, item: Mapping[str, Any]
) -> list[list[float]] | None:
    """An item's geometry rows from ``opsweep --geometry`` lines (by item id); None
    without lines; an item without its line, or of another geometry version, is refused."""
    if geometry is None:
        return None
    line = geometry.get(str(item.get("id", "")))
    if line is None:
        raise InvalidInputError(
            "no geometry rows for this timed item (run opsweep --geometry)",
            field="geometry",
            value=item.get("id"),
        )
    if int(line.get("geometry_version", -1)) != GEOMETRY_VERSION:
        raise InvalidInputError(
            f"geometry rows of version {line.get('geometry_version')}, this code computes "
            f"version {GEOMETRY_VERSION} (run opsweep --geometry again)",
            field="geometry_version",
            value=line.get("geometry_version"),
        )
    rows = [list(r) for r in line["geometry"]]
    if len(rows) != len(item["ops"]):
        raise InvalidInputError(
            f"{len(rows)} geometry rows for {len(item['ops'])} operator rows",
            field="geometry",
            value=item.get("id"),
        )
    return rows


@dataclass(frozen=True, slots=True)
class StepItem:
    """One measured step (a zoo item, or a probe's): its operators and what it took."""

    family: str
    threads: int
    optimizer: str
    parameters: int
    x: NDArray[np.float64]
    counts: NDArray[np.float64]
    measured_s: float
    opsum_measured_s: float  # the sum of the operators' own timings (a diagnostic)
    rnn_ops: int = 0  # operators a recurrent layer's C++ loop dispatched (rnnmarks)
    rnn_calls: int = 0  # recurrent layer calls
    views: float = 0.0  # view operators the eager step dispatches (geometry "view_ops")
    random_elements: float = 0.0  # random numbers drawn (geometry "random_elements")

    @property
    def probe(self) -> bool:
        return self.family.startswith("probe:")


def step_items(
    items: Sequence[Mapping[str, Any]],
    truth: Mapping[str, float] | None = None,
    extra: Mapping[str, Mapping[str, Any]] | None = None,
    geometry: Mapping[str, Mapping[str, Any]] | None = None,
) -> list[StepItem]:
    """The zoo items as steps; ``truth`` (item id -> seconds) replaces their measured time.

    ``extra`` (item id -> ``opsweep --steps`` line) gives the recurrent layers' operator
    counts (``rnn_ops``, ``rnn_calls``) and makes the probe items it times steps too
    (family ``probe:NAME``, SGD, its ``parameters``); ``geometry`` (item id ->
    ``opsweep --geometry`` line) adds the operators' geometry columns.
    """
    extra = extra or {}
    out = []
    for item in items:
        more = extra.get(item.get("id", ""), {})
        if item.get("kind") == "zoo":
            if truth is not None and item["id"] not in truth:
                continue
            family, optimizer, parameters = item["family"], item["optimizer"], item["parameters"]
            measured = truth[item["id"]] if truth is not None else item["measured_step_s"]
        elif item.get("kind") == "probe" and truth is not None and item.get("id") in truth:
            family, optimizer = f"probe:{item['probe']}", "sgd"
            parameters, measured = more["parameters"], truth[item["id"]]
        else:
            continue
        raw = item_geometry(geometry, item)
        x, counts = node_rows(item["ops"], raw)
        views, drawn = eager_extras(raw, counts)
        out.append(
            StepItem(
                family=family,
                threads=int(item["threads"]),
                optimizer=optimizer,
                parameters=int(parameters),
                x=x,
                counts=counts,
                measured_s=float(measured),
                opsum_measured_s=float(sum(o[7] * o[8] for o in item["ops"])),
                rnn_ops=int(more.get("rnn_ops", 0)),
                rnn_calls=int(more.get("rnn_calls", 0)),
                views=views,
                random_elements=drawn,
            )
        )
    return out


def item_family(item: Mapping[str, Any]) -> str:
    """A zoo item's family, or ``probe:NAME`` for a probe network's item."""
    if item.get("kind") == "probe":
        return f"probe:{item.get('probe', '')}"
    return str(item.get("family", ""))


def _op_training(
    items: Sequence[Mapping[str, Any]],
    exclude: set[str],
    geometry: Mapping[str, Mapping[str, Any]] | None = None,
    target: str = "seconds",
) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64]]:
    xs, ys, ws = [], [], []
    for item in items:
        if item.get("kind") not in {"zoo", "probe"} or item_family(item) in exclude:
            continue
        x, counts = node_rows(item["ops"], item_geometry(geometry, item))
        times = np.array([max(float(o[8]), 1e-7) for o in item["ops"]])
        xs.append(with_threads(x, int(item["threads"])))
        ys.append(np.log(times / work_s(x)) if target == "work" else np.log(times))
        ws.append(counts)
    return np.vstack(xs), np.concatenate(ys), np.concatenate(ws)


def _fit_ops(
    items: Sequence[Mapping[str, Any]],
    exclude: set[str],
    rounds: int = OP_ROUNDS,
    geometry: Mapping[str, Mapping[str, Any]] | None = None,
    target: str = "seconds",
) -> Booster:
    if target == "hybrid":
        x, _, _ = _op_training(items, exclude, geometry)
        return HybridBooster(
            seconds=_fit_ops(items, exclude, rounds, geometry, "seconds"),  # type: ignore[arg-type]
            work=_fit_ops(items, exclude, rounds, geometry, "work"),  # type: ignore[arg-type]
            bounds=category_bounds(x),
        )
    x, y, w = _op_training(items, exclude, geometry, target)
    data = xgb.DMatrix(x, label=y, weight=w)
    return xgb.train(OP_PARAMS, data, num_boost_round=rounds)


def _update_s(
    updates: Mapping[str, list[float]], optimizer: str, threads: int, params: int
) -> float:
    name = "adam" if optimizer in {"adam", "adamw"} else "sgd"
    coef = updates.get(f"{name}-t{threads}") or updates.get(f"{name}-t1") or [0.0, 0.0]
    return coef[0] + coef[1] * params


def _opsum(
    booster: Booster,
    x: NDArray[np.float64],
    counts: NDArray[np.float64],
    threads: int,
    target: str = "seconds",
) -> tuple[float, float]:
    """Estimated seconds of the compute operators and of the others."""
    seconds = counts * op_seconds(booster, x, threads, target)
    compute = x[:, _COMPUTE_COLUMNS].sum(axis=1) > 0
    return float(np.sum(seconds[compute])), float(np.sum(seconds[~compute]))


def _apply(
    coef: Sequence[float],
    compute: float,
    other: float,
    ops: float,
    update: float,
    rnn: float,
    views: float = 0.0,
    random_s: float = 0.0,
) -> float:
    a, o, b, c = coef[:4]
    r = coef[4] if len(coef) > 4 else 0.0
    fixed = coef[5] if len(coef) > 5 else 0.0
    v = coef[6] if len(coef) > 6 else 0.0
    return a * compute + o * other + b * ops + c * update + r * rnn + fixed + v * views + random_s


@dataclass(slots=True)
class OpCostModel:
    """The operator booster, step coefficients, update lines, calibration, validation."""

    booster: Booster
    step: dict[str, list[float]]  # "t1" / "t2" -> [a, o, b, c]
    updates: dict[str, list[float]]
    log_q10: float
    log_q90: float
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def estimator_id(self) -> str:
        return str(self.meta.get("id", OPCOST_ID_PREFIX))

    @property
    def threads(self) -> list[int]:
        return sorted(int(k[1:]) for k in self.step)

    @property
    def feature_version(self) -> int:
        """``FEATURE_SETS`` key of the booster's input columns (a file written before
        versions were recorded has version 1's columns)."""
        return int(self.meta.get("feature_version", 1))

    @property
    def op_target(self) -> str:
        """``OP_TARGETS``: what the booster predicts (a file without it: "seconds")."""
        return str(self.meta.get("op_target", "seconds"))

    @property
    def needs_geometry(self) -> bool:
        return self.feature_version >= 2

    def predict_s(
        self,
        x: NDArray[np.float64],
        counts: NDArray[np.float64] | None,
        *,
        threads: int,
        optimizer: str,
        parameters: int,
        rnn_ops: int = 0,
        rnn_calls: int = 0,
        geometry: NDArray[np.float64] | None = None,
    ) -> tuple[float, float, float]:
        """p10, p50, p90 of the step time of a graph given as node feature rows
        (``NODE_FEATURES``; ``rnn_ops`` of them dispatched by ``rnn_calls`` recurrent
        layers' loops; ``geometry``: their raw ``opgraph.GEOMETRY_FIELDS`` rows, which a
        model of feature version 2 needs). Rows that already carry the model's geometry
        columns (``step_items``) are taken as they are."""
        if f"t{threads}" not in self.step:
            raise ValueError(f"threads={threads} outside the model's {self.threads}")
        width = len(FEATURE_SETS[self.feature_version]) - 1
        if x.shape[1] != width:
            if not self.needs_geometry or x.shape[1] != len(NODE_FEATURES):
                raise InvalidInputError(
                    f"operator rows of {x.shape[1]} columns, the model (feature version "
                    f"{self.feature_version}) reads {width}",
                    field="x",
                    value=x.shape[1],
                )
            if geometry is None:
                raise InvalidInputError(
                    f"the model (feature version {self.feature_version}) needs the "
                    "operators' geometry (opgraph.node_geometry); none given",
                    field="geometry",
                    value=None,
                )
            x = np.hstack([x, geometry_columns(x, geometry)])
        weights = np.ones(x.shape[0]) if counts is None else counts
        views, drawn = eager_extras(geometry, weights)
        compute, other = _opsum(self.booster, x, weights, threads, self.op_target)
        update = _update_s(self.updates, optimizer, threads, parameters)
        coef = self.step[f"t{threads}"]
        total = float(np.sum(weights))
        ops = eager_operators(total, rnn_ops, rnn_calls) if len(coef) > 4 else total
        p50 = _apply(
            coef, compute, other, ops, update, float(rnn_ops), views, drawn * RANDOM_S_PER_ELEMENT
        )
        return p50 * math.exp(self.log_q10), p50, p50 * math.exp(self.log_q90)

    def save(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        boosters: list[xgb.Booster]
        if isinstance(self.booster, HybridBooster):
            boosters = [self.booster.seconds, self.booster.work]
            self.meta["op_bounds"] = self.booster.bounds
        else:
            boosters = [self.booster]
        content = b""
        for booster, name in zip(boosters, ("opcost.ubj", WORK_BOOSTER_FILE), strict=False):
            booster.save_model(str(folder / name))
            content += (folder / name).read_bytes()
        fitted = json.dumps([self.step, self.updates, self.log_q10, self.log_q90])
        content += fitted.encode()
        digest = hashlib.sha1(content).hexdigest()[:10]
        self.meta["id"] = f"{OPCOST_ID_PREFIX}-{digest}"
        body = {
            "step": self.step,
            "updates": self.updates,
            "log_q10": self.log_q10,
            "log_q90": self.log_q90,
            "meta": self.meta,
        }
        (folder / "opcost.json").write_text(json.dumps(body, indent=1, sort_keys=True) + "\n")

    @classmethod
    def load(cls, folder: Path) -> OpCostModel:
        """The model saved in ``folder``; one whose feature version or columns this code
        does not compute (or whose geometry version differs) is refused."""
        body = json.loads((folder / "opcost.json").read_text())
        meta = body.get("meta", {})
        version = meta.get("feature_version", 1)
        known = FEATURE_SETS.get(version) if isinstance(version, int) else None
        if known is None:
            raise InvalidInputError(
                f"{folder / 'opcost.json'}: feature version {version!r}, this code reads "
                f"versions {sorted(FEATURE_SETS)}",
                field="feature_version",
                value=version,
            )
        if "features" in meta and list(meta["features"]) != list(known):
            raise InvalidInputError(
                f"{folder / 'opcost.json'}: feature columns {meta['features']} are not "
                f"version {version}'s {list(known)}",
                field="features",
                value=meta["features"],
            )
        if version >= 2 and meta.get("geometry_version") != GEOMETRY_VERSION:
            raise InvalidInputError(
                f"{folder / 'opcost.json'}: fitted on operator geometry version "
                f"{meta.get('geometry_version')!r}, this code computes {GEOMETRY_VERSION}",
                field="geometry_version",
                value=meta.get("geometry_version"),
            )

        def read(name: str) -> xgb.Booster:
            booster = xgb.Booster()
            booster.load_model(str(folder / name))
            booster.set_param({"nthread": 1})
            return booster

        first = read("opcost.ubj")
        booster: Booster = first
        if meta.get("op_target") == "hybrid":
            booster = HybridBooster(
                seconds=first,
                work=read(WORK_BOOSTER_FILE),
                bounds={k: list(v) for k, v in meta["op_bounds"].items()},
            )
        return cls(
            booster,
            {k: list(v) for k, v in body["step"].items()},
            {k: list(v) for k, v in body["updates"].items()},
            float(body["log_q10"]),
            float(body["log_q90"]),
            dict(body["meta"]),
        )


def _scores(pairs: Sequence[tuple[float, float, float, float]]) -> dict[str, float]:
    """MAPE (fraction), under-prediction rate, p10-p90 coverage of (p10, p50, p90, y)."""
    if not pairs:
        return {}
    ape = [abs(p50 - y) / y for _, p50, _, y in pairs]
    return {
        "mape": float(np.mean(ape)),
        "max_ape": float(np.max(ape)),
        "under_rate": float(np.mean([p50 < y for _, p50, _, y in pairs])),
        "coverage_p10_p90": float(np.mean([lo <= y <= hi for lo, _, hi, y in pairs])),
        "rows": float(len(pairs)),
    }


def fit_opcost(
    items: Sequence[Mapping[str, Any]],
    *,
    provenance: Mapping[str, Any] | None = None,
    groups: Sequence[Sequence[str]] = FAMILY_GROUPS,
    rounds: int = OP_ROUNDS,
    truth: Mapping[str, float] | None = None,
    extra: Mapping[str, Mapping[str, Any]] | None = None,
    calibrate_on_probes: bool = True,
    step_loss: str = "relative",
    geometry: Mapping[str, Mapping[str, Any]] | None = None,
    step_constant: bool = False,
    op_target: str = "seconds",
) -> OpCostModel:
    """Fit the model on an ``opsweep`` file's items, validated by leaving groups out.

    The steps' times are the profiler's (``measured_step_s``) unless ``truth`` gives
    others (item id -> seconds, e.g. ``opsweep --steps``); ``extra`` as ``step_items``.
    Probe steps (where ``truth`` times them) train the step coefficients in every zoo
    fold; each probe family is also left out in turn (its operators from the booster,
    its steps from the step law) and its steps predicted: with ``calibrate_on_probes``
    the p10/p90 ratios come from those new-family residuals and the zoo folds' together,
    else from the zoo folds' alone. ``validation["all"]`` scores the zoo folds only.
    ``geometry`` (item id -> ``opsweep --geometry`` line, every timed item) fits the
    booster on the operators' geometry too (feature version 2), else version 1.
    """
    from tools.estimators.cpu.step_law import fit_step, fit_updates

    steps = step_items(items, truth, extra, geometry)
    updates = fit_updates(items)
    present = [tuple(g) for g in groups if any(s.family in g for s in steps)]
    # 1. out-of-group operator sums: each group's steps from a booster that never saw it
    opsums: list[tuple[float, float]] = [(0.0, 0.0)] * len(steps)
    if op_target not in OP_TARGETS:
        raise InvalidInputError(f"one of {OP_TARGETS}", field="op_target", value=op_target)
    full = _fit_ops(items, set(), rounds, geometry, op_target)
    for i, s in enumerate(steps):
        if s.probe:
            opsums[i] = _opsum(full, s.x, s.counts, s.threads, op_target)
    for group in present:
        booster = _fit_ops(items, set(group), rounds, geometry, op_target)
        for i, s in enumerate(steps):
            if s.family in group:
                opsums[i] = _opsum(booster, s.x, s.counts, s.threads, op_target)

    def rows(selected: Sequence[int]) -> list[StepRow]:
        return [
            (
                *opsums[i],
                eager_operators(
                    float(np.sum(steps[i].counts)), steps[i].rnn_ops, steps[i].rnn_calls
                ),
                _update_s(updates, steps[i].optimizer, steps[i].threads, steps[i].parameters),
                float(steps[i].rnn_ops),
                steps[i].views,
                steps[i].random_elements * RANDOM_S_PER_ELEMENT,
                steps[i].measured_s,
            )
            for i in selected
        ]

    thread_counts = sorted({s.threads for s in steps})
    # 2. each group's steps with step coefficients fitted without it
    held: list[tuple[int, float]] = []  # (index, p50)
    for group in present:
        for t in thread_counts:
            train = [i for i, s in enumerate(steps) if s.threads == t and s.family not in group]
            test = [i for i, s in enumerate(steps) if s.threads == t and s.family in group]
            if not train or not test:
                continue
            coef = fit_step(rows(train), step_loss, step_constant)
            for i, row in zip(test, rows(test), strict=True):
                held.append((i, _apply(coef, *row[:-1])))
    # 3. each probe family's steps from a booster and step coefficients fitted without
    #    it: residuals of families the model never saw, as the held-out files are
    probe_held: list[tuple[int, float]] = []
    unfitted: set[str] = set()
    for family in sorted({s.family for s in steps if s.probe}):
        booster = _fit_ops(items, {family}, rounds, geometry, op_target)
        for t in thread_counts:
            train = [i for i, s in enumerate(steps) if s.threads == t and s.family != family]
            test = [i for i, s in enumerate(steps) if s.threads == t and s.family == family]
            if not train or not test:
                continue
            coef = fit_step(rows(train), step_loss, step_constant)
            # recurrent loops' cost is a step-law term: without any training step that
            # has one, it is not fitted (r = 0), so such a fold is scored, not calibrated on
            if any(steps[i].rnn_ops for i in test) and not any(steps[i].rnn_ops for i in train):
                unfitted.add(family)
            for i, (_, _, n, u, k, v, rnd, _) in zip(test, rows(test), strict=True):
                cs, os_ = _opsum(booster, steps[i].x, steps[i].counts, steps[i].threads, op_target)
                probe_held.append((i, _apply(coef, cs, os_, n, u, k, v, rnd)))
    calibration = held + (
        [(i, p50) for i, p50 in probe_held if steps[i].family not in unfitted]
        if calibrate_on_probes
        else []
    )
    ratios = np.log([steps[i].measured_s / p50 for i, p50 in calibration])
    q10, q90 = float(np.quantile(ratios, 0.1)), float(np.quantile(ratios, 0.9))
    quantiles = {
        name: [round(float(np.quantile(r, q)), 4) for q in (0.1, 0.5, 0.9)]
        for name, r in (
            ("zoo_folds", np.log([steps[i].measured_s / p50 for i, p50 in held])),
            (
                "probe_family_folds",
                np.log(
                    [
                        steps[i].measured_s / p50
                        for i, p50 in probe_held
                        if steps[i].family not in unfitted
                    ]
                ),
            ),
        )
        if len(r)
    }

    def interval(
        held_pairs: Sequence[tuple[int, float]],
    ) -> list[tuple[float, float, float, float]]:
        return [
            (p50 * math.exp(q10), p50, p50 * math.exp(q90), steps[i].measured_s)
            for i, p50 in held_pairs
        ]

    pairs = interval(held)
    validation: dict[str, Any] = {"all": _scores(pairs)}
    if probe_held:
        probe_pairs = interval(probe_held)
        validation["probe_family_out"] = _scores(probe_pairs)
        for family in sorted({steps[i].family for i, _ in probe_held}):
            validation[family] = _scores(
                [
                    p
                    for p, (i, _) in zip(probe_pairs, probe_held, strict=True)
                    if steps[i].family == family
                ]
            )
    for t in thread_counts:
        validation[f"t{t}"] = _scores(
            [p for p, (i, _) in zip(pairs, held, strict=True) if steps[i].threads == t]
        )
    for group in present:
        validation["+".join(group)] = _scores(
            [p for p, (i, _) in zip(pairs, held, strict=True) if steps[i].family in group]
        )
    step = {
        f"t{t}": fit_step(
            rows([i for i, s in enumerate(steps) if s.threads == t]), step_loss, step_constant
        )
        for t in thread_counts
    }
    booster = full
    x, _, _ = _op_training(items, set(), geometry)
    version = 2 if geometry is not None else 1
    meta: dict[str, Any] = {
        "validation_method": "leave one zoo family group out (operators and step coefficients)",
        "calibration": (
            "p10/p90: quantiles of log(measured / p50) over the zoo folds and the probe "
            "family folds"
            + (
                f" (not {sorted(unfitted)}: a step-law term without training steps)"
                if unfitted
                else ""
            )
            if calibrate_on_probes and probe_held
            else "p10/p90: quantiles of log(measured / p50) over the zoo folds"
        ),
        "groups": ["+".join(g) for g in present],
        "validation": validation,
        "step_loss": step_loss,
        "step_constant": step_constant,
        "log_ratio_q10_q50_q90": quantiles,
        "step_rows": sum(not s.probe for s in steps),
        "probe_step_rows": sum(s.probe for s in steps),
        "operator_rows": int(x.shape[0]),
        "feature_version": version,
        "features": list(FEATURE_SETS[version]),
        "op_target": op_target,
        "timed_domain": timed_domain(items),
        **({"geometry_version": GEOMETRY_VERSION} if version >= 2 else {}),
        "provenance": dict(provenance or {}),
    }
    return OpCostModel(booster, step, updates, q10, q90, meta)
