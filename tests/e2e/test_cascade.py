"""The cascade end to end on the real local SLURM: ``rightsize demo cascade --json``.

Every agent runs for real (in-process bus, SQLite, the LangGraph checkpointer, the
planner, the local SLURM through ``SlurmExecutor``): the seeded CNN of
``examples/cascade/train.py`` is asked for in the ``debug`` partition, whose limit is one
minute. The demo's defaults (40 epochs of 8192 samples, 20 s of each job kept for start-up)
took 12 minutes on the shared 2-core VM. Here the work is three epochs of 4096 samples (about 7
s each when this test was written, 30 s at load 9) and each job's budget 8 s (52 s of the
minute kept): one epoch a job, three jobs, on a loaded VM; on a quiet one (a fresh clone,
2026-11-27: the whole test 37 s) two epochs fit a job, so two jobs. Either way the
training does not fit one job, which is what is checked: at least two jobs, each resuming
where the last stopped. (16 epochs of 1024 samples ran one epoch per job at load 7: 16
jobs, 8 minutes; 8192 samples took longer than the minute at load 9.) It must
finish through them, each submitted once, each ending COMPLETED in SLURM's own job
completion log, and its final weights must equal those of the same script run
uninterrupted beside it.
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tools.actuators.slurm import parse_jobcomp

REPO = Path(__file__).resolve().parents[2]
EPOCHS = 3
SHORT_SEGMENTS = (
    *("--epochs", str(EPOCHS), "--samples", "4096"),
    *("--segment-overhead-s", "52", "--timeout-s", "1500"),
)


@pytest.mark.e2e
@pytest.mark.slurm
@pytest.mark.timeout(1800)
def test_a_training_longer_than_its_partition_finishes_through_one_minute_jobs_same_weights(
    slurm_cluster: dict[str, str], tmp_path: Path
) -> None:
    env = {
        **slurm_cluster,
        "RIGHTSIZE_HOME": str(tmp_path / "home"),
        "PYTHONPATH": str(REPO),
    }
    for name in ("RIGHTSIZE_KB_URL", "RIGHTSIZE_MONGO_URL", "RIGHTSIZE_KAFKA_BOOTSTRAP"):
        env.pop(name, None)
    done = subprocess.run(
        [sys.executable, "-m", "rightsize", "demo", "cascade", "--json", *SHORT_SEGMENTS],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=1700,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout)

    assert {"segments", "final_state", "slurm_job_ids", "jobcomp_log"} <= set(result)
    assert result["final_state"] == "completed"
    assert result["segments"] >= 2  # longer than one job of the partition (3 when loaded)
    assert result["weights_match_uninterrupted"] is True
    jobs = result["slurm_job_ids"]
    assert len(jobs) == len(set(jobs)) == result["segments"]  # one job per segment, no repeats

    # SLURM's own record: every segment ran in the 1-minute partition and completed.
    records = parse_jobcomp(Path(result["jobcomp_log"]).read_text())
    for job_id in jobs:
        record = records[job_id]
        assert record["JobState"] == "COMPLETED", record
        assert record["Partition"] == "debug" and record["TimeLimit"] == "1", record
    # The segments ran one after another, each resuming where the last stopped.
    work = Path(result["work_dir"])
    progress = [
        [line for line in (work / f"rightsize-{job}.out").read_text().splitlines()
         if line.startswith("RIGHTSIZE_PROGRESS")]
        for job in jobs
    ]  # fmt: skip
    for before, after in itertools.pairwise(progress):
        assert after[0].split("=")[1] == before[-1].split("=")[1]
    assert progress[-1][-1] == f"RIGHTSIZE_PROGRESS epoch={EPOCHS}/{EPOCHS}"
    # The profiling run that taught the estimators this script went through SLURM too.
    assert (
        result["profiling_job_ids"]
        and records[result["profiling_job_ids"][0]]["JobState"] == "COMPLETED"
    )
    assert os.path.exists(work / "final.pt")
