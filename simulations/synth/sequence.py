"""A sequence generator: jobs drawn in submit order, each conditioned on what came before.

The copula and the TVAE draw every job on its own, so a trace's daily and weekly cycles,
its bursts and its users' sessions (one user submitting a run of similar jobs) are lost.
Here a job is the next step of a sequence, factorized in time order:

1. the **gap** since the previous submission, given the history: the local hour and
   weekday of the last submission, the last gaps, how many jobs arrived in the last
   1, 6 and 24 hours and how much processor time they asked for (a proxy for the queue
   the machine has in front of it), and the previous job's tokens;
2. the **class** (user x size class, :mod:`simulations.synth.classes`) given that plus
   the new job's hour and weekday;
3. **processors**, **request**, **run fraction** and **status**, in that order, each
   given everything above, the tokens already drawn for this job, and the class's own
   history: its previous job's tokens, the time since it and its jobs in the last 24 h.
   A user resubmitting the same job is the request head copying the class's last one.

Every column is a token (REaLTabFormer, which seed 003 found best on marginals and
correlations, also generates tabular rows as token sequences): categorical columns
(status, processors when a trace has at most 256 sizes) by value; continuous ones by
value for **atoms** (values holding >= 0.5% of the rows: a 3600 s request, the run
fraction 1 of a job killed at its limit) and otherwise by quantile bin in log space; a
bin decodes to a value interpolated in its own table of observed quantiles. The heads
are small MLPs over a shared trunk, trained by teacher forcing (cross-entropy, Adam) on
the first 90% of the trace; a random 10% of the rows chooses the epoch (early stopping). Sampling
runs the same history code as training, one job at a time, with the network's weights
in numpy (a torch call per head costs more than the arithmetic).

Time: the sampled trace starts at the training trace's first submission, in its zone
(:class:`~simulations.synth.clock.TraceClock`), so times of day line up. Gaps are not
rescaled afterwards (that would slide the daily cycle): the load comes out of the model.
"""

from __future__ import annotations

import logging
import math
import time
from collections import deque
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn import functional

from knowledge_base.errors import InvalidInputError
from simulations.synth.clock import TraceClock
from simulations.synth.columns import COLUMN_KINDS, MODEL_COLUMNS, TRANSFORMS, Trace
from simulations.synth.columns import transform_forward as _forward
from simulations.synth.generator import SynthMetadata, training_data
from simulations.synth.tvae import one_thread, require_at_least_one

__all__ = ["SequenceModel", "TokenColumn"]

log = logging.getLogger(__name__)

_ATOM_SHARE = 0.005
_MAX_ATOMS = 32
_MAX_CATEGORIES = 256
_QUANTILES = 33  # points of each bin's value table
_GRID = np.linspace(0, 1, _QUANTILES)
_LAST_GAPS = 2
_POSITION_BINS = 32  # where in the trace's span a job is (its busy and quiet months)
_HEADS = ("gap", "class", "procs", "request", "fraction", "status")


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


_NUMERIC = _LAST_GAPS + _POSITION_BINS  # history numbers before a job
_CLASS_NUMERIC = 3  # has history, log time since, log jobs in 24 h


