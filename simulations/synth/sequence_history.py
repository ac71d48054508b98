"""The sequence model's history: users as indices and the state one job at a time leaves
for the next (last gaps, queue state, session slots, runs of identical jobs), the same
code in training and in sampling (:mod:`simulations.synth.sequence`)."""

from __future__ import annotations

import math
from collections import deque
from typing import Any

import numpy as np
import torch

from simulations.synth.clock import TraceClock
from simulations.synth.intensity import OperationalTime
from simulations.synth.queue_state import QUEUE_NUMBERS, QueueState
from simulations.synth.sequence_tokens import (
    _LAST_GAPS,
    _NEW_SESSION,
    _POSITION_BINS,
    _QUEUE_AT,
    _SLOT_NUMERIC,
    _SLOTS,
    _run_number,
    _widths,
)
from simulations.synth.temporal import SESSION_GAP_S


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
