"""A Gaussian copula per job class (user x size class), with empirical or KDE marginals.

For each class the five model columns (gap, processors, request, run fraction, status)
keep their own distributions (the marginals) and are tied together by a Gaussian
copula: each column is mapped to normal scores through its empirical CDF, the scores'
correlation matrix is the joint structure, and sampling goes back the other way
(correlated normals -> uniforms -> each column's quantile function).

Choices, and why:

- Ties (processors and requests are mostly a few round values) get randomized
  probability-integral transforms when fitting, so the normal scores are continuous and
  their correlations unbiased; sampling through a step quantile function gives the
  point masses back exactly.
- Small classes estimate a correlation matrix from few rows: it is shrunk towards the
  correlation of the whole trace with weight ``shrinkage_jobs / (jobs + shrinkage_jobs)``.
- ``empirical`` marginals keep at most ``max_quantiles`` quantiles per column and class
  (values seen in training only). ``kde`` smooths continuous columns with a Gaussian KDE
  in log space (scipy's Scott bandwidth), keeping values that hold >= 0.5% of a class's
  rows as exact atoms (the killed jobs' run fraction of 1, round requests).
"""

from __future__ import annotations

import time
from typing import Any, Literal

import numpy as np
import torch
from scipy import special, stats

from knowledge_base.errors import InvalidInputError
from simulations.synth.columns import COLUMN_KINDS, MODEL_COLUMNS, TRANSFORMS, Trace
from simulations.synth.columns import transform_forward as _forward
from simulations.synth.columns import transform_inverse as _inverse
from simulations.synth.generator import SynthMetadata, training_data
from simulations.synth.model_state import state_errors

__all__ = ["CopulaModel", "Marginal"]

Marginal = Literal["empirical", "kde"]
_ATOM_SHARE = 0.005
_KDE_GRID = 2048
_KDE_POINTS = 2000


