"""The planner's fixed wait rule, measured: its starts on a snapshot, and its error band.

``tools.planning.queue`` predicts a plan's wait without history: running jobs end at
``max(0.4 x limit - elapsed, 0.5 x (limit - elapsed))``, pending jobs run 0.4 x their
limit, conservative backfilling, oldest first. ``rule_starts`` is that rule on a
``WaitSnapshot``, so ``benchmarks/waits.py`` can score it against recorded waits.

``RULE_LOG_ERROR`` is what the benchmark measured: the 10th and 90th percentiles of
``log(actual + 60 s) - log(rule + 60 s)`` over every pending job at the benchmark's
instants on the six shared traces (``python benchmarks/waits.py``, its "rule error"
lines), by how long a wait the rule predicted: the error depends on it (when the rule
says "now", the median real wait was 12 hours: a job that fits and still waits is held
by something the rule does not see). ``rule_interval`` turns a wait from the rule into
p10-p90 with the band of its class: a calibrated residual model, until the plan has the
learned predictor's history to go on.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import NDArray

from tools.waits.simulate import backfill_starts
from tools.waits.snapshot import WaitSnapshot

__all__ = [
    "RULE_CLASSES_S",
    "RULE_LOG_ERROR",
    "RUNTIME_FRACTION",
    "rule_interval",
    "rule_starts",
]

RUNTIME_FRACTION = 0.4
_OFFSET_S = 60.0
# (rule's wait below this many seconds, p10, p90) of log(actual + 60) - log(rule + 60),
# pooled over the six shared traces (13,283 pending jobs; benchmarks/waits.py)
RULE_CLASSES_S = (600.0, 7200.0, 43200.0, math.inf)
RULE_LOG_ERROR: tuple[tuple[float, float, float], ...] = (
    (600.0, 3.48, 9.14),
    (7200.0, -0.03, 4.90),
    (43200.0, -0.82, 2.99),
    (math.inf, -2.19, 2.03),
)


def rule_starts(snapshot: WaitSnapshot) -> NDArray[np.float64]:
    """The planner's rule: waits from ``taken_at`` for every pending job."""
    t = snapshot.taken_at
    total = snapshot.total_procs
    pending, running = snapshot.pending, snapshot.running
    if not pending:
        return np.zeros(0)
    remaining = [
        max(
            RUNTIME_FRACTION * j.requested_s - (t - j.start_s),
            0.5 * (j.requested_s - (t - j.start_s)),
            60.0,
        )
        for j in running
    ]
    submit = np.array([j.submit_s for j in pending])
    return backfill_starts(
        total,
        np.array(remaining),
        np.array([j.procs for j in running], dtype=np.int64),
        np.array([RUNTIME_FRACTION * j.requested_s for j in pending]),
        np.array([min(j.procs, total) for j in pending], dtype=np.int64),
        np.lexsort((np.arange(len(pending)), submit)),
    )


def rule_interval(wait_s: float) -> tuple[float, float]:
    """p10 and p90 of the wait, from the rule's measured error on the shared traces."""
    low, high = next((lo, hi) for below, lo, hi in RULE_LOG_ERROR if wait_s < below)
    base = math.log(max(wait_s, 0.0) + _OFFSET_S)
    return (
        max(math.exp(base + low) - _OFFSET_S, 0.0),
        max(math.exp(base + high) - _OFFSET_S, 0.0),
    )
