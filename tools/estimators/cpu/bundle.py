"""Training, selecting, saving and loading the DNN estimators as one bundle.

A bundle holds, for each target (``iteration_s``, ``peak_memory_mb``), three
estimators fitted on the same training rows (80% of the configurations, repeats kept
together):

- ``blackbox``: XGBoost quantiles over the tabular features (HARP's tabular model);
- ``whitebox``: the op-graph GNN (two networks, each fitted on half the rows; their
  mean is the estimate);
- ``hybrid``: XGBoost quantiles (trees of depth 3: ``HYBRID_PARAMS``) over hardware,
  op-graph totals, the analytic estimates, a linear base and the GNN's estimate,
  predicting the log-ratio of the truth to the base (a learned correction: trees cannot
  extrapolate, ratios need not). The base (``HYBRID_BASE = "linear"``) is the analytic
  model's terms (``features.analytic_terms``: compute, memory traffic, update and
  dispatch time; model state, buffers, batch, saved activations and live peak memory)
  and a constant, weighted by non-negative least squares of relative error on the
  training rows: the analytic model with its assumed efficiencies fitted, where the
  fixed-assumption analytic estimate under-predicts every memory row (by ~70%) and the
  trees had to learn that offset family by family. The GNN estimate it learns from is
  out-of-fold (each half's network predicts the other half), so the hybrid never learns
  to trust an over-fitted input.

Validation calibrates each estimator's interval (``calibration``) and ranks them by
HARP's rule on the calibrated p90 (``selection``), in two regimes, because an
estimator's error on a family it was trained on says little about its error on a new
one (on this data the kind that validates best in-family can be the worst on new
families):

- **new families** (the bundle's headline ``selected`` / ``calibration`` /
  ``validation``): whole families of the training data held out,
  by default one fold per family group (``family_folds``; ``family_validation_folds``
  asks for fewer, larger folds instead), each predicted by all three kinds refitted on
  the other training families; families that share blocks (``LINKED_FAMILIES``) are
  held out together. One fold per group rather than three: each fold's models then see
  all the other groups, as the final model sees every training family, and err about
  as much on the held-out group as it will on a new one; with three folds they saw two
  thirds of the families, erred more, and the calibrated memory interval came out too
  wide (docs/estimators.md, section 4).
  This is how the shipped bundle is used: ``rightsize estimate`` answers a user's own
  model, never a zoo family. With fewer than two family groups it falls back to the
  in-family regime.
- **in family** (``in_family``): the other 20% of the configurations, drawn from the
  same families; it answers rows whose family the bundle was trained on. When that
  split has fewer than ``IN_FAMILY_MIN_ROWS`` rows, every configuration is predicted
  out of fold instead (the split plus four more folds of the configurations, each by
  the kinds refitted without it: cross-conformal calibration), so the tails are
  calibrated on all the training rows rather than on a few dozen.

The first kind of a regime's ranking is its choice (``selected_kind``). The bundle also
records its domain (families, CPU models, threads, batch sizes), which is where the
service lets it answer.
"""

from __future__ import annotations

import logging
import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Literal

import numpy as np
from numpy.typing import NDArray
from pydantic import BaseModel, ConfigDict, Field

from tools.estimators.cpu.calibration import Calibration, calibrate
from tools.estimators.cpu.dataset import Example, GraphData, GraphStore
from tools.estimators.cpu.features import (
    FeatureInput,
    analytic_estimates,
    analytic_terms,
    matrix,
)
from tools.estimators.cpu.gnn import GNNModel, GraphSample, fit_gnn
from tools.estimators.cpu.metrics import Scores, score
from tools.estimators.cpu.quantile import QuantileModel, fit_quantiles
from tools.estimators.cpu.selection import Ranked, harp_select

__all__ = [
    "HYBRID_BASE",
    "HYBRID_MEMORY_GNN",
    "KINDS",
    "LINKED_FAMILIES",
    "MEMORY_STATE_WEIGHT",
    "TARGETS",
    "BundleMeta",
    "Domain",
    "EstimatorBundle",
    "Prediction",
    "Regime",
    "base_logs",
    "config_folds",
    "example_inputs",
    "family_folds",
    "fit_linear_base",
    "hybrid_input_names",
    "hybrid_matrix",
    "raw_quantiles",
    "split_validation",
    "train_bundle",
]

