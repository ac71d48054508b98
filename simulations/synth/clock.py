"""Wall-clock time of a trace's jobs: local hour of day and day of week.

SWF submit times count seconds from the header's ``UnixStartTime`` (0 when absent, as in
ALCF-Theta, whose submit times are themselves Unix times); ``TimeZoneString`` names the
site's zone. A job's local time is that zone's wall clock at ``UnixStartTime + submit``;
a trace without a zone (or with one this machine does not know) is read in UTC, the same
way for the real trace and for every synthetic trace fitted on it, so their profiles
compare like with like.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, tzinfo
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import numpy as np

__all__ = ["TraceClock"]

_HOUR_S = 3600
_DAY_S = 86_400


def _zone(name: str | None) -> tzinfo:
    if not name:
        return UTC
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        return UTC


@dataclass(frozen=True)
class TraceClock:
    """Where a trace's t=0 sits in real time: ``epoch_s`` of its first job, and its zone."""

    epoch_s: int
    zone_name: str | None = None

    def _offsets_s(self, hours: np.ndarray) -> np.ndarray:
        """UTC offset in seconds at each whole UTC hour (offsets change on the hour)."""
        zone = _zone(self.zone_name)
        if zone is UTC:
            return np.zeros(hours.size, dtype=np.int64)
        unique, inverse = np.unique(hours, return_inverse=True)
        offsets = np.array(
            [
                int(datetime.fromtimestamp(int(h) * _HOUR_S, zone).utcoffset().total_seconds())  # type: ignore[union-attr]
                for h in unique
            ],
            dtype=np.int64,
        )
        out: np.ndarray = offsets[inverse.reshape(-1)]
        return out

    def local_seconds(self, since_start_s: np.ndarray) -> np.ndarray:
        """Local wall-clock seconds since 1970 of times ``since_start_s`` after t=0."""
        utc = self.epoch_s + np.floor(np.asarray(since_start_s, dtype=np.float64)).astype(np.int64)
        local: np.ndarray = utc + self._offsets_s(utc // _HOUR_S)
        return local

    def hour_and_weekday(self, since_start_s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Local hour (0-23) and weekday (0 = Monday) of each time after t=0."""
        local = self.local_seconds(since_start_s)
        hour: np.ndarray = (local % _DAY_S) // _HOUR_S
        # 1970-01-01 was a Thursday (weekday 3).
        weekday: np.ndarray = (local // _DAY_S + 3) % 7
        return hour, weekday

    def hour_and_weekday_at(self, since_start_s: float) -> tuple[int, int]:
        """The same for one time (what a sequential sampler asks at every job)."""
        utc = self.epoch_s + int(since_start_s)
        zone = _zone(self.zone_name)
        offset = 0
        if zone is not UTC:
            offset = int(datetime.fromtimestamp(utc, zone).utcoffset().total_seconds())  # type: ignore[union-attr]
        local = utc + offset
        return int((local % _DAY_S) // _HOUR_S), int((local // _DAY_S + 3) % 7)
