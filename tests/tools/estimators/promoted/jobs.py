"""Finished jobs made for the promoted run-time tests: three applications whose run time
falls with the square root of the cores, with 10% noise (what a model has to learn)."""

from __future__ import annotations

import math
import random
from datetime import datetime, timedelta

from knowledge_base.records import JobRecord, JobState

BASE = {"lmp": 1800.0, "gromacs": 600.0, "vasp": 5400.0}


def job(n: int, at: datetime, *, shift: float = 1.0, rng: random.Random) -> JobRecord:
    """Job ``n`` submitted (and started) ``at``: application and cores cycle with ``n``;
    ``shift`` scales its run time (a drift)."""
    app = list(BASE)[n % 3]
    cores = [4, 8, 16, 32][n % 4]
    run_s = BASE[app] * (16 / cores) ** 0.5 * shift * math.exp(rng.gauss(0, 0.1))
    return JobRecord(
        job_id=str(n),
        system="testcluster",
        application=app,
        state=JobState.COMPLETED,
        submit_time=at,
        start_time=at,
        end_time=at + timedelta(seconds=run_s),
        run_s=round(run_s),
        requested_cores=cores,
        requested_walltime_s=4 * 3600,
    )
