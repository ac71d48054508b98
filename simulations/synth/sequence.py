"""A sequence generator: jobs drawn in submit order, each conditioned on what came before.

The copula and the TVAE draw every job on its own, so a trace's daily and weekly cycles,
its bursts and its users' sessions (one user submitting a run of similar jobs) are lost.
Here a job is the next step of a sequence, factorized in time order:

1. the **gap** since the previous submission, in operational time
   (:mod:`simulations.synth.intensity`: the clock stretched by the trace's weekly arrival
   rate, so the daily and weekly cycle is the fitted rate's, not the network's), given the
   history: the local hour and weekday of the last submission, where in the trace's span
   it is, the last gaps, the previous job's tokens, the **queue state** (the fluid
   backlog and the trailing day's, 3 days' and week's offered load,
   :mod:`simulations.synth.queue_state`: real users submit less when the machine is
   backed up) and the open sessions (below);
2. the **session**: continue one of the ``_SLOTS`` most recently active users' sessions
   (slot 0 the latest), or start a new one, given that plus each slot's time since its
   user's last job and the length of its current session (a user's jobs less than 20
   minutes apart, as :mod:`simulations.synth.temporal` counts them). Independent class
   draws made about twice the real number of sessions, each half as long;
3. the **class** (user x size class, :mod:`simulations.synth.classes`) given that and
   the new job's hour and weekday: a continued session draws among that user's classes
   (seeing the class of its last job), a new one among the classes of users not in the
   slots; the user is the slot's, or drawn within the class from the others;
4. **processors**, **request**, **run fraction** and **status**, in that order, each
   given everything above (the new job's own hour and weekday too: LANL-CM5's night jobs
   run five times as long as its afternoon ones), the tokens already drawn for this job,
   and the class's own history: its previous job's tokens, the time since it and its
   jobs in the last 24 h.
   A user resubmitting the same job is explicit: the processors, request and run-fraction
   heads each have a **copy gate**, a logit added to the class's previous token, the heads
   after them see whether each repeated it, and a repeated processors or request token
   repeats the previous value (a bin's token alone would draw a new value within the
   bin: HPC2N-2002's fit 1 repeated a user's request token in 77% of the pairs within the
   hour but the value in 63%, real 88% / 88%). The run-fraction draw is also held to the
   training trace's run classes per size class, per run class of the class's previous
   job and per request class (:class:`_RunClassFeedback`), so short-run jobs come in
   failure chains, and those asking hours as often as the trace's.

Users submit **runs of identical jobs** (HPC2N-2002: 72% of the jobs repeat the same
user's previous one, class, processors and request, a median 5 s after it; 174 runs reach
100 jobs): the trunk sees how long the previous job's run is, the session head each slot
user's, the job heads the class's; and an **again** head, after the session head, decides
whether a continued session's job repeats its user's last one whole (class, processors
and request, values too), or is drawn by the class and job heads (whose loss leaves the
repeated jobs out). Drawn without it, the runs broke off too often: a user's next job
within the hour changed shape after a run of 5-10 jobs in 11% of cases (real 6%), and the
50th and later jobs of a run were 6% of the jobs (real 19%; with the head 6% and 9%).
The head's repeats are held to the training trace's share per run length
(:class:`_AgainFeedback`): left alone, a run feeds itself.

A trace without user ids (ALCF-Theta's) gets none of the resubmission structure (copy
gates, run classes per previous run class and request class, runs, again): its classes
are sizes alone, whose "previous job" is anyone's.

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
(:class:`~simulations.synth.clock.TraceClock`), so times of day line up. Real-time gaps
are never rescaled (that would slide the daily cycle); asked for a ``load``, sampling
runs operational time faster or slower, which keeps the cycle, so that
:func:`~simulations.synth.generator.generate` can draw more load than the target and
thin it.
"""

from __future__ import annotations

import logging
import math
import time
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn import functional

from knowledge_base.errors import InvalidInputError
from simulations.synth.clock import TraceClock
from simulations.synth.closed_loop import after_short_share
from simulations.synth.columns import COLUMN_KINDS, MODEL_COLUMNS, TRANSFORMS, Trace
from simulations.synth.columns import transform_forward as _forward
from simulations.synth.generator import SynthMetadata, training_data
from simulations.synth.intensity import WEEK_BINS, OperationalTime, weekly_rates
from simulations.synth.load import (
    easy_queue_s,
    easy_wait_s,
    mean_backlog_s,
    peak_week_load,
    short_backlog_ratio,
    short_wait_ratio,
)
from simulations.synth.model_state import state_errors
from simulations.synth.queue_state import QUEUE_NUMBERS, QueueState, job_work
from simulations.synth.temporal import SESSION_GAP_S
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


class _Users:
    """Users as indices, and which classes each may be drawn in (the class head's masks).

    ``member[u]``: the classes holding user ``u``'s jobs (a continued session draws among
    them); ``single[u]``: the classes of ``u`` alone. A new session is a user not in the
    slots, so it may not draw a class of a slot user alone. Row ``none`` (an empty slot)
    allows every class and forbids none.
    """

    def __init__(self, classes: list[Any]) -> None:
        users = sorted({int(u) for c in classes for u in c.users})
        self.ids = np.array(users, dtype=np.int64)
        self.index = {u: k for k, u in enumerate(users)}
        self.none = len(users)
        self.member = np.zeros((len(users) + 1, len(classes)), dtype=bool)
        self.single = np.zeros((len(users) + 1, len(classes)), dtype=bool)
        for c, job_class in enumerate(classes):
            for u in job_class.users:
                self.member[self.index[int(u)], c] = True
            if len(job_class.users) == 1:
                self.single[self.index[int(job_class.users[0])], c] = True
        self.member[self.none] = True
        self.member_t = torch.from_numpy(self.member)
        self.single_t = torch.from_numpy(self.single)

    def allowed(self, session: int, slot_users: np.ndarray) -> np.ndarray:
        if session < _SLOTS:
            out: np.ndarray = self.member[slot_users[session]]
        else:
            out = ~self.single[slot_users].any(axis=0)
        return out if out.any() else np.ones(self.member.shape[1], dtype=bool)

    def allowed_t(self, session: torch.Tensor, slot_users: torch.Tensor) -> torch.Tensor:
        continued = session < _SLOTS
        pick = slot_users.gather(1, session.clamp(max=_SLOTS - 1)[:, None])[:, 0]
        pick = torch.where(continued, pick, torch.full_like(pick, self.none))
        new = ~self.single_t[slot_users].any(dim=1)
        return torch.where(continued[:, None], self.member_t[pick], new)