log = logging.getLogger(__name__)

Kind = Literal["blackbox", "whitebox", "hybrid"]
KINDS: tuple[Kind, ...] = ("blackbox", "whitebox", "hybrid")
TARGETS = ("iteration_s", "peak_memory_mb")
BLACKBOX_GROUPS = ("tabular",)
HYBRID_GROUPS = ("hardware", "graph", "analytic")
# Whether the hybrid also takes the GNN's (out-of-fold) estimates as inputs. Kept: on the
# new-family validation (training data only) the hybrid without them was worse.
HYBRID_GNN = True
# Whether the memory hybrid takes them too. Not: the GNN's memory is the analytic memory
# times a learned factor, which the hybrid's fitted base and inputs already carry (on the
# zoo's new-family validation 5.9% without them against 5.7% with them, the same base),
# and without them the memory hybrid is refitted and validated alone in minutes
# (``memory_refit``), where retraining the GNNs takes hours on two shared cores.
HYBRID_MEMORY_GNN = False
# The hybrid's XGBoost settings over ``quantile.DEFAULT_PARAMS``: trees of depth 3 rather
# than 6 (smoother corrections, fewer splits that single out one family's graphs); chosen
# on the new-family validation of the benchmark's training folds, not on its test rows.
HYBRID_PARAMS: dict[str, Any] = {"max_depth": 3}
# What the hybrid corrects: "linear" (the analytic terms weighted by non-negative least
# squares on the training rows) or "analytic" (the analytic estimate as it is). Chosen on
# validation of the benchmark's training data only (5-fold in-family CV and new-family
# folds; docs/estimators.md, section 4): memory 3.9% -> 3.0% in-family, 14.3% -> 8.4% on
# new families; time 15.5% -> 15.3% and 28.6% -> 27.7%.
HYBRID_BASE: Literal["linear", "analytic"] = "linear"
# The linear memory base's weight on the model state (weights, gradients, optimizer
# states; ``features.memory_terms``): 1, each held once as torch holds it, not fitted
# (None: fitted). The zoo's models are small (1-8 MiB of weights beside a process
# baseline of about 90 MiB), so a fit cannot tell this term from the constant and gave
# it 1.1-1.4, which a model file with large weights pays for (an LSTM language model's
# 165 MiB of state: 20-60 MiB too much). Chosen on the zoo's new-family validation
# (``benchmarks/estimators.py --memory-study``).
MEMORY_STATE_WEIGHT: float | None = 1.0
_STATE_TERM = 1  # its place in ``features.analytic_terms``: (constant, state, ...)
# Below this many rows the in-family split is too few to calibrate the tails on: a
# conformal p90 from n rows misses its 10% by about sqrt(0.09 / n), 4 points per tail at
# n = 53 (the benchmark's seen/20% bundle, whose test coverage came out at 0.71). The
# regime then pools out-of-fold predictions of every training configuration (5 folds).
IN_FAMILY_MIN_ROWS = 100
# Families built from the same blocks: a held-out fold takes them together, or the other
# would make the "new" family a seen one (as the benchmark's unseen folds do).
LINKED_FAMILIES: tuple[tuple[str, ...], ...] = (
    ("resnet", "resnet_bottleneck"),
    ("transformer", "vit"),
)


class Domain(BaseModel):
    """Where a bundle's training data came from: what it may speak for."""

    model_config = ConfigDict(extra="forbid")

    families: list[str]
    cpu_models: list[str]
    cpu_isas: list[str] = Field(
        default_factory=list,
        description="vector ISA of the CPUs it was profiled on (avx512, avx2...); "
        "empty: not recorded",
    )
    threads: list[int]
    batch_min: int
    batch_max: int
    log_flops_min: float
    log_flops_max: float


class Regime(BaseModel):
    """Calibration, HARP ranking and scores of every kind on one validation regime."""

    model_config = ConfigDict(extra="forbid")

    method: str = ""
    rows: int = 0
    calibration: dict[str, dict[str, Calibration]] = Field(
        default_factory=dict, description="target -> kind -> calibration"
    )
    selected: dict[str, str] = Field(default_factory=dict, description="target -> kind")
    ranking: dict[str, list[Ranked]] = Field(default_factory=dict)
    validation: dict[str, dict[str, Scores]] = Field(default_factory=dict)


