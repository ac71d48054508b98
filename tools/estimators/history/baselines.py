"""The classic run-time predictors every learned one is measured against.

- the user's own request;
- last-2, the EASY++ predictor (Tsafrir, Etsion and Feitelson, IEEE TPDS 2007): the mean
  run time of the user's last two finished jobs, capped at the job's request; with fewer
  than two finished jobs it falls back to the request.

Both are online in the same way as the history estimator: a job's run time joins the
user's history when the job ends (``observe``), and only then.
"""

from __future__ import annotations

from collections import deque
from typing import Literal

from tools.estimators.history.features import HistoryJob

__all__ = ["LastTwo", "user_request"]


def user_request(job: HistoryJob) -> float | None:
    """The user's own guess: the requested time, if there is one."""
    requested = job.requested_time_s
    return requested if requested is not None and requested > 0 else None


class LastTwo:
    """EASY++: the mean of the user's last two finished values, capped at the request.

    ``quantity="run_time"`` is Tsafrir's predictor; ``"memory"`` applies the same rule to
    used memory per processor, without the cap (memory requests are not enforced on the
    one trace that records use: LANL-CM5 jobs often used more than they asked).
    """

    def __init__(self, quantity: Literal["run_time", "memory"] = "run_time") -> None:
        self.quantity = quantity
        self._last: dict[str, deque[float]] = {}

    def _requested(self, job: HistoryJob) -> float | None:
        if self.quantity == "run_time":
            return user_request(job)
        asked = job.requested_memory_kb_per_proc
        return asked if asked is not None and asked > 0 else None

    def predict(self, job: HistoryJob) -> float | None:
        """The prediction, or ``None`` when neither history nor a request exists."""
        requested = self._requested(job)
        history = self._last.get(job.user) if job.user is not None else None
        if history is None or len(history) < 2:
            return requested
        mean = (history[0] + history[1]) / 2.0
        if self.quantity == "memory" or requested is None:
            return mean
        # Tsafrir caps at the request: the scheduler kills the job there anyway.
        return min(mean, requested)

    def observe(self, job: HistoryJob) -> None:
        """A finished job joins its user's history (when its value is known)."""
        value = job.run_s if self.quantity == "run_time" else job.used_memory_kb_per_proc
        if job.user is None or value is None:
            return
        self._last.setdefault(job.user, deque(maxlen=2)).append(float(value))
