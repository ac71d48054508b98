"""Parsing quantities whose unit a person may write out: memory and durations.

Fields carry their unit in their name (``memory_mb``, ``walltime_s``). A number given
to such a field is read in that unit; a string must say its unit ("16 GB", "90 min"),
because "16" alone is ambiguous between MB and GB and a wrong guess is a 1000x error.
"""

from __future__ import annotations

import re

__all__ = ["parse_duration_s", "parse_memory_mb"]

_MEMORY_UNITS_MB = {
    "kb": 1 / 1024,  # SWF and SLURM "KB" mean KiB in practice
    "kib": 1 / 1024,
    "mb": 1.0,
    "mib": 1.0,
    "m": 1.0,
    "gb": 1024.0,
    "gib": 1024.0,
    "g": 1024.0,
    "tb": 1024.0 * 1024.0,
    "tib": 1024.0 * 1024.0,
    "t": 1024.0 * 1024.0,
}
_DURATION_UNITS_S = {
    "s": 1,
    "sec": 1,
    "second": 1,
    "seconds": 1,
    "m": 60,
    "min": 60,
    "minute": 60,
    "minutes": 60,
    "h": 3600,
    "hr": 3600,
    "hour": 3600,
    "hours": 3600,
    "d": 86400,
    "day": 86400,
    "days": 86400,
}
_QUANTITY = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([A-Za-z]+)\s*$")
_CLOCK = re.compile(r"^\s*(?:(\d+)-)?(\d+):(\d{1,2})(?::(\d{1,2}))?\s*$")


def parse_memory_mb(value: object, field: str = "memory_mb") -> int:
    """Memory in MiB (called MB throughout, as SLURM does) from an int or a "16 GB" string.

    Raises ValueError naming the field and value for negatives, bools, and unit-less strings.
    """
    if isinstance(value, bool):
        raise ValueError(f"{field}: expected memory, got boolean {value!r}")
    if isinstance(value, int | float):
        number = float(value)
    elif isinstance(value, str):
        match = _QUANTITY.match(value)
        if match is None:
            raise ValueError(
                f"{field}: {value!r} has no unit; write e.g. '16 GB' or give a number of MB"
            )
        unit = match.group(2).lower()
        if unit not in _MEMORY_UNITS_MB:
            raise ValueError(f"{field}: unknown memory unit {match.group(2)!r} in {value!r}")
        number = float(match.group(1)) * _MEMORY_UNITS_MB[unit]
    else:
        raise ValueError(f"{field}: expected memory, got {type(value).__name__} {value!r}")
    if number < 0:
        raise ValueError(f"{field}: memory cannot be negative, got {value!r}")
    return round(number)


def parse_duration_s(value: object, field: str = "walltime_s") -> int:
    """Seconds from an int, a "90 min" string or a SLURM clock "[D-]HH:MM[:SS]"."""
    if isinstance(value, bool):
        raise ValueError(f"{field}: expected a duration, got boolean {value!r}")
    if isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str):
        clock = _CLOCK.match(value)
        match = _QUANTITY.match(value)
        if clock is not None:
            days, hours, minutes, secs = (int(g) if g else 0 for g in clock.groups())
            seconds = days * 86400 + hours * 3600 + minutes * 60 + secs
        elif match is not None and match.group(2).lower() in _DURATION_UNITS_S:
            seconds = float(match.group(1)) * _DURATION_UNITS_S[match.group(2).lower()]
        else:
            raise ValueError(
                f"{field}: {value!r} is not a duration; write e.g. '90 min', '2 h' or '1-12:00:00'"
            )
    else:
        raise ValueError(f"{field}: expected a duration, got {type(value).__name__} {value!r}")
    if seconds < 0:
        raise ValueError(f"{field}: duration cannot be negative, got {value!r}")
    return round(seconds)