class BundleMeta(BaseModel):
    """Everything but the model weights: calibration, choice, scores, domain.

    The top-level ``calibration`` / ``selected`` / ``ranking`` / ``validation`` are the
    new-family regime's (``validation_method`` says which regime they are); ``in_family``
    holds the regime for rows of the families the bundle was trained on.
    """

    model_config = ConfigDict(extra="forbid")

    calibration: dict[str, dict[str, Calibration]] = Field(
        default_factory=dict, description="target -> kind -> calibration"
    )
    selected: dict[str, str] = Field(default_factory=dict, description="target -> kind")
    ranking: dict[str, list[Ranked]] = Field(default_factory=dict)
    validation: dict[str, dict[str, Scores]] = Field(default_factory=dict)
    validation_method: str = ""
    validation_folds: list[list[str]] = Field(
        default_factory=list, description="families held out together, per fold"
    )
    in_family: Regime | None = None
    blackbox_names: list[str] = Field(default_factory=list)
    hybrid_names: list[str] = Field(default_factory=list)
    hybrid_memory_names: list[str] = Field(
        default_factory=list,
        description="the memory hybrid's inputs where they differ from hybrid_names "
        "(empty: the same)",
    )
    hybrid_base: dict[str, list[float]] = Field(
        default_factory=dict,
        description="target -> weights of features.analytic_terms (empty: the analytic estimate)",
    )
    training_rows: int = 0
    validation_rows: int = 0
    domain: Domain | None = None

    def hybrid_inputs(self, target: str) -> list[str]:
        """The hybrid's input names for ``target``."""
        if target == "peak_memory_mb" and self.hybrid_memory_names:
            return self.hybrid_memory_names
        return self.hybrid_names


@dataclass(frozen=True, slots=True)
class Prediction:
    """Quantiles (p10, p50, p90) per row, in the target's own unit."""

    kind: str
    quantiles: NDArray[np.float64]