class _History:
    """What a job is conditioned on, kept up to date one job at a time.

    Training and sampling both run this, so the features a network learns from are
    exactly the ones it is given when generating.
    """

    def __init__(
        self,
        clock: TraceClock,
        operational: OperationalTime,
        span_s: float,
        vocab: dict[str, int],
        users: _Users,
        queue: QueueState,
        *,
        runs: bool,
    ) -> None:
        self.clock = clock
        self.runs = runs
        self.widths = _widths(runs)
        self.queue = queue
        self.operational = operational
        self.span_s = max(span_s, 1.0)
        self.none = vocab  # the "no previous job" token of each head is its vocab size
        self.no_user = users.none
        self.now_s = 0.0
        self.now_op = operational.forward(0.0)
        self.gaps: deque[float] = deque([0.0] * _LAST_GAPS, maxlen=_LAST_GAPS)
        self.previous = [vocab[h] for h in ("gap", "class", "procs", "request")]
        self.class_last: dict[int, tuple[float, int, int, int]] = {}
        self.class_times: dict[int, deque[float]] = {}
        self.recent: list[int] = []  # user indices, the most recently active first
        self.user_last: dict[int, tuple[float, int, int]] = {}  # time, class, session jobs
        # Runs of identical jobs: the same class, processors and request tokens, each
        # within a session gap of the one before (HPC2N-2002: 72% of the jobs repeat the
        # user's previous one, a median 5 s after it; 174 runs reach 100 jobs).
        self.user_run: dict[int, tuple[tuple[int, int, int], int]] = {}  # shape, run
        self.class_run: dict[int, tuple[tuple[int, int], int]] = {}
        self.previous_run = 0
        # The last job's values of the heads a repeat copies (_VALUE_COPIED), per user and
        # per class: sampling pushes them, training has no use for them.
        self.user_values: dict[int, tuple[float, ...]] = {}
        self.class_values: dict[int, tuple[float, ...]] = {}

    def slots(self, at_s: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per slot at ``at_s``: numbers; its user (``no_user`` when empty); that user's
        last class (the class head's "no previous job" token when empty)."""
        numbers = np.zeros(self.widths[1], dtype=np.float32)
        users = np.full(_SLOTS, self.no_user, dtype=np.int64)
        classes = np.full(_SLOTS, self.none["class"], dtype=np.int64)
        for k, user in enumerate(self.recent):
            last_s, label, run = self.user_last[user]
            since = max(at_s - last_s, 0.0)
            numbers[k * _SLOT_NUMERIC : (k + 1) * _SLOT_NUMERIC] = (
                1.0,
                math.log1p(since) / 12.0,
                math.log1p(run) / 4.0,
            )
            if self.runs:
                numbers[_SLOTS * _SLOT_NUMERIC + k] = _run_number(self.user_run[user][1])
            users[k], classes[k] = user, label
        return numbers, users, classes

    def run_length(self, user: int) -> int:
        """How many identical jobs ``user``'s current run holds (0: no job yet)."""
        run = self.user_run.get(user)
        return 0 if run is None else run[1]

    def last_shape(self, user: int) -> tuple[int, int, int] | None:
        """The class, processors and request tokens of ``user``'s last job (None: none)."""
        run = self.user_run.get(user)
        return None if run is None else run[0]

    def last_job(self, user: int) -> tuple[tuple[int, int, int], tuple[float, ...]] | None:
        """``user``'s last job as a repeat takes it: its class, processors and request
        tokens, and its processors and request values (None: no job, or none pushed with
        values)."""
        run = self.user_run.get(user)
        values = self.user_values.get(user)
        return None if run is None or values is None else (run[0], values)

    def session_token(self, user: int) -> int:
        return self.recent.index(user) if user in self.recent else _NEW_SESSION

    def context(self) -> tuple[np.ndarray, list[int], int, int]:
        """Numbers, previous tokens, hour and weekday of the last submission."""
        numbers = np.zeros(self.widths[0], dtype=np.float32)
        numbers[:_LAST_GAPS] = [math.log1p(g) / 10.0 for g in self.gaps]
        position = min(int(self.now_s / self.span_s * _POSITION_BINS), _POSITION_BINS - 1)
        numbers[_LAST_GAPS + position] = 1.0
        numbers[_QUEUE_AT : _QUEUE_AT + QUEUE_NUMBERS] = self.queue.numbers()
        slots_at = _QUEUE_AT + QUEUE_NUMBERS
        numbers[slots_at : slots_at + self.widths[1]] = self.slots(self.now_s)[0]
        if self.runs and self.previous_run:
            numbers[-1] = _run_number(self.previous_run)
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
                np.zeros(self.widths[2], dtype=np.float32),
                [self.none["procs"], self.none["request"], self.none["fraction"]],
            )
        since = max(at_s - last[0], 0.0)
        numbers = [
            1.0,
            math.log1p(since) / 12.0,
            math.log1p(len(recent or ())) / 5.0,
            _run_number(self.class_run[label][1]),
        ][: self.widths[2]]
        return np.array(numbers, dtype=np.float32), [last[1], last[2], last[3]]

    def push(
        self,
        gap_s: float,
        operational_gap: float,
        tokens: dict[str, int],
        user: int,
        work: float,
        values: tuple[float, ...] | None = None,
    ) -> None:
        """The job just drawn (or read): its gap, tokens, user and processor-seconds, and
        (when sampling) its values of the heads a repeat copies."""
        self.now_s += gap_s
        self.now_op = self.operational.forward(self.now_s)
        self.queue.submit(self.now_s, work)
        self.gaps.append(operational_gap)
        label = tokens["class"]
        shape = (label, tokens["procs"], tokens["request"])
        class_last = self.class_last.get(label)
        class_within = class_last is not None and self.now_s - class_last[0] < SESSION_GAP_S
        self.class_run[label] = _extend(self.class_run.get(label), shape[1:], class_within)
        self.class_last[label] = (
            self.now_s,
            tokens["procs"],
            tokens["request"],
            tokens["fraction"],
        )
        self.class_times.setdefault(label, deque()).append(self.now_s)
        self.previous = [tokens[h] for h in ("gap", "class", "procs", "request")]
        last = self.user_last.get(user)
        within = last is not None and self.now_s - last[0] < SESSION_GAP_S
        run = last[2] + 1 if last is not None and within else 1
        self.user_last[user] = (self.now_s, label, run)
        self.user_run[user] = _extend(self.user_run.get(user), shape, within)
        self.previous_run = self.user_run[user][1]
        if values is not None:
            self.user_values[user] = self.class_values[label] = values
        if user in self.recent:
            self.recent.remove(user)
        self.recent.insert(0, user)
        del self.recent[_SLOTS:]


def _extend(run: tuple[Any, int] | None, shape: Any, within: bool) -> tuple[Any, int]:
    """A run of identical jobs after a job of ``shape``: one longer when the run's shape is
    the same and the job came within a session gap (``within``), else a new run of 1."""
    same = within and run is not None and run[0] == shape
    return shape, run[1] + 1 if run is not None and same else 1


_EMBED = 12
_WHEN = 24 + 7  # one-hot local hour and weekday


class _Network(nn.Module):
    """Shared trunk over the history; one head per token, each seeing the tokens before it."""

    def __init__(
        self,
        vocab: dict[str, int],
        hidden: int,
        head_hidden: int,
        *,
        job_when: bool = True,
        repeat: bool = True,
        runs: bool = True,
    ) -> None:
        super().__init__()
        # The job's own heads (processors, request, run fraction, status) see its local hour
        # and weekday; a file fitted before they did (no "job_when" option) has heads
        # without them.
        self.job_when = job_when
        # ``repeat``: the processors, request and run-fraction heads each have a copy gate,
        # a logit added to the class's previous token (a user resubmitting a job), and the
        # heads after them see whether each token drawn is that previous one. A file fitted
        # before (no "repeat" option) has neither.
        self.repeat = repeat
        # ``runs``: the trunk, the session head and the job heads see the runs of identical
        # jobs (the previous job's, each slot user's, the class's). A file fitted before
        # (no "runs" option) sees none.
        self.runs = runs
        flag = 1 if repeat else 0
        # +1: the "no previous job" token.
        self.embed = nn.ModuleDict({h: nn.Embedding(vocab[h] + 1, _EMBED) for h in _HEADS})
        numeric, slots, class_numeric = _widths(runs)
        context = numeric + 4 * _EMBED + _WHEN
        self.trunk = nn.Sequential(
            nn.Linear(context, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU()
        )
        inputs = {
            "gap": hidden,
            "session": hidden + _EMBED + slots + _WHEN,
            "class": hidden + _EMBED + _WHEN + 2 * _EMBED,
            "procs": hidden + 3 * _EMBED + class_numeric + 3 * _EMBED + (_WHEN if job_when else 0),
        }
        inputs["request"] = inputs["procs"] + _EMBED + flag
        inputs["fraction"] = inputs["request"] + _EMBED + flag
        inputs["status"] = inputs["fraction"] + _EMBED + flag
        self.heads = nn.ModuleDict(
            {
                h: nn.Sequential(
                    nn.Linear(inputs[h], head_hidden), nn.ReLU(), nn.Linear(head_hidden, vocab[h])
                )
                for h in _HEADS
            }
        )
        if repeat:
            self.copy = nn.ModuleDict({h: nn.Linear(inputs[h], 1) for h in _COPIED})
        if runs:
            # Whether a continued session's job repeats its user's last one (class,
            # processors, request), given the class head's inputs and the slot's numbers.
            self.again = nn.Sequential(
                nn.Linear(inputs["class"] + _SLOT_NUMERIC + 1, head_hidden),
                nn.ReLU(),
                nn.Linear(head_hidden, 1),
            )


def _one_hot(index: torch.Tensor, size: int) -> torch.Tensor:
    return functional.one_hot(index, size).float()


@dataclass
class _Batch:
    numbers: torch.Tensor  # (n, _NUMERIC), or _NUMERIC_BEFORE_RUNS: see _widths
    previous: torch.Tensor  # (n, 4) gap, class, procs, request tokens of the previous job
    when: torch.Tensor  # (n, 4) hour, weekday of the last submission; of this job
    slot_numbers: torch.Tensor  # (n, _SLOT_BLOCK or before runs) at this job's submission
    slot_users: torch.Tensor  # (n, _SLOTS) user indices (none: empty)
    slot_class: torch.Tensor  # (n,) last class of the continued session's user (or none)
    class_numbers: torch.Tensor  # (n, _CLASS_NUMERIC)
    class_previous: torch.Tensor  # (n, 3) procs, request, fraction of the class's last job
    tokens: torch.Tensor  # (n, 7) this job's tokens, in _HEADS order
    again: torch.Tensor  # (n,) True where a continued session's job repeats its user's last
    user_run: torch.Tensor  # (n,) the job's user's run of identical jobs before it (0: none)

    def rows(self, index: torch.Tensor | slice) -> _Batch:
        return _Batch(*(getattr(self, f)[index] for f in self.__dataclass_fields__))


_MASKED = -1e9


def _logits(net: _Network, b: _Batch, users: _Users) -> dict[str, torch.Tensor]:
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
    new_when = torch.cat([_one_hot(b.when[:, 2], 24), _one_hot(b.when[:, 3], 7)], dim=1)
    # An empty slot cannot be continued.
    no_slot = b.slot_users == users.none
    empty = torch.cat([no_slot, torch.zeros_like(no_slot[:, :1])], dim=1)
    out["session"] = net.heads["session"](
        torch.cat([h, gap, b.slot_numbers, new_when], dim=1)
    ).masked_fill(empty, _MASKED)
    session = e["session"](b.tokens[:, 1])
    class_input = torch.cat([h, gap, new_when, session, e["class"](b.slot_class)], dim=1)
    out["class"] = net.heads["class"](class_input).masked_fill(
        ~users.allowed_t(b.tokens[:, 1], b.slot_users), _MASKED
    )
    if net.runs:
        slot = b.tokens[:, 1].clamp(max=_SLOTS - 1)
        numbers = b.slot_numbers[:, : _SLOTS * _SLOT_NUMERIC].reshape(-1, _SLOTS, _SLOT_NUMERIC)
        chosen = torch.cat(
            [
                numbers[torch.arange(slot.shape[0]), slot],
                b.slot_numbers[:, _SLOTS * _SLOT_NUMERIC :].gather(1, slot[:, None]),
            ],
            dim=1,
        )
        out["again"] = net.again(torch.cat([class_input, chosen], dim=1))[:, 0]
    job = torch.cat(
        [
            h,
            gap,
            session,
            e["class"](b.tokens[:, 2]),
            b.class_numbers,
            e["procs"](b.class_previous[:, 0]),
            e["request"](b.class_previous[:, 1]),
            e["fraction"](b.class_previous[:, 2]),
            *([new_when] if net.job_when else []),
        ],
        dim=1,
    )
    for k, head in enumerate(("procs", "request", "fraction", "status"), start=3):
        logits = net.heads[head](job)
        token = b.tokens[:, k]
        if net.repeat and head in _COPIED:
            last = b.class_previous[:, k - 3]
            # The class's previous token gets the copy gate's logit ("none": no token).
            copied = _one_hot(last, logits.shape[1] + 1)[:, :-1]
            logits = logits + copied * net.copy[head](job)
            job = torch.cat([job, e[head](token), (token == last).float()[:, None]], dim=1)
        else:
            job = torch.cat([job, e[head](token)], dim=1)
        out[head] = logits
    return out


class _NumpyNet:
    """The trained network's weights as numpy arrays, for one-job-at-a-time sampling."""

    def __init__(self, net: _Network) -> None:
        def layers(seq: Iterable[nn.Module]) -> list[tuple[np.ndarray, np.ndarray]]:
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
        self.copy = {h: layers([m]) for h, m in net.copy.items()} if net.repeat else {}
        self.again = layers(net.again) if net.runs else None

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


# Run classes: under 10 s (bounded slowdown's threshold: a job that ran 2 s and waited an
# hour counts 360, one that ran 50 s 72), under a minute, 10 minutes, an hour, longer.
_RUN_CLASS_EDGES_S = np.array([10.0, 60.0, 600.0, 3600.0])
_RUN_CLASSES = _RUN_CLASS_EDGES_S.size + 1
# A file from before the 10 s edge has four run classes (and no previous run class).
_EDGES_BEFORE_10_S = _RUN_CLASS_EDGES_S[1:]
# Where a job's class has no previous job: the "previous run class" index after the others.
_NO_PREVIOUS = _RUN_CLASSES
# A (size class, previous run class) row with fewer jobs takes its size class's shares; a
# (size class, previous run class, request class) row its (size, previous) row's.
_MIN_ROW_JOBS = 30
# Request classes: under an hour, under 4 h, longer. HPC2N-2002's jobs asking 4 h or more
# ran 1-10 minutes in 4.0% of its jobs (they wait longest: 5.9 h of EASY wait), a draw
# held to the run classes per size class alone 2.8%, and 4.9% of 10-60 minutes (2.8%).
_REQUEST_EDGES_S = np.array([3600.0, 4 * 3600.0])
_REQUEST_CLASSES = _REQUEST_EDGES_S.size + 1


def run_class(run_s: np.ndarray | float, edges: np.ndarray = _RUN_CLASS_EDGES_S) -> np.ndarray:
    """Each run time's run class: 0 under ``edges[0]`` (10 s) ... ``edges.size``."""
    out: np.ndarray = np.searchsorted(edges, run_s, side="right")
    return out


def request_class(request_s: np.ndarray | float) -> np.ndarray:
    """Each request's class: 0 under an hour, 1 under 4 h, 2 longer."""
    out: np.ndarray = np.searchsorted(_REQUEST_EDGES_S, request_s, side="right")
    return out


def previous_run_classes(labels: np.ndarray, run_s: np.ndarray) -> np.ndarray:
    """For each job (in submit order), the run class of the previous job of its class
    (user x size class), or ``_NO_PREVIOUS`` for a class's first job."""
    out = np.full(labels.size, _NO_PREVIOUS, dtype=np.int64)
    runs = run_class(run_s)
    order = np.lexsort((np.arange(labels.size), labels))  # each class's jobs in order
    same = labels[order[1:]] == labels[order[:-1]]
    out[order[1:][same]] = runs[order[:-1][same]]
    return out


def run_class_shares(
    procs: np.ndarray,
    run_s: np.ndarray,
    size_edges: list[int],
    previous: np.ndarray | None = None,
    request_s: np.ndarray | None = None,
) -> np.ndarray:
    """The share of each run class (:data:`_RUN_CLASS_EDGES_S`) among the jobs of each size
    class (the class scheme's ``size_edges``): rows size classes, columns run classes; a
    size class without jobs gets the trace's overall shares.

    ``previous`` (:func:`previous_run_classes`): shares per size class and the run class
    of the job's class's previous job (a resubmitted job that failed in its first minute
    usually fails again), shape (size classes, run classes + 1, run classes); a row with
    fewer than ``_MIN_ROW_JOBS`` jobs takes its size class's shares. ``request_s`` too
    (only with ``previous``): per request class (:func:`request_class`) as well, shape
    (size classes, run classes + 1, request classes, run classes), a row with fewer jobs
    taking its (size class, previous run class) row's shares."""
    size = np.digitize(procs, size_edges)
    run = run_class(run_s)
    counts = np.zeros((len(size_edges) + 1, _RUN_CLASSES))
    np.add.at(counts, (size, run), 1.0)
    overall = counts.sum(axis=0) / max(counts.sum(), 1.0)
    totals = counts.sum(axis=1, keepdims=True)
    by_size: np.ndarray = np.where(totals > 0, counts / np.maximum(totals, 1.0), overall)
    if previous is None:
        return by_size
    counts = np.zeros((len(size_edges) + 1, _RUN_CLASSES + 1, _RUN_CLASSES))
    np.add.at(counts, (size, previous, run), 1.0)
    totals = counts.sum(axis=2, keepdims=True)
    by_previous: np.ndarray = np.where(
        totals >= _MIN_ROW_JOBS, counts / np.maximum(totals, 1.0), by_size[:, None, :]
    )
    if request_s is None:
        return by_previous
    counts = np.zeros((len(size_edges) + 1, _RUN_CLASSES + 1, _REQUEST_CLASSES, _RUN_CLASSES))
    np.add.at(counts, (size, previous, request_class(request_s), run), 1.0)
    totals = counts.sum(axis=3, keepdims=True)
    out: np.ndarray = np.where(
        totals >= _MIN_ROW_JOBS, counts / np.maximum(totals, 1.0), by_previous[:, :, None, :]
    )
    return out


_RUN_GAIN = 0.05  # how fast the run-class weights follow their error, per job drawn
_RUN_LOG_WEIGHT = 4.0  # and how far they may go (a factor of e^4 either way)


class _RunClassFeedback:
    """Keeps the training trace's run time per job size: the share of jobs under 10 s,
    under a minute, 10 minutes, an hour and longer within each size class (1, 2-4, 5-16
    processors...), and, given shares per previous run class (:func:`run_class_shares`
    with ``previous``), within each size class after each run class of the class's
    previous job, and given them per request class too (``request_s``), within each of
    those for requests under an hour, under 4 h and longer.

    The heads draw processors, request and run fraction in turn, and the network, trained
    for a few epochs, blurs how run time goes with size: on the first 20,000 jobs, 2.9% of
    SDSC-SP2's synthetic jobs under a minute were wider than a quarter of the machine
    (0.5% real), CTC-SP2's used 7.9 processors on average (3.7 real), and KTH-SP2 drew
    27% of its jobs under a minute (31% real). Those jobs carry most of a trace's EASY
    bsld. So the run-fraction draw is weighted, given the job's size class and its
    request, by a weight per run class (the class each fraction token gives at that
    request), and after each job the weights of its size class move by ``_RUN_GAIN`` x
    (training share - 1 for the class drawn, 0 for the others) in log space: a class drawn
    more often than its training share loses weight until it is drawn at that share. (A
    weight of training share / share so far, as :class:`_MarginalFeedback` uses, only
    meets a network that is far off halfway: 80% drawn against 10% settles at 40%.)

    Why the previous run class: on HPC2N-2002, a class's job after one that ran under a
    minute runs under a minute in 81% of cases and after one that ran longer in 5%; the
    network, teacher-forced, predicts 84% and 6%, but free-running it drew 74% and 9%
    (fit seed 1): the drawn short-run jobs came singly after long ones, not in the
    failure chains whose resubmissions run in the hole their predecessor left.

    Why the request class: the run class per size class does not say which jobs run
    short; HPC2N-2002's jobs asking 4 h or more ran 1-10 minutes in 4.0% of its jobs, and
    waited longest (5.9 h of EASY wait against 3.0 h for all), where a draw held per size
    class and previous run class had 2.8%.

    Why 10 s: bounded slowdown counts a run under 10 s as 10 s, so those jobs weigh most;
    12.2% of HPC2N-2002's jobs, 41.5 of its EASY bsld of 89.0; with the minute as the first
    edge, fit 0's draws held 9.6-9.7% and read -21% and +2%. A file from before holds four
    run classes (no 10 s edge) per size class only, and weights every previous run class
    alike; a file from before the request classes holds shares per previous run class and
    weights every request alike."""

    def __init__(self, shares: np.ndarray, fraction: TokenColumn) -> None:
        shares = np.asarray(shares, dtype=np.float64)
        # (size classes, previous run classes, request classes, run classes); one
        # "previous" or "request" row where the shares do not depend on it.
        if shares.ndim == 2:
            shares = shares[:, None, None, :]
        elif shares.ndim == 3:
            shares = shares[:, :, None, :]
        self.shares = shares
        classes = self.shares.shape[3]
        self.edges = _RUN_CLASS_EDGES_S if classes == _RUN_CLASSES else _EDGES_BEFORE_10_S
        self.log_weights = np.zeros_like(self.shares)
        # Each fraction token's value: an atom's own, a bin's median.
        medians = np.median(fraction.tables, axis=1) if fraction.tables.size else np.zeros(0)
        self.fraction = np.concatenate([fraction.categories, medians])[: fraction.vocab]

    def _row(self, size_class: int, previous: int, request_s: float) -> tuple[int, int, int]:
        _, previous_rows, request_rows, _ = self.shares.shape
        return (
            size_class,
            previous if previous_rows > 1 else 0,
            int(request_class(request_s)) if request_rows > 1 else 0,
        )

    def weights(self, size_class: int, request_s: float, previous: int) -> np.ndarray:
        """One weight per fraction token for a job of ``size_class`` asking ``request_s``
        whose class's previous job ran in run class ``previous`` (``_NO_PREVIOUS``: none)."""
        run = run_class(self.fraction * request_s, self.edges)
        row = self._row(size_class, previous, request_s)
        out: np.ndarray = np.exp(self.log_weights[row])[run]
        return out

    def drawn(self, size_class: int, previous: int, request_s: float, run_s: float) -> None:
        row = self._row(size_class, previous, request_s)
        error = self.shares[row].copy()
        error[int(run_class(run_s, self.edges))] -= 1.0
        self.log_weights[row] = np.clip(
            self.log_weights[row] + _RUN_GAIN * error, -_RUN_LOG_WEIGHT, _RUN_LOG_WEIGHT
        )


# A continued session's user's run of identical jobs, in buckets: 1, 2-4, 5-9, 10-49, 50+.
# How far the again feedback may move the head's log-odds: a head sure of a repeat (99.5%,
# log-odds 5.3) held to a share of 30% needs -6.1.
_AGAIN_LOG_ODDS = 8.0
_RUN_LENGTH_EDGES = np.array([2, 5, 10, 50])


def _logistic(z: float) -> float:
    return 0.5 * (1.0 + math.tanh(0.5 * z))


def run_length_bucket(run: np.ndarray | int) -> np.ndarray:
    """Each run length's bucket: 0 for a run of 1 (or none) ... 4 for 50 or more."""
    out: np.ndarray = np.searchsorted(_RUN_LENGTH_EDGES, run, side="right")
    return out


def again_shares(again: np.ndarray, session: np.ndarray, user_run: np.ndarray) -> np.ndarray:
    """Per run-length bucket of the user's run (:func:`run_length_bucket`), the share of
    the continued sessions' jobs that repeat their user's last job; a bucket without such
    jobs takes the share over all of them (0 without any)."""
    continued = session < _SLOTS
    bucket = run_length_bucket(user_run[continued])
    repeats = again[continued].astype(np.float64)
    counts = np.bincount(bucket, minlength=_RUN_LENGTH_EDGES.size + 1).astype(np.float64)
    sums = np.bincount(bucket, weights=repeats, minlength=_RUN_LENGTH_EDGES.size + 1)
    overall = float(repeats.mean()) if repeats.size else 0.0
    out: np.ndarray = np.where(counts > 0, sums / np.maximum(counts, 1.0), overall)
    return out


class _AgainFeedback:
    """Holds the "again" head's repeats down to the training trace's share for each length
    of the user's run (:func:`again_shares`), as :class:`_RunClassFeedback` holds run
    classes: a log-odds offset per run-length bucket, moved by ``_RUN_GAIN`` x (training
    share - 1 for a repeat, 0 for none) after each continued session's job, and never
    above 0: it stops a run feeding itself, and leaves a head that repeats less than the
    trace did as it is (pushed up as well, HPC2N-2002's fit 0 draw 0 read +43% and fit 2
    draw 0 -31%; held down only, +4% and +2%, and LANL-CM5's draws 0-1 +5% and +8%).

    Why: the head repeats a job with the probability it learned for a run that long, and
    in a free-running draw a long run feeds itself (a repeat makes the run, and the next
    repeat, longer), past the marginal feedback, which the repeated tokens skip. LANL-CM5
    whole, fit 0, draw 0, without it: 6.7% of the jobs were a run's 50th or later (real
    1.1%), a run's next job within the hour repeated it in 99.6% of cases there (real
    97.1%), and sessions held 2.50 jobs (real 1.76)."""

    def __init__(self, shares: np.ndarray) -> None:
        self.shares = np.asarray(shares, dtype=np.float64)
        self.log_odds = np.zeros_like(self.shares)

    def probability(self, logit: float, run: int) -> float:
        """The probability of a repeat, given the head's ``logit`` and the user's ``run``."""
        return _logistic(logit + float(self.log_odds[int(run_length_bucket(run))]))

    def drawn(self, run: int, repeated: bool) -> None:
        b = int(run_length_bucket(run))
        error = self.shares[b] - float(repeated)
        self.log_odds[b] = np.clip(self.log_odds[b] + _RUN_GAIN * error, -_AGAIN_LOG_ODDS, 0.0)


class SequenceModel:
    """Token columns, the class scheme (in metadata), the weekly rates and the network."""

    def __init__(
        self,
        metadata: SynthMetadata,
        columns: list[TokenColumn],
        network: _Network,
        token_shares: dict[str, np.ndarray],
        rates: np.ndarray,
        run_classes: np.ndarray | None = None,
        again: np.ndarray | None = None,
    ) -> None:
        self.metadata = metadata
        # The training trace's repeats per run length (None: no "again" head, or a file
        # from before they were recorded).
        self.again_shares = again
        self.token_shares = token_shares
        # The training trace's run classes per size class (None: a file from before them).
        self.run_classes = run_classes
        self.columns = columns
        self.network = network.eval()
        self.rates = np.asarray(rates, dtype=np.float64)
        self.vocab = self._vocab(columns, len(metadata.classes.classes))
        self.users = _Users(metadata.classes.classes)
        self._numpy: _NumpyNet | None = None

    @staticmethod
    def _vocab(columns: list[TokenColumn], classes: int) -> dict[str, int]:
        by_name = {c.name: c.vocab for c in columns}
        return {
            "gap": by_name["interarrival_s"],
            "session": _SLOTS + 1,
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
        return self.metadata.clock

    def _history(self, work_scale: float = 1.0) -> _History:
        """A fresh history; ``work_scale``: the share of each job's work the queue state
        counts (sampling more load than will be kept counts the share kept)."""
        clock = self.clock
        return _History(
            clock,
            OperationalTime(clock, self.rates),
            self.span_s,
            self.vocab,
            self.users,
            QueueState(self.metadata.machine_procs, work_scale=work_scale),
            runs=self.network.runs,
        )

    def _features(self, matrix: np.ndarray, labels: np.ndarray, user_ids: np.ndarray) -> _Batch:
        """Teacher-forcing inputs and tokens for every row of a training trace, in one pass.

        ``matrix[:, 0]`` holds operational gaps (already tokenized by the gap column)."""
        n = matrix.shape[0]
        history = self._history()
        procs_total = float(self.metadata.machine_procs)
        by_name = {c.name: c for c in self.columns}
        tokens = np.column_stack(
            [
                by_name["interarrival_s"].encode(matrix[:, 0]),
                np.zeros(n, dtype=np.int64),  # session: filled below
                labels.astype(np.int64),
            ]
            + [by_name[c].encode(matrix[:, k]) for k, c in enumerate(MODEL_COLUMNS) if k > 0]
        )
        users = np.array([self.users.index[int(u)] for u in user_ids], dtype=np.int64)
        numeric, slots, class_numeric = history.widths
        numbers = np.zeros((n, numeric), dtype=np.float32)
        previous = np.zeros((n, 4), dtype=np.int64)
        when = np.zeros((n, 4), dtype=np.int64)
        slot_numbers = np.zeros((n, slots), dtype=np.float32)
        slot_users = np.zeros((n, _SLOTS), dtype=np.int64)
        slot_class = np.zeros(n, dtype=np.int64)
        class_numbers = np.zeros((n, class_numeric), dtype=np.float32)
        class_previous = np.zeros((n, 3), dtype=np.int64)
        again = np.zeros(n, dtype=bool)
        user_run = np.zeros(n, dtype=np.int64)
        for i in range(n):
            numbers[i], previous[i], when[i, 0], when[i, 1] = history.context()
            op_gap = float(matrix[i, 0]) if i else 0.0
            at = history.operational.inverse(history.now_op + op_gap) if i else 0.0
            when[i, 2], when[i, 3] = self.clock.hour_and_weekday_at(at)
            slot_numbers[i], slot_users[i], classes = history.slots(at)
            session = history.session_token(int(users[i]))
            tokens[i, 1] = session
            slot_class[i] = classes[session] if session < _SLOTS else self.vocab["class"]
            class_numbers[i], class_previous[i] = history.class_context(int(tokens[i, 2]), at)
            shape = (int(tokens[i, 2]), int(tokens[i, 3]), int(tokens[i, 4]))
            again[i] = session < _SLOTS and history.last_shape(int(users[i])) == shape
            user_run[i] = history.run_length(int(users[i]))
            row = dict(zip(_HEADS, (int(t) for t in tokens[i]), strict=True))
            work = job_work(matrix[i, 1], matrix[i, 2], matrix[i, 3], procs_total)
            history.push(at - history.now_s, op_gap, row, int(users[i]), work)
        return _Batch(
            torch.from_numpy(numbers),
            torch.from_numpy(previous),
            torch.from_numpy(when),
            torch.from_numpy(slot_numbers),
            torch.from_numpy(slot_users),
            torch.from_numpy(slot_class),
            torch.from_numpy(class_numbers),
            torch.from_numpy(class_previous),
            torch.from_numpy(tokens),
            torch.from_numpy(again),
            torch.from_numpy(user_run),
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
        # Resubmissions are a user's: a log without user ids (ALCF-Theta's) has classes of
        # size alone, whose "previous job" is anyone's, so it gets no copy gates and run
        # classes per size class only.
        users_known = bool((trace.table.user >= 0).any())
        submit = trace.table.submit_s
        rates = weekly_rates(submit, trace.clock)
        operational = OperationalTime(trace.clock, rates).forward_many(submit)
        matrix = data.matrix.copy()
        matrix[:, 0] = np.diff(operational, prepend=operational[:1])
        columns = [
            TokenColumn.fit(name, matrix[:, k], bins) for k, name in enumerate(MODEL_COLUMNS)
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
            "job_when": True,
            "repeat": users_known,
            "runs": users_known,
            "span_s": float(submit[-1]),
            "session_slots": _SLOTS,
            "queue_numbers": QUEUE_NUMBERS,
            "peak_week_load": peak_week_load(trace.table, trace.machine_procs),
            "mean_backlog_s": mean_backlog_s(trace.table, trace.machine_procs),
            "easy_queue_s": easy_queue_s(trace.table, trace.machine_procs),
            "easy_wait_s": easy_wait_s(trace.table, trace.machine_procs),
        }
        for name, ratio in (
            ("short_backlog_ratio", short_backlog_ratio(trace.table, trace.machine_procs)),
            ("short_wait_ratio", short_wait_ratio(trace.table, trace.machine_procs)),
            ("after_short_share", after_short_share(trace.table, trace.machine_procs)),
        ):
            if ratio is not None:
                options[name] = ratio
        metadata = SynthMetadata.of_training(
            trace, data, kind="sequence", seed=seed, options=options
        )
        vocab = cls._vocab(columns, len(data.scheme.classes))
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            network = _Network(
                vocab, hidden, head_hidden, job_when=True, repeat=users_known, runs=users_known
            )
        placeholder = {h: np.ones(vocab[h]) / vocab[h] for h in _HEADS}
        run_s = np.minimum(trace.table.run_s, trace.table.requested_time_s)
        run_classes = run_class_shares(
            trace.table.procs,
            run_s,
            data.scheme.size_edges,
            previous=previous_run_classes(data.labels, run_s) if users_known else None,
            request_s=trace.table.requested_time_s if users_known else None,
        )
        model = cls(metadata, columns, network, placeholder, rates, run_classes)
        batch = model._features(matrix, data.labels, trace.table.user)
        tokens = batch.tokens.numpy()
        if network.runs:
            model.again_shares = again_shares(
                batch.again.numpy(), tokens[:, 1], batch.user_run.numpy()
            )
        model.token_shares = {
            head: np.bincount(tokens[:, k], minlength=vocab[head]) / tokens.shape[0]
            for k, head in enumerate(_HEADS)
        }
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
                loss = _loss(network, rows, model.users)
                optimizer.zero_grad()
                torch.autograd.backward(loss)
                optimizer.step()
                total += float(loss.detach()) * rows.tokens.shape[0]
            train_loss = total / n_train
            network.eval()
            with torch.no_grad():
                held_loss = float(_loss(network, held, model.users)) if n_held else train_loss
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
        self, n_jobs: int, rng: np.random.Generator, *, load: float | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """``n_jobs`` rows of MODEL_COLUMNS in submit order, and their users.

        ``load`` (processor-seconds asked per second, over the machine): run operational
        time faster or slower so that the jobs offer that much on average. The speed is
        ``load`` over the model's own load per operational second, estimated from the
        jobs drawn so far (starting from the training load over one operational day), so
        it settles within days and leaves the model's busy and quiet weeks, and the daily
        and weekly cycle, as they are. ``None``: the model's own pace."""
        if load is not None and not (math.isfinite(load) and load > 0):
            raise InvalidInputError("load must be a positive number", field="load", value=load)
        procs_total = float(self.metadata.machine_procs)
        prior_op_s = 86_400.0
        drawn_op_s = prior_op_s
        drawn_work = self.metadata.offered_load * procs_total * prior_op_s
        density = 1.0 if load is None else load / self.metadata.offered_load
        if self._numpy is None:
            self._numpy = _NumpyNet(self.network)
        net = self._numpy
        emb = net.embed
        by_name = {c.name: c for c in self.columns}
        classes = self.metadata.classes.classes
        # Jobs drawn at ``density`` times the model's load are thinned to its load later.
        history = self._history(work_scale=1.0 / density)
        rows = np.empty((n_jobs, len(MODEL_COLUMNS)), dtype=np.float64)
        users = np.empty(n_jobs, dtype=np.int64)
        # One uniform more for the "again" head (``runs``).
        uniforms = rng.random((n_jobs, 14 if net.again is not None else 13))
        feedback = _MarginalFeedback(self.token_shares)
        run_feedback = (
            None
            if self.run_classes is None
            else _RunClassFeedback(self.run_classes, by_name["run_fraction"])
        )
        again_feedback = (
            None
            if net.again is None or self.again_shares is None
            else _AgainFeedback(self.again_shares)
        )
        size_edges = self.metadata.classes.size_edges
        none_class = self.vocab["class"]
        repeat = self.network.repeat
        # A token that repeats the class's previous one repeats its value too (a
        # resubmitted job asks what it did; a bin's token alone would draw a new value
        # within the bin): the history keeps each class's and user's last values.
        last_run_class: dict[int, int] = {}  # each class's last job's run class
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
            op_gap = by_name["interarrival_s"].decode(gap_token, u[1]) if i else 0.0
            gap = 0.0
            if i:
                at_real = history.operational.inverse(history.now_op + op_gap / density)
                gap = float(max(round(at_real - history.now_s), 1))
            at = history.now_s + gap
            new_hour, new_weekday = self.clock.hour_and_weekday_at(at)
            new_when = np.concatenate([_hot(new_hour, 24), _hot(new_weekday, 7)])
            gap_embedding = emb["gap"][gap_token]
            slot_numbers, slot_users, slot_classes = history.slots(at)
            session_logits = net.mlp(
                net.heads["session"], np.concatenate([h, gap_embedding, slot_numbers, new_when])
            )
            session_logits[:_SLOTS][slot_users == self.users.none] = _MASKED
            session = _draw(session_logits, u[2], feedback.weights("session"))
            feedback.drawn("session", session)
            slot_class = slot_classes[session] if session < _SLOTS else none_class
            class_input = np.concatenate(
                [h, gap_embedding, new_when, emb["session"][session], emb["class"][slot_class]]
            )
            # A continued session's job may repeat its user's last one: its shape and values.
            taken: tuple[tuple[int, int, int], tuple[float, ...]] | None = None
            if net.again is not None and session < _SLOTS:
                slot_user = int(slot_users[session])
                chosen = np.append(
                    slot_numbers[session * _SLOT_NUMERIC : (session + 1) * _SLOT_NUMERIC],
                    slot_numbers[_SLOTS * _SLOT_NUMERIC + session],
                )
                logit = float(net.mlp(net.again, np.concatenate([class_input, chosen]))[0])
                run = history.run_length(slot_user)
                p = (
                    _logistic(logit)
                    if again_feedback is None
                    else again_feedback.probability(logit, run)
                )
                last_job = history.last_job(slot_user)
                if u[13] < p and last_job is not None:
                    taken = last_job
                if again_feedback is not None:
                    again_feedback.drawn(run, taken is not None)
            if taken is None:
                class_logits = net.mlp(net.heads["class"], class_input)
                class_logits[~self.users.allowed(session, slot_users)] = _MASKED
                label = _draw(class_logits, u[3], feedback.weights("class"))
            else:
                label = taken[0][0]
            feedback.drawn("class", label)
            class_numbers, class_previous = history.class_context(label, at)
            job = np.concatenate(
                [
                    h,
                    gap_embedding,
                    emb["session"][session],
                    emb["class"][label],
                    class_numbers,
                    emb["procs"][class_previous[0]],
                    emb["request"][class_previous[1]],
                    emb["fraction"][class_previous[2]],
                    *([new_when] if self.network.job_when else []),
                ]
            )
            tokens = {"gap": gap_token, "session": session, "class": label}
            values = [gap]
            for k, (head, column) in enumerate(
                (
                    ("procs", "procs"),
                    ("request", "requested_time_s"),
                    ("fraction", "run_fraction"),
                    ("status", "status"),
                )
            ):
                copied = repeat and head in _COPIED
                if taken is not None and head in _AGAIN_TAKES:
                    token = taken[0][_AGAIN_TAKES.index(head)]
                    values.append(taken[1][k])
                else:
                    weights = feedback.weights(head)
                    if head == "fraction" and run_feedback is not None:
                        size_class = int(np.searchsorted(size_edges, values[1], side="right"))
                        previous_run = last_run_class.get(label, _NO_PREVIOUS)
                        weights = weights * run_feedback.weights(
                            size_class, values[2], previous_run
                        )
                    logits = net.mlp(net.heads[head], job)
                    if copied and class_previous[k] < logits.size:
                        logits[class_previous[k]] += net.mlp(net.copy[head], job)[0]
                    token = _draw(logits, u[4 + 2 * k], weights)
                    repeated = copied and token == class_previous[k]
                    class_values = history.class_values.get(label)
                    if repeated and head in _VALUE_COPIED and class_values is not None:
                        values.append(class_values[k])
                    else:
                        values.append(by_name[column].decode(token, u[5 + 2 * k]))
                feedback.drawn(head, token)
                tokens[head] = token
                same = [[float(token == class_previous[k])]] if copied else []
                job = np.concatenate([job, emb[head][token], *same])
            rows[i] = values
            if run_feedback is not None:
                run_s = values[3] * values[2]
                run_feedback.drawn(size_class, previous_run, values[2], run_s)
                last_run_class[label] = int(run_class(run_s, run_feedback.edges))
            work = job_work(values[1], values[2], values[3], procs_total)
            if load is not None:
                drawn_op_s += op_gap
                drawn_work += work
                density = float(np.clip(load * procs_total * drawn_op_s / drawn_work, 0.1, 10.0))
            user = self._user(classes[label], session, slot_users, u[12])
            users[i] = self.users.ids[user]
            copied_values = tuple(values[1 : 1 + len(_VALUE_COPIED)])
            history.push(gap, op_gap, tokens, user, work, copied_values)
            feedback.next_job()
        return rows, users

    def _user(self, job_class: Any, session: int, slot_users: np.ndarray, u: float) -> int:
        """The job's user index: the continued slot's, else one of the class's users
        drawn by their job counts, those with an open slot left out (when any remain)."""
        if session < _SLOTS:
            return int(slot_users[session])
        candidates = np.array([self.users.index[int(x)] for x in job_class.users])
        weights = np.array(job_class.user_jobs, dtype=np.float64)
        others = ~np.isin(candidates, slot_users)
        if others.any():
            candidates, weights = candidates[others], weights[others]
        cumulative = np.cumsum(weights)
        pick = int(np.searchsorted(cumulative, u * cumulative[-1], side="right"))
        return int(candidates[min(pick, candidates.size - 1)])

    def state(self) -> dict[str, Any]:
        return {
            "columns": [c.state() for c in self.columns],
            "network": self.network.state_dict(),
            "token_shares": [
                torch.from_numpy(self.token_shares[h].astype(np.float64)) for h in _HEADS
            ],
            "weekly_rates": torch.from_numpy(self.rates.astype(np.float64)),
            **(
                {}
                if self.run_classes is None
                else {"run_classes": torch.from_numpy(self.run_classes.astype(np.float64))}
            ),
            **(
                {}
                if self.again_shares is None
                else {"again_shares": torch.from_numpy(self.again_shares.astype(np.float64))}
            ),
        }

    @classmethod
    def from_state(cls, metadata: SynthMetadata, state: dict[str, Any]) -> SequenceModel:
        with state_errors("sequence model"):
            slots = metadata.options.get("session_slots")
            if slots != _SLOTS:
                raise ValueError(
                    f"fitted with {slots} session slots; this build uses {_SLOTS} (refit it)"
                )
            queue = metadata.options.get("queue_numbers")
            if queue != QUEUE_NUMBERS:
                raise ValueError(
                    f"fitted with {queue or 'no'} queue-state numbers; this build conditions "
                    f"on {QUEUE_NUMBERS} (refit it)"
                )
            columns = [TokenColumn.from_state(spec) for spec in state["columns"]]
            names = tuple(c.name for c in columns)
            if names != MODEL_COLUMNS:
                raise ValueError(f"columns {names}, expected {MODEL_COLUMNS}")
            options = metadata.options
            vocab = cls._vocab(columns, len(metadata.classes.classes))
            network = _Network(
                vocab,
                int(options["hidden"]),
                int(options["head_hidden"]),
                job_when=bool(options.get("job_when", False)),
                repeat=bool(options.get("repeat", False)),
                runs=bool(options.get("runs", False)),
            )
            network.load_state_dict(state["network"], strict=True)
            shares = {
                h: t.double().numpy() for h, t in zip(_HEADS, state["token_shares"], strict=True)
            }
            for h in _HEADS:
                if shares[h].shape != (vocab[h],):
                    raise ValueError(
                        f"{h} token shares of shape {shares[h].shape}, vocab {vocab[h]}"
                    )
            rates = state["weekly_rates"].double().numpy()
            if rates.shape != (WEEK_BINS,):
                raise ValueError(f"weekly rates of shape {rates.shape}, expected ({WEEK_BINS},)")
            # A file from before the run classes were recorded samples without their feedback.
            run_classes = state.get("run_classes")
            if run_classes is not None:
                run_classes = run_classes.double().numpy()
                # Per size class in four run classes (a file from before the 10 s edge) or
                # five (a trace without user ids), or per size class and previous run class
                # (a file from before the request classes), or per request class too.
                sizes = len(metadata.classes.size_edges) + 1
                shapes = (
                    (sizes, _RUN_CLASSES - 1),
                    (sizes, _RUN_CLASSES),
                    (sizes, _RUN_CLASSES + 1, _RUN_CLASSES),
                    (sizes, _RUN_CLASSES + 1, _REQUEST_CLASSES, _RUN_CLASSES),
                )
                if run_classes.shape not in shapes:
                    raise ValueError(
                        f"run classes of shape {run_classes.shape}, expected one of {shapes}"
                    )
            # A file from before the repeats per run length samples the again head alone.
            again = state.get("again_shares")
            if again is not None:
                again = again.double().numpy()
                buckets = (_RUN_LENGTH_EDGES.size + 1,)
                if not network.runs or again.shape != buckets:
                    raise ValueError(
                        f"again shares of shape {again.shape}, expected {buckets} "
                        "with a network that has the again head"
                    )
                if not np.all((again >= 0) & (again <= 1)):
                    raise ValueError(f"again shares outside [0, 1]: {again.tolist()}")
        return cls(metadata, columns, network, shares, rates, run_classes, again)


# The heads a repeated job (``again``) takes from its user's last job instead of drawing.
_AGAIN_TAKES = ("class", "procs", "request")


def _loss(network: _Network, batch: _Batch, users: _Users) -> torch.Tensor:
    """Cross-entropy of every head, summed, each a mean over the rows. With the "again"
    head (``runs``), its own over the continued sessions' rows, and a repeated job's
    class, processors and request (taken, not drawn) count for nothing."""
    logits = _logits(network, batch, users)
    total = batch.tokens.new_zeros((), dtype=torch.float32)
    drawn = (~batch.again).float() if network.runs else None
    for k, head in enumerate(_HEADS):
        if drawn is not None and head in _AGAIN_TAKES:
            each = functional.cross_entropy(logits[head], batch.tokens[:, k], reduction="none")
            total = total + (each * drawn).mean()
        else:
            total = total + functional.cross_entropy(logits[head], batch.tokens[:, k])
    if network.runs:
        continued = batch.tokens[:, 1] < _SLOTS
        each = functional.binary_cross_entropy_with_logits(
            logits["again"], batch.again.float(), reduction="none"
        )
        total = total + (each * continued.float()).mean()
    return total
