"""Feedback that keeps a free-running sequence at its training trace: the token mix, the
run classes (per size class, previous run class and request class) and the share of
repeated jobs per run length (:mod:`simulations.synth.sequence`)."""

from __future__ import annotations

import math

import numpy as np

from simulations.synth.sequence_tokens import (
    _SLOTS,
    TokenColumn,
)

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