@dataclass(slots=True)
class EstimatorBundle:
    blackbox: dict[str, QuantileModel] = field(default_factory=dict)
    hybrid: dict[str, QuantileModel] = field(default_factory=dict)
    gnns: list[GNNModel] = field(default_factory=list)
    meta: BundleMeta = field(default_factory=BundleMeta)

    # -- prediction ---------------------------------------------------------------------

    def _gnn(
        self, samples: Sequence[GraphSample]
    ) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        outputs = [gnn.predict(samples) for gnn in self.gnns]
        log_time = np.mean([o[0] for o in outputs], axis=0)
        log_memory = np.mean([o[1] for o in outputs], axis=0)
        return log_time, log_memory

    def in_family(self, family: str | None) -> bool:
        """Whether a row of ``family`` is answered by the in-family regime."""
        domain = self.meta.domain
        return (
            self.meta.in_family is not None
            and family is not None
            and domain is not None
            and family in domain.families
        )

    def selected_kind(self, target: str, family: str | None = None) -> str:
        """HARP's choice for ``target`` on a row of ``family`` (None: a user's model)."""
        regime = self.meta.in_family
        if regime is not None and self.in_family(family):
            chosen = regime.selected.get(target)
            if chosen:
                return chosen
        return self.meta.selected.get(target, "hybrid")

    def predict(
        self,
        items: Sequence[FeatureInput],
        graphs: Sequence[GraphData],
        kinds: Sequence[str] = KINDS,
    ) -> dict[str, dict[str, Prediction]]:
        """target -> kind -> calibrated quantiles, for every kind asked that is trained.

        Each row is calibrated by its regime: in-family when its family is one the
        bundle was trained on, new-family otherwise.
        """
        samples = [_sample(item, graph) for item, graph in zip(items, graphs, strict=True)]
        raw = self._raw(items, samples, kinds)
        seen = np.array([self.in_family(item.family) for item in items], dtype=bool)
        out: dict[str, dict[str, Prediction]] = {}
        for target, by_kind in raw.items():
            out[target] = {}
            for kind, q in by_kind.items():
                calibration = self.meta.calibration.get(target, {}).get(kind, Calibration())
                calibrated = calibration.apply(q)
                if seen.any() and self.meta.in_family is not None:
                    own = self.meta.in_family.calibration.get(target, {}).get(kind, Calibration())
                    calibrated[seen] = own.apply(q[seen])
                out[target][kind] = Prediction(kind, np.exp(calibrated))
        return out

    def _raw(
        self,
        items: Sequence[FeatureInput],
        samples: Sequence[GraphSample],
        kinds: Sequence[str],
        gnn_oof: tuple[NDArray[np.float64], NDArray[np.float64]] | None = None,
    ) -> dict[str, dict[str, NDArray[np.float64]]]:
        raw: dict[str, dict[str, NDArray[np.float64]]] = {t: {} for t in TARGETS}
        if "blackbox" in kinds and self.blackbox:
            x, _ = matrix(items, BLACKBOX_GROUPS, self.meta.blackbox_names)
            for target in TARGETS:
                raw[target]["blackbox"] = self.blackbox[target].predict(x)
        uses_gnn = any(_hybrid_uses_gnn(self.meta.hybrid_inputs(t)) for t in TARGETS)
        gnn: tuple[NDArray[np.float64], NDArray[np.float64]] | None = None
        if self.gnns and ("whitebox" in kinds or ("hybrid" in kinds and uses_gnn)):
            gnn = gnn_oof if gnn_oof is not None else self._gnn(samples)
        if "whitebox" in kinds and gnn is not None:
            raw["iteration_s"]["whitebox"] = np.repeat(gnn[0][:, None], 3, axis=1)
            raw["peak_memory_mb"]["whitebox"] = np.repeat(gnn[1][:, None], 3, axis=1)
        if "hybrid" in kinds and self.hybrid and (gnn is not None or not uses_gnn):
            bases = base_logs(items, self.meta.hybrid_base)
            for target in TARGETS:
                names = self.meta.hybrid_inputs(target)
                own = gnn if _hybrid_uses_gnn(names) else None
                x = hybrid_matrix(items, own, names, bases)
                raw[target]["hybrid"] = self.hybrid[target].predict(x) + bases[target][:, None]
        return raw

    # -- persistence --------------------------------------------------------------------

    def save(self, folder: Path) -> list[Path]:
        folder.mkdir(parents=True, exist_ok=True)
        written: list[Path] = []
        for kind, models in (("blackbox", self.blackbox), ("hybrid", self.hybrid)):
            for target, model in models.items():
                path = folder / f"{kind}_{target}.ubj.gz"
                model.save(path)
                written.append(path)
        for index, gnn in enumerate(self.gnns):
            path = folder / f"gnn_{index}.pt"
            gnn.save(path)
            written.append(path)
        meta = folder / "bundle.json"
        meta.write_text(self.meta.model_dump_json(indent=1))
        written.append(meta)
        return written

    @classmethod
    def load(cls, folder: Path) -> EstimatorBundle:
        meta = BundleMeta.model_validate_json((folder / "bundle.json").read_text())
        bundle = cls(meta=meta)
        for target in TARGETS:
            for kind, models in (("blackbox", bundle.blackbox), ("hybrid", bundle.hybrid)):
                path = folder / f"{kind}_{target}.ubj.gz"
                if path.exists():
                    models[target] = QuantileModel.load(path)
        bundle.gnns = [GNNModel.load(p) for p in sorted(folder.glob("gnn_*.pt"))]
        return bundle


def _graph_features(item: FeatureInput) -> NDArray[np.float64]:
    time_s, memory_mb = analytic_estimates(item)
    hw = item.hardware
    return np.array(
        [
            math.log(hw.peak_gflops),
            math.log(hw.bandwidth_gbs),
            float(hw.threads),
            1.0 if hw.kind == "gpu" else 0.0,
            math.log(item.batch_size),
            float(item.optimizer.lower() in {"adam", "adamw"}),
            math.log(item.summary.get("parameters", 0.0) + 1),
            math.log(max(time_s, 1e-9)),
            math.log(max(memory_mb, 1e-6)),
        ]
    )


def _sample(item: FeatureInput, graph: GraphData, example: Example | None = None) -> GraphSample:
    _, memory_mb = analytic_estimates(item)
    return GraphSample(
        graph=graph,
        features=_graph_features(item),
        analytic_log_memory=math.log(max(memory_mb, 1e-6)),
        log_time=math.log(example.iteration_s) if example else math.nan,
        log_memory=math.log(example.peak_memory_mb) if example else math.nan,
    )


