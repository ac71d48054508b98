"""Training, selecting, saving and loading the DNN estimators as one bundle.

A bundle holds, for each target (``iteration_s``, ``peak_memory_mb``), three
estimators fitted on the same training rows and judged on the same validation rows
(20% of the configurations, repeats kept together, never used for fitting):

- ``blackbox``: XGBoost quantiles over the tabular features (HARP's tabular model);
- ``whitebox``: the op-graph GNN (two networks, each fitted on half the rows; their
  mean is the estimate);
- ``hybrid``: XGBoost quantiles over hardware, op-graph totals, the analytic estimates
  and the GNN's estimate, predicting the log-ratio of the truth to the analytic estimate
  (a learned correction of the analytic model: trees cannot extrapolate, ratios need
  not). The GNN estimate it learns from is out-of-fold (each half's network predicts
  the other half), so the hybrid never learns to trust an over-fitted input.

Validation calibrates each estimator's interval (``calibration``) and ranks them by
HARP's rule on the calibrated p90 (``selection``); the first is the bundle's choice for
that target. The
bundle also records its domain (families, CPU models, threads, batch sizes), which is
where the planner adapter lets it answer.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np
from numpy.typing import NDArray
from pydantic import BaseModel, ConfigDict, Field

from tools.estimators.dnn.calibration import Calibration, calibrate
from tools.estimators.dnn.dataset import Example, GraphData, GraphStore
from tools.estimators.dnn.features import FeatureInput, analytic_estimates, matrix
from tools.estimators.dnn.gnn import GNNModel, GraphSample, fit_gnn
from tools.estimators.dnn.metrics import Scores, score
from tools.estimators.dnn.quantile import QuantileModel, fit_quantiles
from tools.estimators.dnn.selection import Ranked, harp_select

__all__ = [
    "KINDS",
    "TARGETS",
    "BundleMeta",
    "Domain",
    "EstimatorBundle",
    "Prediction",
    "example_inputs",
    "split_validation",
    "train_bundle",
]

Kind = Literal["blackbox", "whitebox", "hybrid"]
KINDS: tuple[Kind, ...] = ("blackbox", "whitebox", "hybrid")
TARGETS = ("iteration_s", "peak_memory_mb")
BLACKBOX_GROUPS = ("tabular",)
HYBRID_GROUPS = ("hardware", "graph", "analytic")


class Domain(BaseModel):
    """Where a bundle's training data came from: what it may speak for."""

    model_config = ConfigDict(extra="forbid")

    families: list[str]
    cpu_models: list[str]
    threads: list[int]
    batch_min: int
    batch_max: int
    log_flops_min: float
    log_flops_max: float


class BundleMeta(BaseModel):
    """Everything but the model weights: calibration, choice, scores, domain."""

    model_config = ConfigDict(extra="forbid")

    calibration: dict[str, dict[str, Calibration]] = Field(
        default_factory=dict, description="target -> kind -> calibration"
    )
    selected: dict[str, str] = Field(default_factory=dict, description="target -> kind")
    ranking: dict[str, list[Ranked]] = Field(default_factory=dict)
    validation: dict[str, dict[str, Scores]] = Field(default_factory=dict)
    blackbox_names: list[str] = Field(default_factory=list)
    hybrid_names: list[str] = Field(default_factory=list)
    training_rows: int = 0
    validation_rows: int = 0
    domain: Domain | None = None


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

    def _gnn(self, samples: Sequence[GraphSample]) -> tuple[NDArray[np.float64], ...]:
        outputs = [gnn.predict(samples) for gnn in self.gnns]
        log_time = np.mean([o[0] for o in outputs], axis=0)
        log_memory = np.mean([o[1] for o in outputs], axis=0)
        return log_time, log_memory

    def predict(
        self,
        items: Sequence[FeatureInput],
        graphs: Sequence[GraphData],
        kinds: Sequence[str] = KINDS,
    ) -> dict[str, dict[str, Prediction]]:
        """target -> kind -> calibrated quantiles, for every kind asked that is trained."""
        samples = [_sample(item, graph) for item, graph in zip(items, graphs, strict=True)]
        raw = self._raw(items, samples, kinds)
        out: dict[str, dict[str, Prediction]] = {}
        for target, by_kind in raw.items():
            out[target] = {}
            for kind, q in by_kind.items():
                calibration = self.meta.calibration.get(target, {}).get(kind, Calibration())
                out[target][kind] = Prediction(kind, np.exp(calibration.apply(q)))
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
        if self.gnns and ("whitebox" in kinds or "hybrid" in kinds):
            gnn_time, gnn_memory = gnn_oof if gnn_oof is not None else self._gnn(samples)
            if "whitebox" in kinds:
                raw["iteration_s"]["whitebox"] = np.repeat(gnn_time[:, None], 3, axis=1)
                raw["peak_memory_mb"]["whitebox"] = np.repeat(gnn_memory[:, None], 3, axis=1)
            if "hybrid" in kinds and self.hybrid:
                x = _hybrid_matrix(items, gnn_time, gnn_memory, self.meta.hybrid_names)
                bases = _analytic_logs(items)
                for target in TARGETS:
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