class _History:
    """What a job is conditioned on, kept up to date one job at a time.

    Training and sampling both run this, so the features a network learns from are
    exactly the ones it is given when generating.
    """

    def __init__(self, clock: TraceClock, span_s: float, vocab: dict[str, int]) -> None:
        self.clock = clock
        self.span_s = max(span_s, 1.0)
        self.none = vocab  # the "no previous job" token of each head is its vocab size
        self.now_s = 0.0
        self.gaps: deque[float] = deque([0.0] * _LAST_GAPS, maxlen=_LAST_GAPS)
        self.previous = [vocab[h] for h in ("gap", "class", "procs", "request")]
        self.class_last: dict[int, tuple[float, int, int, int]] = {}
        self.class_times: dict[int, deque[float]] = {}

    def context(self) -> tuple[np.ndarray, list[int], int, int]:
        """Numbers, previous tokens, hour and weekday of the last submission."""
        numbers = np.zeros(_NUMERIC, dtype=np.float32)
        numbers[:_LAST_GAPS] = [math.log1p(g) / 10.0 for g in self.gaps]
        position = min(int(self.now_s / self.span_s * _POSITION_BINS), _POSITION_BINS - 1)
        numbers[_LAST_GAPS + position] = 1.0
        hour, weekday = self.clock.hour_and_weekday_at(self.now_s)
        return numbers, list(self.previous), hour, weekday

    def class_context(self, label: int, at_s: float) -> tuple[np.ndarray, list[int]]:
        """The class's own history at ``at_s``: numbers and its previous job's tokens."""
        last = self.class_last.get(label)
        recent = self.class_times.get(label)
        if recent is not None:
            while recent and recent[0] <= at_s - 86_400:
                recent.popleft()
        if last is None:
            return (
                np.zeros(_CLASS_NUMERIC, dtype=np.float32),
                [self.none["procs"], self.none["request"], self.none["fraction"]],
            )
        since = max(at_s - last[0], 0.0)
        numbers = [1.0, math.log1p(since) / 12.0, math.log1p(len(recent or ())) / 5.0]
        return np.array(numbers, dtype=np.float32), [last[1], last[2], last[3]]

    def push(self, gap_s: float, tokens: dict[str, int]) -> None:
        self.now_s += gap_s
        self.gaps.append(gap_s)
        label = tokens["class"]
        self.class_last[label] = (
            self.now_s,
            tokens["procs"],
            tokens["request"],
            tokens["fraction"],
        )
        self.class_times.setdefault(label, deque()).append(self.now_s)
        self.previous = [tokens[h] for h in ("gap", "class", "procs", "request")]


_EMBED = 12