def _analytic_logs(items: Sequence[FeatureInput]) -> dict[str, NDArray[np.float64]]:
    pairs = np.array([analytic_estimates(i) for i in items]).reshape(-1, 2)
    return {
        "iteration_s": np.log(np.maximum(pairs[:, 0], 1e-9)),
        "peak_memory_mb": np.log(np.maximum(pairs[:, 1], 1e-6)),
    }


def fit_linear_base(
    examples: Sequence[Example], items: Sequence[FeatureInput]
) -> dict[str, list[float]]:
    """target -> non-negative weights of ``analytic_terms`` minimising relative error
    (the memory state's weight is ``MEMORY_STATE_WEIGHT`` where that is set)."""
    from scipy.optimize import nnls

    weights: dict[str, list[float]] = {}
    all_terms = [analytic_terms(item) for item in items]
    for target in TARGETS:
        terms = np.array([t[target] for t in all_terms])
        truth = np.array([getattr(e, target) for e in examples])
        fixed = (
            {_STATE_TERM: MEMORY_STATE_WEIGHT}
            if target == "peak_memory_mb" and MEMORY_STATE_WEIGHT is not None
            else {}
        )
        free = [j for j in range(terms.shape[1]) if j not in fixed]
        goal = np.ones_like(truth) - sum(w * terms[:, j] for j, w in fixed.items()) / truth
        coef, _ = nnls(terms[:, free] / truth[:, None], goal)
        full = np.zeros(terms.shape[1])
        full[free] = coef
        for j, w in fixed.items():
            full[j] = w
        weights[target] = [float(c) for c in full]
    return weights


def base_logs(
    items: Sequence[FeatureInput], weights: Mapping[str, Sequence[float]]
) -> dict[str, NDArray[np.float64]]:
    """Log of each target's base: the linear base where ``weights`` has it, else analytic."""
    out = _analytic_logs(items)
    all_terms = [analytic_terms(item) for item in items] if weights else []
    for target, coef in weights.items():
        terms = np.array([t[target] for t in all_terms]).reshape(len(items), -1)
        floor = 1e-9 if target == "iteration_s" else 1e-6
        out[target] = np.log(np.maximum(terms @ np.asarray(coef), floor))
    return out


GNN_COLUMNS = ("gnn_log_time", "gnn_log_memory")
BASE_COLUMNS = ("base_log_time", "base_log_memory")


def _hybrid_uses_gnn(names: Sequence[str]) -> bool:
    """Whether a hybrid with these feature names takes the GNN's estimates as inputs."""
    return tuple(names[-2:]) == GNN_COLUMNS


def hybrid_input_names(sample: FeatureInput, gnn: bool, base: bool = False) -> list[str]:
    return [
        *matrix([sample], HYBRID_GROUPS)[1],
        *(BASE_COLUMNS if base else ()),
        *(GNN_COLUMNS if gnn else ()),
    ]


def hybrid_matrix(
    items: Sequence[FeatureInput],
    gnn: tuple[NDArray[np.float64], NDArray[np.float64]] | None,
    names: Sequence[str],
    bases: Mapping[str, NDArray[np.float64]],
) -> NDArray[np.float64]:
    """The hybrid's inputs, in the order of ``names`` (bases, then the GNN's estimates)."""
    plain = [n for n in names if n not in BASE_COLUMNS and n not in GNN_COLUMNS]
    columns = [matrix(items, HYBRID_GROUPS, plain)[0]]
    if BASE_COLUMNS[0] in names:
        columns += [bases["iteration_s"][:, None], bases["peak_memory_mb"][:, None]]
    if gnn is not None:
        columns += [gnn[0][:, None], gnn[1][:, None]]
    return np.column_stack(columns)


def example_inputs(examples: Sequence[Example], store: GraphStore) -> list[FeatureInput]:
    return [
        FeatureInput(
            family=e.family,
            params=e.params,
            batch_size=e.batch_size,
            optimizer=e.optimizer,
            hardware=e.hardware,
            summary=store.get(e.key).summary,
        )
        for e in examples
    ]


def split_validation(
    examples: Sequence[Example], fraction: float, seed: int
) -> tuple[list[Example], list[Example]]:
    """(fit, validation): a random ``fraction`` of configurations, repeats kept together."""
    keys = sorted({e.config_key for e in examples})
    rng = np.random.default_rng(seed)
    chosen = set(rng.choice(keys, size=max(1, int(len(keys) * fraction)), replace=False))
    fit = [e for e in examples if e.config_key not in chosen]
    return fit, [e for e in examples if e.config_key in chosen]