def _hybrid_matrix(
    items: Sequence[FeatureInput],
    gnn_time: NDArray[np.float64],
    gnn_memory: NDArray[np.float64],
    names: Sequence[str] | None,
) -> NDArray[np.float64]:
    x, _ = matrix(items, HYBRID_GROUPS, None if names is None else names[:-2])
    return np.column_stack([x, gnn_time, gnn_memory])


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


def _domain(examples: Sequence[Example], items: Sequence[FeatureInput]) -> Domain:
    flops = [
        math.log(i.summary.get("forward_flops", 0.0) + i.summary.get("backward_flops", 0.0) + 1)
        for i in items
    ]
    return Domain(
        families=sorted({e.family for e in examples}),
        cpu_models=sorted({e.cpu_model for e in examples}),
        threads=sorted({e.threads for e in examples}),
        batch_min=min(e.batch_size for e in examples),
        batch_max=max(e.batch_size for e in examples),
        log_flops_min=min(flops),
        log_flops_max=max(flops),
    )


def train_bundle(
    examples: Sequence[Example],
    store: GraphStore,
    *,
    kinds: Sequence[str] = KINDS,
    validation_fraction: float = 0.2,
    seed: int = 0,
    gnn_epochs: int = 60,
    xgb_rounds: int = 600,
) -> EstimatorBundle:
    """Fit, calibrate and rank the estimators on ``examples`` (graphs must be in ``store``)."""
    fit, validation = split_validation(examples, validation_fraction, seed)
    fit_items = example_inputs(fit, store)
    val_items = example_inputs(validation, store)
    targets = {
        "iteration_s": (
            np.log([e.iteration_s for e in fit]),
            np.log([e.iteration_s for e in validation]),
        ),
        "peak_memory_mb": (
            np.log([e.peak_memory_mb for e in fit]),
            np.log([e.peak_memory_mb for e in validation]),
        ),
    }
    bundle = EstimatorBundle()
    bundle.meta.training_rows = len(fit)
    bundle.meta.validation_rows = len(validation)
    bundle.meta.domain = _domain(examples, [*fit_items, *val_items])

    if "blackbox" in kinds:
        x, names = matrix(fit_items, BLACKBOX_GROUPS)
        bundle.meta.blackbox_names = names
        for target, (y, _) in targets.items():
            bundle.blackbox[target] = fit_quantiles(x, y, names, rounds=xgb_rounds)

    fit_samples = [_sample(i, store.get(e.key), e) for i, e in zip(fit_items, fit, strict=True)]
    val_samples = [
        _sample(i, store.get(e.key), e) for i, e in zip(val_items, validation, strict=True)
    ]
    oof: tuple[NDArray[np.float64], NDArray[np.float64]] | None = None
    if "whitebox" in kinds or "hybrid" in kinds:
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

    if "hybrid" in kinds and oof is not None:
        x = _hybrid_matrix(fit_items, oof[0], oof[1], None)
        names = [*matrix(fit_items[:1], HYBRID_GROUPS)[1], "gnn_log_time", "gnn_log_memory"]
        bundle.meta.hybrid_names = names
        bases = _analytic_logs(fit_items)
        for target, (y, _) in targets.items():
            bundle.hybrid[target] = fit_quantiles(x, y - bases[target], names, rounds=xgb_rounds)

    if not validation:
        return bundle
    raw = bundle._raw(val_items, val_samples, kinds)
    for target, (_, y_val) in targets.items():
        bundle.meta.calibration[target] = {}
        bundle.meta.validation[target] = {}
        points: dict[str, NDArray[np.float64]] = {}
        for kind, q in raw[target].items():
            calibration = calibrate(q, y_val)
            bundle.meta.calibration[target][kind] = calibration
            calibrated = np.exp(calibration.apply(q))
            truth = np.exp(y_val)
            bundle.meta.validation[target][kind] = score(
                calibrated[:, 1], truth, calibrated[:, 0], calibrated[:, 2]
            )
            points[kind] = calibrated[:, 2]
        ranking = harp_select(points, np.exp(y_val))
        bundle.meta.ranking[target] = ranking
        bundle.meta.selected[target] = ranking[0].name
    return bundle