class _Network(nn.Module):
    """Shared trunk over the history; one head per token, each seeing the tokens before it."""

    def __init__(self, vocab: dict[str, int], hidden: int, head_hidden: int) -> None:
        super().__init__()
        # +1: the "no previous job" token.
        self.embed = nn.ModuleDict({h: nn.Embedding(vocab[h] + 1, _EMBED) for h in _HEADS})
        context = _NUMERIC + 4 * _EMBED + 24 + 7
        self.trunk = nn.Sequential(
            nn.Linear(context, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU()
        )
        inputs = {
            "gap": hidden,
            "class": hidden + _EMBED + 24 + 7,
            "procs": hidden + 2 * _EMBED + _CLASS_NUMERIC + 3 * _EMBED,
        }
        inputs["request"] = inputs["procs"] + _EMBED
        inputs["fraction"] = inputs["request"] + _EMBED
        inputs["status"] = inputs["fraction"] + _EMBED
        self.heads = nn.ModuleDict(
            {
                h: nn.Sequential(
                    nn.Linear(inputs[h], head_hidden), nn.ReLU(), nn.Linear(head_hidden, vocab[h])
                )
                for h in _HEADS
            }
        )


def _one_hot(index: torch.Tensor, size: int) -> torch.Tensor:
    return functional.one_hot(index, size).float()


@dataclass
class _Batch:
    numbers: torch.Tensor  # (n, _NUMERIC)
    previous: torch.Tensor  # (n, 4) gap, class, procs, request tokens of the previous job
    when: torch.Tensor  # (n, 4) hour, weekday of the last submission; of this job
    class_numbers: torch.Tensor  # (n, _CLASS_NUMERIC)
    class_previous: torch.Tensor  # (n, 3) procs, request, fraction of the class's last job
    tokens: torch.Tensor  # (n, 6) this job's tokens, in _HEADS order

    def rows(self, index: torch.Tensor | slice) -> _Batch:
        return _Batch(*(getattr(self, f)[index] for f in self.__dataclass_fields__))


def _logits(net: _Network, b: _Batch) -> dict[str, torch.Tensor]:
    e = net.embed
    context = torch.cat(
        [
            b.numbers,
            e["gap"](b.previous[:, 0]),
            e["class"](b.previous[:, 1]),
            e["procs"](b.previous[:, 2]),
            e["request"](b.previous[:, 3]),
            _one_hot(b.when[:, 0], 24),
            _one_hot(b.when[:, 1], 7),
        ],
        dim=1,
    )
    h = net.trunk(context)
    out = {"gap": net.heads["gap"](h)}
    gap = e["gap"](b.tokens[:, 0])
    out["class"] = net.heads["class"](
        torch.cat([h, gap, _one_hot(b.when[:, 2], 24), _one_hot(b.when[:, 3], 7)], dim=1)
    )
    job = torch.cat(
        [
            h,
            gap,
            e["class"](b.tokens[:, 1]),
            b.class_numbers,
            e["procs"](b.class_previous[:, 0]),
            e["request"](b.class_previous[:, 1]),
            e["fraction"](b.class_previous[:, 2]),
        ],
        dim=1,
    )
    for k, head in enumerate(("procs", "request", "fraction", "status"), start=2):
        out[head] = net.heads[head](job)
        job = torch.cat([job, e[head](b.tokens[:, k])], dim=1)
    return out


class _NumpyNet:
    """The trained network's weights as numpy arrays, for one-job-at-a-time sampling."""

    def __init__(self, net: _Network) -> None:
        def layers(seq: nn.Sequential) -> list[tuple[np.ndarray, np.ndarray]]:
            return [
                (m.weight.detach().double().numpy().T.copy(), m.bias.detach().double().numpy())
                for m in seq
                if isinstance(m, nn.Linear)
            ]

        self.embed = {
            h: m.weight.detach().double().numpy()  # type: ignore[operator]
            for h, m in net.embed.items()
        }
        self.trunk = layers(net.trunk)
        self.heads = {h: layers(m) for h, m in net.heads.items()}  # type: ignore[arg-type]

    @staticmethod
    def mlp(
        layers: list[tuple[np.ndarray, np.ndarray]], x: np.ndarray, *, last_relu: bool = False
    ) -> np.ndarray:
        for k, (w, b) in enumerate(layers):
            x = x @ w + b
            if last_relu or k < len(layers) - 1:
                x = np.maximum(x, 0.0)
        return x


def _hot(index: int, size: int) -> np.ndarray:
    out = np.zeros(size)
    out[index] = 1.0
    return out


def _draw(logits: np.ndarray, u: float, weights: np.ndarray | None = None) -> int:
    p = np.exp(logits - logits.max())
    if weights is not None:
        p = p * weights
    cumulative = np.cumsum(p)
    return int(min(np.searchsorted(cumulative, u * cumulative[-1], side="right"), p.size - 1))


_PSEUDO_JOBS = 500.0


class _MarginalFeedback:
    """Keeps a free-running sequence's token mix at the training trace's.

    Trained on real histories, the network has never seen the ones it makes itself. In
    development, left alone, one user's burst of cancelled jobs ran on for 1,249 jobs and
    the busiest user took 12% of a 54,000-job SDSC-SP2 trace (5% real); that version also
    had a sampling bug, fixed since, and was not re-measured without the feedback. Each
    draw is reweighted by ``training share / share so far`` of every token (the shares so
    far start from ``_PSEUDO_JOBS`` jobs at the training mix), so a token drawn too often
    becomes less likely and one drawn too rarely more, while the network decides the
    order.
    """

    def __init__(self, shares: dict[str, np.ndarray]) -> None:
        self.shares = {h: np.maximum(v, 1e-9) for h, v in shares.items()}
        self.counts = {h: v * _PSEUDO_JOBS for h, v in self.shares.items()}
        self.total = _PSEUDO_JOBS

    def weights(self, head: str) -> np.ndarray:
        out: np.ndarray = self.shares[head] * self.total / self.counts[head]
        return out

    def drawn(self, head: str, token: int) -> None:
        self.counts[head][token] += 1.0

    def next_job(self) -> None:
        self.total += 1.0


class SequenceModel:
    """Token columns, the class scheme (in metadata) and the network."""

    def __init__(
        self,
        metadata: SynthMetadata,
        columns: list[TokenColumn],
        network: _Network,
        token_shares: dict[str, np.ndarray],
    ) -> None:
        self.metadata = metadata
        self.token_shares = token_shares
        self.columns = columns
        self.network = network.eval()
        self.vocab = self._vocab(columns, len(metadata.classes.classes))
        self._numpy: _NumpyNet | None = None

    @staticmethod
    def _vocab(columns: list[TokenColumn], classes: int) -> dict[str, int]:
        by_name = {c.name: c.vocab for c in columns}
        return {
            "gap": by_name["interarrival_s"],
            "class": classes,
            "procs": by_name["procs"],
            "request": by_name["requested_time_s"],
            "fraction": by_name["run_fraction"],
            "status": by_name["status"],
        }

    @property
    def span_s(self) -> float:
        """The training trace's span: where a job sits in it is one of its inputs."""
        return float(self.metadata.options.get("span_s", 1.0))

    @property
    def clock(self) -> TraceClock:
        meta = self.metadata
        return TraceClock(
            epoch_s=int(meta.unix_start_time_s or 0) + int(meta.first_submit_s),
            zone_name=meta.time_zone_string,
        )

    def _features(self, tokens: np.ndarray, matrix: np.ndarray) -> _Batch:
        """Teacher-forcing inputs for every row of a training trace, in one pass."""
        n = tokens.shape[0]
        history = _History(self.clock, self.span_s, self.vocab)
        numbers = np.zeros((n, _NUMERIC), dtype=np.float32)
        previous = np.zeros((n, 4), dtype=np.int64)
        when = np.zeros((n, 4), dtype=np.int64)
        class_numbers = np.zeros((n, _CLASS_NUMERIC), dtype=np.float32)
        class_previous = np.zeros((n, 3), dtype=np.int64)
        gaps = matrix[:, 0].copy()
        gaps[0] = 0.0
        for i in range(n):
            numbers[i], previous[i], when[i, 0], when[i, 1] = history.context()
            at = history.now_s + gaps[i]
            when[i, 2], when[i, 3] = self.clock.hour_and_weekday_at(at)
            class_numbers[i], class_previous[i] = history.class_context(int(tokens[i, 1]), at)
            row = dict(zip(_HEADS, (int(t) for t in tokens[i]), strict=True))
            history.push(float(gaps[i]), row)
        return _Batch(
            torch.from_numpy(numbers),
            torch.from_numpy(previous),
            torch.from_numpy(when),
            torch.from_numpy(class_numbers),
            torch.from_numpy(class_previous),
            torch.from_numpy(tokens),
        )

    @classmethod
    @one_thread()
    def fit(
        cls,
        trace: Trace,
        *,
        seed: int = 0,
        epochs: int = 30,
        batch_size: int = 256,
        hidden: int = 128,
        head_hidden: int = 64,
        bins: int = 48,
        learning_rate: float = 2e-3,
        validation: float = 0.1,
        min_class_jobs: int = 30,
    ) -> SequenceModel:
        require_at_least_one(
            epochs=epochs, batch_size=batch_size, hidden=hidden, head_hidden=head_hidden, bins=bins
        )
        if not 0 <= validation < 1:
            raise InvalidInputError(
                "validation is a share of the trace in [0, 1)", field="validation", value=validation
            )
        began = time.perf_counter()
        data = training_data(trace, min_class_jobs=min_class_jobs)
        columns = [
            TokenColumn.fit(name, data.matrix[:, k], bins) for k, name in enumerate(MODEL_COLUMNS)
        ]
        options: dict[str, float | int | str | bool] = {
            "epochs": epochs,
            "batch_size": batch_size,
            "hidden": hidden,
            "head_hidden": head_hidden,
            "bins": bins,
            "learning_rate": learning_rate,
            "validation": validation,
            "min_class_jobs": min_class_jobs,
            "span_s": float(trace.table.submit_s[-1]),
        }
        metadata = SynthMetadata(
            kind="sequence",
            trace=trace.name,
            machine_procs=trace.machine_procs,
            max_nodes=trace.header.max_nodes,
            computer=trace.header.system_name,
            unix_start_time_s=trace.header.unix_start_time_s,
            time_zone_string=trace.header.time_zone_string,
            first_submit_s=trace.table.start_s,
            training_jobs=len(trace.table),
            offered_load=data.offered_load,
            statuses=data.statuses,
            classes=data.scheme,
            seed=seed,
            fit_seconds=0.0,
            options=options,
        )
        vocab = cls._vocab(columns, len(data.scheme.classes))
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            network = _Network(vocab, hidden, head_hidden)
        tokens = np.column_stack(
            [columns[0].encode(data.matrix[:, 0]), data.labels.astype(np.int64)]
            + [columns[k].encode(data.matrix[:, k]) for k in range(1, len(MODEL_COLUMNS))]
        )
        shares = {
            head: np.bincount(tokens[:, k], minlength=vocab[head]) / tokens.shape[0]
            for k, head in enumerate(_HEADS)
        }
        model = cls(metadata, columns, network, shares)
        batch = model._features(tokens, data.matrix)
        n = tokens.shape[0]
        generator = torch.Generator().manual_seed(seed)
        # Validation rows are drawn at random: every part of the trace's span is seen.
        shuffled = torch.randperm(n, generator=generator)
        n_held = int(n * validation)
        n_train = n - n_held
        train, held = batch.rows(shuffled[n_held:]), batch.rows(shuffled[:n_held])
        optimizer = torch.optim.Adam(network.parameters(), lr=learning_rate, weight_decay=1e-5)
        best_loss, best_state, best_epoch = math.inf, None, 0
        train_loss = math.nan
        for epoch in range(epochs):
            network.train()
            order = torch.randperm(n_train, generator=generator)
            total = 0.0
            for begin in range(0, n_train, batch_size):
                rows = train.rows(order[begin : begin + batch_size])
                loss = _loss(network, rows)
                optimizer.zero_grad()
                torch.autograd.backward(loss)
                optimizer.step()
                total += float(loss.detach()) * rows.tokens.shape[0]
            train_loss = total / n_train
            network.eval()
            with torch.no_grad():
                held_loss = float(_loss(network, held)) if n_held else train_loss
            log.info(
                "sequence epoch %d/%d: loss %.4f, held-out %.4f",
                epoch + 1,
                epochs,
                train_loss,
                held_loss,
            )
            if held_loss < best_loss:
                best_loss, best_epoch = held_loss, epoch + 1
                best_state = {k: v.detach().clone() for k, v in network.state_dict().items()}
        if best_state is not None:
            network.load_state_dict(best_state)
        network.eval()
        model._numpy = None
        model.metadata = metadata.model_copy(
            update={
                "fit_seconds": time.perf_counter() - began,
                "options": {
                    **options,
                    "best_epoch": best_epoch,
                    "held_out_loss": round(best_loss, 6),
                    "final_train_loss": round(train_loss, 6),
                },
            }
        )
        return model

    def sample_rows(self, labels: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Not how this model samples: its classes come out of the sequence itself."""
        raise InvalidInputError(
            "a sequence model draws its own classes; use sample_sequence", field="model"
        )

    def sample_sequence(
        self, n_jobs: int, rng: np.random.Generator
    ) -> tuple[np.ndarray, np.ndarray]:
        """``n_jobs`` rows of MODEL_COLUMNS in submit order, and their users."""
        if self._numpy is None:
            self._numpy = _NumpyNet(self.network)
        net = self._numpy
        emb = net.embed
        by_name = {c.name: c for c in self.columns}
        classes = self.metadata.classes.classes
        history = _History(self.clock, self.span_s, self.vocab)
        rows = np.empty((n_jobs, len(MODEL_COLUMNS)), dtype=np.float64)
        users = np.empty(n_jobs, dtype=np.int64)
        uniforms = rng.random((n_jobs, 12))
        feedback = _MarginalFeedback(self.token_shares)
        for i in range(n_jobs):
            u = uniforms[i]
            numbers, previous, hour, weekday = history.context()
            context = np.concatenate(
                [
                    numbers,
                    emb["gap"][previous[0]],
                    emb["class"][previous[1]],
                    emb["procs"][previous[2]],
                    emb["request"][previous[3]],
                    _hot(hour, 24),
                    _hot(weekday, 7),
                ]
            )
            h = net.mlp(net.trunk, context, last_relu=True)  # the trunk ends in a ReLU
            gap_token = _draw(net.mlp(net.heads["gap"], h), u[0], feedback.weights("gap"))
            feedback.drawn("gap", gap_token)
            gap = by_name["interarrival_s"].decode(gap_token, u[1]) if i else 0.0
            gap = float(max(round(gap), 1)) if i else 0.0
            at = history.now_s + gap
            new_hour, new_weekday = self.clock.hour_and_weekday_at(at)
            gap_embedding = emb["gap"][gap_token]
            label = _draw(
                net.mlp(
                    net.heads["class"],
                    np.concatenate([h, gap_embedding, _hot(new_hour, 24), _hot(new_weekday, 7)]),
                ),
                u[2],
                feedback.weights("class"),
            )
            feedback.drawn("class", label)
            class_numbers, class_previous = history.class_context(label, at)
            job = np.concatenate(
                [
                    h,
                    gap_embedding,
                    emb["class"][label],
                    class_numbers,
                    emb["procs"][class_previous[0]],
                    emb["request"][class_previous[1]],
                    emb["fraction"][class_previous[2]],
                ]
            )
            tokens = {"gap": gap_token, "class": label}
            values = [gap]
            for k, (head, column) in enumerate(
                (
                    ("procs", "procs"),
                    ("request", "requested_time_s"),
                    ("fraction", "run_fraction"),
                    ("status", "status"),
                )
            ):
                token = _draw(net.mlp(net.heads[head], job), u[3 + 2 * k], feedback.weights(head))
                feedback.drawn(head, token)
                tokens[head] = token
                values.append(by_name[column].decode(token, u[4 + 2 * k]))
                job = np.concatenate([job, emb[head][token]])
            rows[i] = values
            job_class = classes[label]
            if len(job_class.users) == 1:
                users[i] = job_class.users[0]
            else:
                weights = np.cumsum(job_class.user_jobs)
                pick = int(np.searchsorted(weights, u[11] * weights[-1], side="right"))
                users[i] = job_class.users[min(pick, len(job_class.users) - 1)]
            history.push(gap, tokens)
            feedback.next_job()
        return rows, users

    def state(self) -> dict[str, Any]:
        return {
            "columns": [c.state() for c in self.columns],
            "network": self.network.state_dict(),
            "token_shares": [
                torch.from_numpy(self.token_shares[h].astype(np.float64)) for h in _HEADS
            ],
        }

    @classmethod
    def from_state(cls, metadata: SynthMetadata, state: dict[str, Any]) -> SequenceModel:
        try:
            columns = [TokenColumn.from_state(spec) for spec in state["columns"]]
            names = tuple(c.name for c in columns)
            if names != MODEL_COLUMNS:
                raise ValueError(f"columns {names}, expected {MODEL_COLUMNS}")
            options = metadata.options
            vocab = cls._vocab(columns, len(metadata.classes.classes))
            network = _Network(vocab, int(options["hidden"]), int(options["head_hidden"]))
            network.load_state_dict(state["network"], strict=True)
            shares = {
                h: t.double().numpy() for h, t in zip(_HEADS, state["token_shares"], strict=True)
            }
            for h in _HEADS:
                if shares[h].shape != (vocab[h],):
                    raise ValueError(
                        f"{h} token shares of shape {shares[h].shape}, vocab {vocab[h]}"
                    )
        except (KeyError, TypeError, ValueError, AttributeError, RuntimeError) as error:
            raise InvalidInputError(
                f"the sequence model's state does not match its metadata ({str(error)[:300]})",
                field="state",
            ) from error
        return cls(metadata, columns, network, shares)


def _loss(network: _Network, batch: _Batch) -> torch.Tensor:
    logits = _logits(network, batch)
    total = batch.tokens.new_zeros((), dtype=torch.float32)
    for k, head in enumerate(_HEADS):
        total = total + functional.cross_entropy(logits[head], batch.tokens[:, k])
    return total