def config_folds(
    examples: Sequence[Example], validation: Sequence[Example], folds: int, seed: int
) -> list[list[Example]]:
    """``validation`` and ``folds - 1`` more folds of the other configurations (repeats
    kept together), of similar sizes: every example in exactly one fold."""
    first = {e.config_key for e in validation}
    keys = sorted({e.config_key for e in examples} - first)
    order = np.random.default_rng(seed + 2).permutation(len(keys))
    fold_of = {keys[index]: 1 + rank % (folds - 1) for rank, index in enumerate(order)}
    out: list[list[Example]] = [list(validation)] + [[] for _ in range(folds - 1)]
    for e in examples:
        if e.config_key not in first:
            out[fold_of[e.config_key]].append(e)
    return [fold for fold in out if fold]


def family_folds(examples: Sequence[Example], folds: int | None = None) -> list[list[str]]:
    """Families of ``examples`` in folds for new-family validation.

    ``None``: one fold per family group (linked families, ``LINKED_FAMILIES``, form one
    group; every other family is its own). A number: at most that many folds of similar
    row counts, linked families in one fold. Fewer than two groups: none.
    """
    group_of = {family: group[0] for group in LINKED_FAMILIES for family in group}
    rows = Counter(group_of.get(e.family, e.family) for e in examples)
    members: dict[str, set[str]] = {}
    for e in examples:
        members.setdefault(group_of.get(e.family, e.family), set()).add(e.family)
    count = len(rows) if folds is None else min(folds, len(rows))
    if count < 2:
        return []
    buckets: list[list[str]] = [[] for _ in range(count)]
    sizes = [0] * count
    for group, n in sorted(rows.items(), key=lambda kv: (-kv[1], kv[0])):
        index = sizes.index(min(sizes))
        buckets[index] += sorted(members[group])
        sizes[index] += n
    return [sorted(b) for b in buckets]


def _domain(examples: Sequence[Example], items: Sequence[FeatureInput]) -> Domain:
    flops = [
        math.log(i.summary.get("forward_flops", 0.0) + i.summary.get("backward_flops", 0.0) + 1)
        for i in items
    ]
    return Domain(
        families=sorted({e.family for e in examples}),
        cpu_models=sorted({e.cpu_model for e in examples}),
        cpu_isas=sorted({e.cpu_isa for e in examples if e.cpu_isa}),
        threads=sorted({e.threads for e in examples}),
        batch_min=min(e.batch_size for e in examples),
        batch_max=max(e.batch_size for e in examples),
        log_flops_min=min(flops),
        log_flops_max=max(flops),
    )


def _targets(examples: Sequence[Example]) -> dict[str, NDArray[np.float64]]:
    return {
        "iteration_s": np.log([e.iteration_s for e in examples]),
        "peak_memory_mb": np.log([e.peak_memory_mb for e in examples]),
    }


