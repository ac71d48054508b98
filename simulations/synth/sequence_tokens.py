"""The sequence model's tokens: columns as categories, atoms and quantile bins, and the
widths of the history numbers the network sees (:mod:`simulations.synth.sequence`)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from simulations.synth.columns import COLUMN_KINDS, TRANSFORMS
from simulations.synth.columns import transform_forward as _forward
from simulations.synth.queue_state import QUEUE_NUMBERS

_ATOM_SHARE = 0.005
_MAX_ATOMS = 32
_MAX_CATEGORIES = 256
_QUANTILES = 33  # points of each bin's value table
_GRID = np.linspace(0, 1, _QUANTILES)
_LAST_GAPS = 2
_POSITION_BINS = 32  # where in the trace's span a job is (its busy and quiet months)
_SLOTS = 8  # the most recently active users a job may continue the session of
_SLOT_NUMERIC = 3  # per slot: present, log time since its user's last job, log session jobs
_HEADS = ("gap", "session", "class", "procs", "request", "fraction", "status")
# The job heads that may copy the class's previous job's token (its columns in class_previous).
_COPIED = ("procs", "request", "fraction")
# Of those, the ones whose value a repeated token repeats (a resubmission asks the same; it
# does not run the same), first in _COPIED's order.
_VALUE_COPIED = ("procs", "request")


@dataclass
class TokenColumn:
    """One model column as tokens: categories, or atoms then quantile bins (log space)."""

    name: str
    categories: np.ndarray  # categorical: the values; else the atoms
    categorical: bool
    edges: np.ndarray  # inner bin edges in transformed space (bins = edges.size + 1)
    tables: np.ndarray  # (bins, _QUANTILES) observed values per bin

    @property
    def vocab(self) -> int:
        if self.categorical:
            return int(self.categories.size)
        return int(self.categories.size + (self.tables.shape[0] if self.tables.size else 0))

    @classmethod
    def fit(cls, name: str, raw: np.ndarray, bins: int) -> TokenColumn:
        unique, counts = np.unique(raw, return_counts=True)
        kind = COLUMN_KINDS[name]
        if kind == "categorical" or (kind == "discrete" and unique.size <= _MAX_CATEGORIES):
            return cls(name, unique.astype(np.float64), True, np.zeros(0), np.zeros((0, 0)))
        shares = counts / raw.size
        top = np.argsort(-shares, kind="stable")[:_MAX_ATOMS]
        atoms = np.sort(unique[top][shares[top] >= _ATOM_SHARE]).astype(np.float64)
        rest = np.sort(raw[~np.isin(raw, atoms)].astype(np.float64))
        if rest.size == 0:
            return cls(name, atoms, False, np.zeros(0), np.zeros((0, 0)))
        y = _forward(TRANSFORMS[name], rest)
        edges = np.unique(np.quantile(y, np.linspace(0, 1, bins + 1)[1:-1]))
        which = np.searchsorted(edges, y, side="right")
        tables = np.stack(
            [
                np.quantile(rest[which == b], _GRID)
                if (which == b).any()
                else np.full(_QUANTILES, np.nan)
                for b in range(edges.size + 1)
            ]
        )
        # An empty bin (ties at an edge) borrows its neighbour's values; it never gets a token.
        for b in range(tables.shape[0]):
            if np.isnan(tables[b]).any():
                tables[b] = tables[b - 1] if b else tables[b + 1]
        return cls(name, atoms, False, edges, tables)

    def encode(self, raw: np.ndarray) -> np.ndarray:
        raw = np.asarray(raw, dtype=np.float64)
        if self.categorical:
            index = np.searchsorted(self.categories, raw)
            return np.clip(index, 0, self.categories.size - 1).astype(np.int64)
        out = np.empty(raw.size, dtype=np.int64)
        atom = np.isin(raw, self.categories)
        out[atom] = np.searchsorted(self.categories, raw[atom])
        if self.tables.size:
            y = _forward(TRANSFORMS[self.name], raw[~atom])
            out[~atom] = self.categories.size + np.searchsorted(self.edges, y, side="right")
        else:
            near = np.abs(raw[~atom, None] - self.categories[None, :]).argmin(axis=1)
            out[~atom] = near
        return out

    def decode(self, token: int, u: float) -> float:
        if self.categorical or token < self.categories.size:
            return float(self.categories[token])
        table = self.tables[token - self.categories.size]
        return float(np.interp(u, _GRID, table))

    def state(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "categorical": self.categorical,
            "categories": torch.from_numpy(self.categories.astype(np.float64)),
            "edges": torch.from_numpy(self.edges.astype(np.float64)),
            "tables": torch.from_numpy(self.tables.astype(np.float64)),
        }

    @classmethod
    def from_state(cls, spec: dict[str, Any]) -> TokenColumn:
        return cls(
            str(spec["name"]),
            spec["categories"].double().numpy(),
            bool(spec["categorical"]),
            spec["edges"].double().numpy(),
            spec["tables"].double().numpy(),
        )


# Per slot after the numbers above: its user's run of identical jobs (below).
_SLOT_BLOCK = _SLOTS * (_SLOT_NUMERIC + 1)
# History numbers before a job: last gaps, position, queue state, session slots, and the
# previous job's run of identical jobs. A file fitted before the runs (no "runs" option)
# sees the numbers up to _NUMERIC_BEFORE_RUNS.
_NUMERIC = _LAST_GAPS + _POSITION_BINS + QUEUE_NUMBERS + _SLOT_BLOCK + 1
_NUMERIC_BEFORE_RUNS = _LAST_GAPS + _POSITION_BINS + QUEUE_NUMBERS + _SLOTS * _SLOT_NUMERIC
_QUEUE_AT = _LAST_GAPS + _POSITION_BINS  # where the queue numbers start
# has history, log time since, log jobs in 24 h, log run of identical jobs
_CLASS_NUMERIC = 4
_CLASS_NUMERIC_BEFORE_RUNS = 3


def _widths(runs: bool) -> tuple[int, int, int]:
    """The history, slot and class numbers' widths, with the runs of identical jobs or
    (a file from before them) without."""
    if runs:
        return _NUMERIC, _SLOT_BLOCK, _CLASS_NUMERIC
    return _NUMERIC_BEFORE_RUNS, _SLOTS * _SLOT_NUMERIC, _CLASS_NUMERIC_BEFORE_RUNS


def _run_number(run: int) -> float:
    """A run of ``run`` identical jobs as a network input (a run of 1: 0.14; of 100: 0.92)."""
    return math.log1p(run) / 5.0


_NEW_SESSION = _SLOTS  # the session token that starts a new session
