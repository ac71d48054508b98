"""A TVAE-style tabular VAE in plain torch, conditioned on the job class.

After Xu et al., "Modeling Tabular Data using Conditional GAN" (NeurIPS 2019), whose
TVAE seed 003 trained through the SDV library; that library's licence is not open
source, so this is a small re-implementation of the same recipe:

- **Mode-specific normalization** of continuous columns (gap, request, run fraction),
  in log space: a value is the mode it belongs to (one-hot) plus its offset inside that
  mode, ``(y - mean) / (4 std)`` in [-1, 1]. Modes come from a 1-D Gaussian mixture
  fitted by EM (components under 0.5% weight dropped, as TVAE's Bayesian mixture does),
  plus **atoms**: values holding >= 0.5% of the rows (a request of exactly 3600 s, the
  run fraction 1.0 of a job killed at its limit) are modes of their own with no offset,
  so they come back exact rather than smeared around the value.
- Processors (when a trace has at most 256 distinct sizes) and status are categorical.
- The class (user x size class, :mod:`simulations.synth.classes`) is an embedding fed to
  both encoder and decoder: a conditional VAE, so sampling "user 42's small jobs" is
  asking the decoder for that class.
- Loss: cross-entropy on every one-hot part, a Gaussian likelihood with a learned sigma
  on each offset (TVAE's), and the KL term; Adam with weight decay 1e-5.

Fitting and sampling are deterministic for a seed on one machine: initial weights come
from a forked, seeded torch RNG; shuffling and noise from ``torch.Generator`` objects.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn import functional

from knowledge_base.errors import InvalidInputError
from simulations.synth.columns import COLUMN_KINDS, MODEL_COLUMNS, TRANSFORMS, Trace
from simulations.synth.columns import transform_forward as _forward
from simulations.synth.columns import transform_inverse as _inverse
from simulations.synth.generator import SynthMetadata, training_data
from simulations.synth.model_state import state_errors

__all__ = ["TVAEModel"]

log = logging.getLogger(__name__)


def require_at_least_one(**settings: int) -> None:
    """A model setting below 1 is an input error naming it."""
    for name, value in settings.items():
        if value < 1:
            raise InvalidInputError(f"{name} must be at least 1", field=name, value=value)


@contextmanager
def one_thread() -> Iterator[None]:
    """Run torch on one thread, then restore the setting.

    The network is small (two 128-wide layers): a thread pool buys nothing and, on a
    shared CPU, its workers spin against other processes. On the 2-core development VM
    one training step took 2.4 ms on one thread and 111 ms on two.
    """
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


_ATOM_SHARE = 0.005
_MAX_ATOMS = 32
_MIN_MODE_WEIGHT = 0.005
_MAX_CATEGORIES = 256
_EM_ROWS = 20_000
_EM_ITERATIONS = 60
_SAMPLE_BATCH = 50_000


@dataclass
class _Mixed:
    """A continuous column: atoms (exact values) then Gaussian modes (in transformed space)."""

    name: str
    atoms: np.ndarray
    means: np.ndarray
    stds: np.ndarray

    @property
    def modes(self) -> int:
        return int(self.atoms.size + self.means.size)

    def encode(self, raw: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        mode = np.zeros(raw.size, dtype=np.int64)
        offset = np.zeros(raw.size, dtype=np.float64)
        is_atom = np.zeros(raw.size, dtype=bool)
        for index, value in enumerate(self.atoms):
            hit = raw == value
            mode[hit] = index
            is_atom |= hit
        rest = ~is_atom
        if rest.any():
            if self.means.size == 0:
                # No continuous part was fitted: the nearest atom stands in.
                mode[rest] = np.abs(raw[rest, None] - self.atoms[None, :]).argmin(axis=1)
            else:
                y = _forward(TRANSFORMS[self.name], raw[rest])
                density = -0.5 * ((y[:, None] - self.means) / self.stds) ** 2 - np.log(self.stds)
                best = density.argmax(axis=1)
                mode[rest] = self.atoms.size + best
                offset[rest] = np.clip((y - self.means[best]) / (4 * self.stds[best]), -0.99, 0.99)
        return mode, offset

    def decode(self, mode: np.ndarray, offset: np.ndarray) -> np.ndarray:
        out = np.empty(mode.size, dtype=np.float64)
        is_atom = mode < self.atoms.size
        out[is_atom] = self.atoms[mode[is_atom]]
        if (~is_atom).any():
            k = mode[~is_atom] - self.atoms.size
            y = self.means[k] + offset[~is_atom] * 4 * self.stds[k]
            out[~is_atom] = _inverse(TRANSFORMS[self.name], y)
        return out


@dataclass
class _Categorical:
    name: str
    values: np.ndarray

    @property
    def modes(self) -> int:
        return int(self.values.size)

    def encode(self, raw: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return np.searchsorted(self.values, raw).astype(np.int64), np.zeros(raw.size)

    def decode(self, mode: np.ndarray, offset: np.ndarray) -> np.ndarray:
        out: np.ndarray = self.values[mode].astype(np.float64)
        return out


_Column = _Mixed | _Categorical


def _fit_mixture(
    y: np.ndarray, max_modes: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """1-D Gaussian mixture by EM; returns the means and stds of modes worth keeping."""
    if y.size == 0:
        return np.zeros(0), np.zeros(0)
    if y.size > _EM_ROWS:
        y = rng.choice(y, size=_EM_ROWS, replace=False)
    spread = float(y.std()) or 1.0
    k = int(min(max_modes, np.unique(y).size))
    means = np.quantile(y, (np.arange(k) + 0.5) / k)
    floor = max(1e-3, 1e-3 * spread)
    stds = np.full(k, max(spread / k, floor))
    weights = np.full(k, 1.0 / k)
    for _ in range(_EM_ITERATIONS):
        logp = -0.5 * ((y[:, None] - means) / stds) ** 2 - np.log(stds) + np.log(weights)
        logp -= logp.max(axis=1, keepdims=True)
        resp = np.exp(logp)
        resp /= resp.sum(axis=1, keepdims=True)
        mass = resp.sum(axis=0) + 1e-12
        weights = mass / y.size
        means = (resp * y[:, None]).sum(axis=0) / mass
        stds = np.sqrt(np.maximum((resp * (y[:, None] - means) ** 2).sum(axis=0) / mass, floor**2))
    keep = weights >= _MIN_MODE_WEIGHT
    return means[keep], stds[keep]


def _fit_column(name: str, raw: np.ndarray, max_modes: int, rng: np.random.Generator) -> _Column:
    unique, counts = np.unique(raw, return_counts=True)
    if COLUMN_KINDS[name] == "categorical" or (
        COLUMN_KINDS[name] == "discrete" and unique.size <= _MAX_CATEGORIES
    ):
        return _Categorical(name, unique)
    shares = counts / raw.size
    top = np.argsort(-shares, kind="stable")[:_MAX_ATOMS]
    atoms = np.sort(unique[top][shares[top] >= _ATOM_SHARE])
    rest = raw[~np.isin(raw, atoms)]
    means, stds = _fit_mixture(_forward(TRANSFORMS[name], rest), max_modes, rng)
    if atoms.size + means.size == 0:
        atoms = unique[top[:1]]
    return _Mixed(name, atoms, means, stds)


class _Network(nn.Module):
    def __init__(
        self, data_dim: int, classes: int, class_dim: int, hidden: int, latent: int, offsets: int
    ) -> None:
        super().__init__()
        self.embed = nn.Embedding(classes, class_dim)
        self.encoder = nn.Sequential(
            nn.Linear(data_dim + class_dim, hidden),
            nn.ReLU(),
            nn.Linear(hidden, hidden),
            nn.ReLU(),
        )
        self.mu = nn.Linear(hidden, latent)
        self.logvar = nn.Linear(hidden, latent)
        self.decoder = nn.Sequential(
            nn.Linear(latent + class_dim, hidden),
            nn.ReLU(),
            nn.Linear(hidden, hidden),
            nn.ReLU(),
            nn.Linear(hidden, data_dim),
        )
        self.log_sigma = nn.Parameter(torch.full((max(offsets, 1),), math.log(0.1)))

    def decode(self, z: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.decoder(torch.cat([z, self.embed(labels)], dim=1))
        return out


class TVAEModel:
    """The fitted columns' encoders and the network."""

    def __init__(self, metadata: SynthMetadata, columns: list[_Column], network: _Network) -> None:
        self.metadata = metadata
        self.columns = columns
        self.network = network.eval()
        # Output layout: per column its mode logits, then (mixed only) one offset.
        self._segments: list[tuple[int, int, int]] = []  # (start, modes, offset index or -1)
        start, offsets = 0, 0
        for column in columns:
            if isinstance(column, _Mixed):
                self._segments.append((start, column.modes, offsets))
                start += column.modes + 1
                offsets += 1
            else:
                self._segments.append((start, column.modes, -1))
                start += column.modes
        self.data_dim = start
        self.offsets = offsets

    @staticmethod
    def _dims(columns: list[_Column]) -> tuple[int, int]:
        data_dim = sum(c.modes + (1 if isinstance(c, _Mixed) else 0) for c in columns)
        return data_dim, sum(isinstance(c, _Mixed) for c in columns)

    def _encode(self, matrix: np.ndarray) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """One-hot-and-offset rows, plus mode indices and offsets per column."""
        n = matrix.shape[0]
        x = np.zeros((n, self.data_dim), dtype=np.float32)
        modes = np.zeros((n, len(self.columns)), dtype=np.int64)
        offsets = np.zeros((n, max(self.offsets, 1)), dtype=np.float32)
        for k, (column, (start, count, slot)) in enumerate(
            zip(self.columns, self._segments, strict=True)
        ):
            mode, offset = column.encode(matrix[:, k])
            x[np.arange(n), start + mode] = 1.0
            modes[:, k] = mode
            if slot >= 0:
                x[:, start + count] = offset
                offsets[:, slot] = offset
        return torch.from_numpy(x), torch.from_numpy(modes), torch.from_numpy(offsets)

    def _loss(self, out: torch.Tensor, modes: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
        loss = out.new_zeros(())
        sigma = self.network.log_sigma.exp()
        for k, (column, (start, count, slot)) in enumerate(
            zip(self.columns, self._segments, strict=True)
        ):
            loss = loss + functional.cross_entropy(
                out[:, start : start + count], modes[:, k], reduction="sum"
            )
            if slot >= 0 and isinstance(column, _Mixed):
                # The offset only means something for rows in a Gaussian mode.
                gaussian = modes[:, k] >= column.atoms.size
                predicted = torch.tanh(out[:, start + count])
                error = (offsets[:, slot] - predicted) ** 2 / (2 * sigma[slot] ** 2)
                loss = loss + ((error + torch.log(sigma[slot])) * gaussian).sum()
        return loss

    @classmethod
    @one_thread()
    def fit(
        cls,
        trace: Trace,
        *,
        seed: int = 0,
        epochs: int = 60,
        batch_size: int = 500,
        hidden: int = 128,
        latent: int = 32,
        class_dim: int = 16,
        max_modes: int = 8,
        learning_rate: float = 1e-3,
        min_class_jobs: int = 30,
    ) -> TVAEModel:
        require_at_least_one(
            epochs=epochs,
            batch_size=batch_size,
            hidden=hidden,
            latent=latent,
            class_dim=class_dim,
            max_modes=max_modes,
        )
        began = time.perf_counter()
        rng = np.random.default_rng(seed)
        data = training_data(trace, min_class_jobs=min_class_jobs)
        columns = [
            _fit_column(name, data.matrix[:, k], max_modes, rng)
            for k, name in enumerate(MODEL_COLUMNS)
        ]
        data_dim, offsets = cls._dims(columns)
        classes = len(data.scheme.classes)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            network = _Network(data_dim, classes, class_dim, hidden, latent, offsets)
        options: dict[str, float | int | str | bool] = {
            "epochs": epochs,
            "batch_size": batch_size,
            "hidden": hidden,
            "latent": latent,
            "class_dim": class_dim,
            "max_modes": max_modes,
            "learning_rate": learning_rate,
            "min_class_jobs": min_class_jobs,
        }
        metadata = SynthMetadata.of_training(trace, data, kind="tvae", seed=seed, options=options)
        model = cls(metadata, columns, network)
        x, modes, offset = model._encode(data.matrix)
        labels = torch.from_numpy(data.labels.astype(np.int64))
        generator = torch.Generator().manual_seed(seed)
        optimizer = torch.optim.Adam(network.parameters(), lr=learning_rate, weight_decay=1e-5)
        network.train()
        n = x.shape[0]
        final = float("nan")
        for epoch in range(epochs):
            order = torch.randperm(n, generator=generator)
            total = 0.0
            for begin in range(0, n, batch_size):
                rows = order[begin : begin + batch_size]
                batch, label = x[rows], labels[rows]
                code = network.embed(label)
                hidden_state = network.encoder(torch.cat([batch, code], dim=1))
                mu, logvar = network.mu(hidden_state), network.logvar(hidden_state)
                noise = torch.randn(mu.shape, generator=generator)
                z = mu + noise * torch.exp(0.5 * logvar)
                out = network.decode(z, label)
                kl = -0.5 * torch.sum(1 + logvar - mu**2 - logvar.exp())
                loss = (2.0 * model._loss(out, modes[rows], offset[rows]) + kl) / rows.numel()
                optimizer.zero_grad()
                torch.autograd.backward(loss)
                optimizer.step()
                with torch.no_grad():
                    network.log_sigma.clamp_(math.log(0.01), 0.0)
                total += float(loss.detach()) * rows.numel()
            final = total / n
            log.info("tvae epoch %d/%d: loss %.4f", epoch + 1, epochs, final)
        network.eval()
        model.metadata = metadata.model_copy(
            update={
                "fit_seconds": time.perf_counter() - began,
                "options": {**options, "final_loss": round(final, 6)},
            }
        )
        return model

    @torch.no_grad()
    @one_thread()
    def sample_rows(self, labels: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        generator = torch.Generator().manual_seed(int(rng.integers(2**62)))
        latent = self.network.mu.out_features
        sigma = self.network.log_sigma.exp()
        out = np.empty((labels.size, len(self.columns)), dtype=np.float64)
        for begin in range(0, labels.size, _SAMPLE_BATCH):
            label = torch.from_numpy(labels[begin : begin + _SAMPLE_BATCH].astype(np.int64))
            z = torch.randn((label.numel(), latent), generator=generator)
            decoded = self.network.decode(z, label)
            for k, (column, (start, count, slot)) in enumerate(
                zip(self.columns, self._segments, strict=True)
            ):
                probs = torch.softmax(decoded[:, start : start + count], dim=1)
                mode = torch.multinomial(probs, 1, generator=generator).squeeze(1)
                offset = torch.zeros(label.numel())
                if slot >= 0:
                    noise = torch.randn(label.numel(), generator=generator)
                    offset = torch.tanh(decoded[:, start + count]) + sigma[slot] * noise
                    offset = offset.clamp(-1.0, 1.0)
                out[begin : begin + label.numel(), k] = column.decode(
                    mode.numpy(), offset.double().numpy()
                )
        return out

    def state(self) -> dict[str, Any]:
        columns: list[dict[str, Any]] = []
        for column in self.columns:
            if isinstance(column, _Mixed):
                columns.append(
                    {
                        "name": column.name,
                        "kind": "mixed",
                        "atoms": torch.from_numpy(column.atoms.astype(np.float64)),
                        "means": torch.from_numpy(column.means.astype(np.float64)),
                        "stds": torch.from_numpy(column.stds.astype(np.float64)),
                    }
                )
            else:
                columns.append(
                    {
                        "name": column.name,
                        "kind": "categorical",
                        "values": torch.from_numpy(column.values.astype(np.float64)),
                    }
                )
        return {"columns": columns, "network": self.network.state_dict()}

    @classmethod
    def from_state(cls, metadata: SynthMetadata, state: dict[str, Any]) -> TVAEModel:
        with state_errors("TVAE"):
            columns: list[_Column] = []
            for spec, name in zip(state["columns"], MODEL_COLUMNS, strict=True):
                if spec["name"] != name:
                    raise ValueError(f"column {spec['name']!r} where {name!r} belongs")
                if spec["kind"] == "mixed":
                    columns.append(
                        _Mixed(
                            name,
                            spec["atoms"].double().numpy(),
                            spec["means"].double().numpy(),
                            spec["stds"].double().numpy(),
                        )
                    )
                else:
                    columns.append(_Categorical(name, spec["values"].double().numpy()))
            options = metadata.options
            data_dim, offsets = cls._dims(columns)
            network = _Network(
                data_dim,
                len(metadata.classes.classes),
                int(options["class_dim"]),
                int(options["hidden"]),
                int(options["latent"]),
                offsets,
            )
            network.load_state_dict(state["network"], strict=True)
        return cls(metadata, columns, network)