def _fit_models(
    fit: Sequence[Example],
    store: GraphStore,
    *,
    kinds: Sequence[str],
    seed: int,
    gnn_epochs: int,
    xgb_rounds: int,
    hybrid_gnn: bool,
    hybrid_params: Mapping[str, Any] | None = None,
    hybrid_base: str = HYBRID_BASE,
) -> EstimatorBundle:
    """The three kinds fitted on ``fit`` (no calibration, no choice)."""
    fit_items = example_inputs(fit, store)
    targets = _targets(fit)
    bundle = EstimatorBundle()
    bundle.meta.training_rows = len(fit)

    if "blackbox" in kinds:
        x, names = matrix(fit_items, BLACKBOX_GROUPS)
        bundle.meta.blackbox_names = names
        for target, y in targets.items():
            bundle.blackbox[target] = fit_quantiles(x, y, names, rounds=xgb_rounds)

    fit_samples = [_sample(i, store.get(e.key), e) for i, e in zip(fit_items, fit, strict=True)]
    oof: tuple[NDArray[np.float64], NDArray[np.float64]] | None = None
    if "whitebox" in kinds or ("hybrid" in kinds and hybrid_gnn):
        rng = np.random.default_rng(seed + 1)
        halves = rng.permutation(len(fit_samples)) % 2
        oof_time = np.zeros(len(fit_samples))
        oof_memory = np.zeros(len(fit_samples))
        for half in (0, 1):
            train_idx = np.flatnonzero(halves == half)
            other = np.flatnonzero(halves != half)
            gnn = fit_gnn([fit_samples[i] for i in train_idx], epochs=gnn_epochs, seed=seed + half)
            bundle.gnns.append(gnn)
            t, m, _ = gnn.predict([fit_samples[i] for i in other])
            oof_time[other], oof_memory[other] = t, m
        oof = (oof_time, oof_memory)

    if "hybrid" in kinds and (oof is not None or not hybrid_gnn):
        linear = hybrid_base == "linear"
        bundle.meta.hybrid_base = fit_linear_base(fit, fit_items) if linear else {}
        bases = base_logs(fit_items, bundle.meta.hybrid_base)
        names = hybrid_input_names(fit_items[0], hybrid_gnn, base=linear)
        memory_names = hybrid_input_names(
            fit_items[0], hybrid_gnn and HYBRID_MEMORY_GNN, base=linear
        )
        bundle.meta.hybrid_names = names
        bundle.meta.hybrid_memory_names = memory_names if memory_names != names else []
        for target, y in targets.items():
            inputs = bundle.meta.hybrid_inputs(target)
            own = oof if _hybrid_uses_gnn(inputs) else None
            x = hybrid_matrix(fit_items, own, inputs, bases)
            bundle.hybrid[target] = fit_quantiles(
                x,
                y - bases[target],
                inputs,
                rounds=xgb_rounds,
                params=dict(HYBRID_PARAMS if hybrid_params is None else hybrid_params),
            )
    return bundle


def raw_quantiles(
    fit: Sequence[Example],
    predict: Sequence[Example],
    store: GraphStore,
    *,
    kinds: Sequence[str] = KINDS,
    seed: int = 0,
    gnn_epochs: int = 60,
    xgb_rounds: int = 600,
    hybrid_gnn: bool = HYBRID_GNN,
    hybrid_base: str = HYBRID_BASE,
) -> dict[str, dict[str, NDArray[np.float64]]]:
    """target -> kind -> uncalibrated log quantiles (rows x 3) on ``predict`` of the
    kinds fitted on ``fit``: for validation studies (``benchmarks/estimators.py
    --base-study``)."""
    bundle = _fit_models(
        fit,
        store,
        kinds=kinds,
        seed=seed,
        gnn_epochs=gnn_epochs,
        xgb_rounds=xgb_rounds,
        hybrid_gnn=hybrid_gnn,
        hybrid_base=hybrid_base,
    )
    return _raw_on(bundle, predict, store, kinds)


def _raw_on(
    bundle: EstimatorBundle, examples: Sequence[Example], store: GraphStore, kinds: Sequence[str]
) -> dict[str, dict[str, NDArray[np.float64]]]:
    items = example_inputs(examples, store)
    samples = [_sample(i, store.get(e.key), e) for i, e in zip(items, examples, strict=True)]
    return bundle._raw(items, samples, kinds)


def _pooled(
    raws: Sequence[dict[str, dict[str, NDArray[np.float64]]]],
) -> dict[str, dict[str, NDArray[np.float64]]]:
    """Per-fold raw quantiles (target -> kind -> rows x 3) stacked in fold order."""
    return {
        target: {kind: np.concatenate([r[target][kind] for r in raws]) for kind in raws[0][target]}
        for target in TARGETS
    }


def _regime(
    method: str,
    raw: dict[str, dict[str, NDArray[np.float64]]],
    truth_log: dict[str, NDArray[np.float64]],
) -> Regime:
    """Calibrate, score and rank every kind (HARP's rule on the calibrated p90; where
    two are tied on both of its criteria, the p50's MAPE decides: ``selection``)."""
    regime = Regime(method=method, rows=int(next(iter(truth_log.values())).size))
    for target, y in truth_log.items():
        regime.calibration[target] = {}
        regime.validation[target] = {}
        points: dict[str, NDArray[np.float64]] = {}
        central: dict[str, NDArray[np.float64]] = {}
        for kind, q in raw[target].items():
            calibration = calibrate(q, y)
            regime.calibration[target][kind] = calibration
            calibrated = np.exp(calibration.apply(q))
            regime.validation[target][kind] = score(
                calibrated[:, 1], np.exp(y), calibrated[:, 0], calibrated[:, 2]
            )
            points[kind] = calibrated[:, 2]
            central[kind] = calibrated[:, 1]
        if points:
            ranking = harp_select(points, np.exp(y), central=central)
            regime.ranking[target] = ranking
            regime.selected[target] = ranking[0].name
    return regime