def _normal_scores(column: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Randomized PIT: a tie spreads uniformly over its CDF jump, then to N(0, 1)."""
    n = column.size
    ordered = np.sort(column)
    low = np.searchsorted(ordered, column, side="left") / n
    high = np.searchsorted(ordered, column, side="right") / n
    u = low + rng.random(n) * (high - low)
    scores: np.ndarray = special.ndtri(np.clip(u, 0.5 / n, 1 - 0.5 / n))
    return scores


def _correlation(scores: np.ndarray) -> np.ndarray:
    d = scores.shape[1]
    if scores.shape[0] < 3:
        return np.eye(d)
    with np.errstate(invalid="ignore", divide="ignore"):
        corr = np.corrcoef(scores, rowvar=False)
    out: np.ndarray = np.nan_to_num(np.atleast_2d(corr), nan=0.0)
    np.fill_diagonal(out, 1.0)
    return out


def _nearest_correlation(corr: np.ndarray) -> np.ndarray:
    """Clip eigenvalues so the matrix factors, then put ones back on the diagonal."""
    sym = (corr + corr.T) / 2
    values, vectors = np.linalg.eigh(sym)
    fixed = (vectors * np.maximum(values, 1e-6)) @ vectors.T
    scale = np.sqrt(np.diag(fixed))
    out: np.ndarray = fixed / np.outer(scale, scale)
    return out


def _empirical_quantiles(values: np.ndarray, max_quantiles: int) -> np.ndarray:
    q = min(values.size, max_quantiles)
    probs = (np.arange(q) + 0.5) / q
    out: np.ndarray = np.quantile(values, probs, method="inverted_cdf")
    return out


def _kde_quantiles(values: np.ndarray, column: str, max_quantiles: int) -> np.ndarray:
    """Quantiles of (exact atoms) + (1 - atom share) x (Gaussian KDE of the rest, in log)."""
    transform = TRANSFORMS[column]
    unique, counts = np.unique(values, return_counts=True)
    shares = counts / values.size
    atoms, atom_shares = unique[shares >= _ATOM_SHARE], shares[shares >= _ATOM_SHARE]
    rest = np.sort(_forward(transform, values[~np.isin(values, atoms)]))
    if rest.size < 3 or np.ptp(rest) == 0:
        return _empirical_quantiles(values, max_quantiles)
    bandwidth = float(np.sqrt(stats.gaussian_kde(rest).covariance[0, 0]))
    points = rest[np.linspace(0, rest.size - 1, min(rest.size, _KDE_POINTS)).astype(int)]
    grid = np.linspace(rest[0] - 3 * bandwidth, rest[-1] + 3 * bandwidth, _KDE_GRID)
    smooth_cdf = special.ndtr((grid[:, None] - points[None, :]) / bandwidth).mean(axis=1)
    atom_points = _forward(transform, atoms)
    support = np.concatenate([grid, atom_points])
    exact = np.concatenate([np.full(grid.size, np.nan), atoms])
    order = np.argsort(support, kind="stable")
    support, exact = support[order], exact[order]
    cdf = (1 - atom_shares.sum()) * np.interp(support, grid, smooth_cdf)
    cdf += np.array([atom_shares[atom_points <= y].sum() for y in support])
    q = max_quantiles
    probs = (np.arange(q) + 0.5) / q
    picks = np.minimum(np.searchsorted(cdf, probs, side="left"), support.size - 1)
    chosen = exact[picks]
    out: np.ndarray = np.where(np.isnan(chosen), _inverse(transform, support[picks]), chosen)
    return np.sort(out)


class CopulaModel:
    """Per-class Gaussian copulas: ``correlations[c]`` and ``quantiles[c][column]``."""

    def __init__(
        self,
        metadata: SynthMetadata,
        correlations: list[np.ndarray],
        quantiles: list[list[np.ndarray]],
    ) -> None:
        if len(correlations) != len(metadata.classes.classes) or len(quantiles) != len(
            correlations
        ):
            raise InvalidInputError(
                "the copula has a different number of classes than its metadata",
                field="classes",
                value=len(correlations),
            )
        d = len(MODEL_COLUMNS)
        for index, (corr, tables) in enumerate(zip(correlations, quantiles, strict=True)):
            if corr.shape != (d, d) or len(tables) != d or any(t.size == 0 for t in tables):
                raise InvalidInputError(
                    f"class {index}: expected a {d}x{d} correlation and {d} quantile tables",
                    field="classes",
                    value=index,
                )
        self.metadata = metadata
        self.correlations = correlations
        self.quantiles = quantiles
        self._factors = [np.linalg.cholesky(_nearest_correlation(c)) for c in correlations]

    @classmethod
    def fit(
        cls,
        trace: Trace,
        *,
        seed: int = 0,
        min_class_jobs: int = 30,
        marginal: Marginal = "empirical",
        max_quantiles: int = 1000,
        shrinkage_jobs: int = 30,
    ) -> CopulaModel:
        if marginal not in ("empirical", "kde"):
            raise InvalidInputError(
                "unknown marginal; use empirical or kde", field="marginal", value=marginal
            )
        if max_quantiles < 2:
            raise InvalidInputError(
                "keep at least two quantiles", field="max_quantiles", value=max_quantiles
            )
        began = time.perf_counter()
        rng = np.random.default_rng(seed)
        data = training_data(trace, min_class_jobs=min_class_jobs)
        matrix, labels = data.matrix, data.labels
        pooled = _correlation(
            np.column_stack([_normal_scores(matrix[:, k], rng) for k in range(matrix.shape[1])])
        )
        correlations: list[np.ndarray] = []
        quantiles: list[list[np.ndarray]] = []
        for index in range(len(data.scheme.classes)):
            rows = matrix[labels == index]
            scores = np.column_stack(
                [_normal_scores(rows[:, k], rng) for k in range(rows.shape[1])]
            )
            n = rows.shape[0]
            corr = (n * _correlation(scores) + shrinkage_jobs * pooled) / (n + shrinkage_jobs)
            correlations.append(_nearest_correlation(corr))
            tables = []
            for k, column in enumerate(MODEL_COLUMNS):
                if marginal == "kde" and COLUMN_KINDS[column] == "continuous":
                    tables.append(_kde_quantiles(rows[:, k], column, max_quantiles))
                else:
                    tables.append(_empirical_quantiles(rows[:, k], max_quantiles))
            quantiles.append(tables)
        metadata = SynthMetadata.of_training(
            trace,
            data,
            kind="copula",
            seed=seed,
            fit_seconds=time.perf_counter() - began,
            options={
                "min_class_jobs": min_class_jobs,
                "marginal": marginal,
                "max_quantiles": max_quantiles,
                "shrinkage_jobs": shrinkage_jobs,
            },
        )
        return cls(metadata, correlations, quantiles)

    def sample_rows(self, labels: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        d = len(MODEL_COLUMNS)
        out = np.empty((labels.size, d), dtype=np.float64)
        for index, factor in enumerate(self._factors):
            rows = np.flatnonzero(labels == index)
            if rows.size == 0:
                continue
            u = special.ndtr(rng.standard_normal((rows.size, d)) @ factor.T)
            for k, table in enumerate(self.quantiles[index]):
                picks = np.minimum((u[:, k] * table.size).astype(np.int64), table.size - 1)
                out[rows, k] = table[picks]
        return out

    def state(self) -> dict[str, Any]:
        return {
            "correlations": [torch.from_numpy(c.copy()) for c in self.correlations],
            "quantiles": [[torch.from_numpy(t.copy()) for t in ts] for ts in self.quantiles],
        }

    @classmethod
    def from_state(cls, metadata: SynthMetadata, state: dict[str, Any]) -> CopulaModel:
        with state_errors("copula"):
            correlations = [c.double().numpy() for c in state["correlations"]]
            quantiles = [[t.double().numpy() for t in ts] for ts in state["quantiles"]]
        return cls(metadata, correlations, quantiles)