def train_bundle(
    examples: Sequence[Example],
    store: GraphStore,
    *,
    kinds: Sequence[str] = KINDS,
    validation_fraction: float = 0.2,
    family_validation_folds: int | None = None,
    seed: int = 0,
    gnn_epochs: int = 60,
    xgb_rounds: int = 600,
    hybrid_gnn: bool = HYBRID_GNN,
    hybrid_params: Mapping[str, Any] | None = None,
    hybrid_base: str = HYBRID_BASE,
    in_family_min_rows: int = IN_FAMILY_MIN_ROWS,
) -> EstimatorBundle:
    """Fit, calibrate and rank the estimators on ``examples`` (graphs must be in ``store``).

    The estimators are fitted on ``1 - validation_fraction`` of the configurations;
    the rest validate them in-family (with fewer than ``in_family_min_rows`` rows there,
    every configuration is predicted out of fold: ``config_folds``). Then, for new
    families, every kind is refitted once per fold of families (``family_folds``: by
    default one per family group, or ``family_validation_folds`` folds), each time
    without that fold, and judged on the fold it did not see (0: in-family validation
    only).
    """
    fit, validation = split_validation(examples, validation_fraction, seed)
    fit_models = partial(
        _fit_models,
        store=store,
        kinds=kinds,
        seed=seed,
        gnn_epochs=gnn_epochs,
        xgb_rounds=xgb_rounds,
        hybrid_gnn=hybrid_gnn,
        hybrid_params=hybrid_params,
        hybrid_base=hybrid_base,
    )
    bundle = fit_models(fit)
    bundle.meta.domain = _domain(examples, example_inputs(examples, store))
    bundle.meta.validation_rows = len(validation)

    in_family: Regime | None = None
    if validation and len(validation) < in_family_min_rows and len(fit) > len(validation):
        count = max(2, round(1 / validation_fraction))
        parts = config_folds(examples, validation, count, seed)
        in_raws = [_raw_on(bundle, validation, store, kinds)]
        for number, part in enumerate(parts[1:], start=2):
            log.info("in-family validation, fold %d/%d: %d rows", number, len(parts), len(part))
            keys = {e.config_key for e in part}
            fold_bundle = fit_models([e for e in examples if e.config_key not in keys])
            in_raws.append(_raw_on(fold_bundle, part, store, kinds))
        in_family = _regime(
            f"in family: {len(parts)} folds of the configurations, each predicted by the "
            "kinds fitted without it",
            _pooled(in_raws),
            _targets([e for part in parts for e in part]),
        )
    elif validation:
        in_family = _regime(
            f"in family: a random {validation_fraction:.0%} of the configurations",
            _raw_on(bundle, validation, store, kinds),
            _targets(validation),
        )
    folds = family_folds(examples, family_validation_folds) if family_validation_folds != 0 else []
    new_family: Regime | None = None
    if folds:
        raws: list[dict[str, dict[str, NDArray[np.float64]]]] = []
        held: list[Example] = []
        for number, fold in enumerate(folds):
            log.info("family-held-out validation, fold %d/%d: %s", number + 1, len(folds), fold)
            inside = [e for e in examples if e.family not in fold]
            outside = [e for e in examples if e.family in fold]
            fold_bundle = fit_models(inside)
            raws.append(_raw_on(fold_bundle, outside, store, kinds))
            held += outside
        new_family = _regime(
            f"new families: {len(folds)} folds of whole families held out",
            _pooled(raws),
            _targets(held),
        )
        bundle.meta.validation_folds = folds
    headline = new_family or in_family
    if headline is None:
        return bundle
    bundle.meta.calibration = headline.calibration
    bundle.meta.selected = headline.selected
    bundle.meta.ranking = headline.ranking
    bundle.meta.validation = headline.validation
    bundle.meta.validation_method = headline.method
    bundle.meta.validation_rows = headline.rows
    bundle.meta.in_family = in_family if new_family is not None else None
    return bundle
