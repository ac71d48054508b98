"""The live snapshot through the real local SLURM (``squeue --json``, ``sinfo``, accounting)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from rightsize.cli import app
from tools.actuators.slurm import SlurmExecutor
from tools.waits.live import live_queue
from tools.waits.predictor import WaitPredictor

pytestmark = [pytest.mark.slurm, pytest.mark.timeout(300)]


async def test_the_live_queue_is_a_valid_snapshot_and_every_pending_job_is_answered(
    slurm_cluster: dict[str, str],
) -> None:
    snapshot, history = await live_queue(SlurmExecutor())
    assert snapshot.total_procs >= 1
    assert sum(job.procs for job in snapshot.running) <= snapshot.total_procs
    found = WaitPredictor(history).predict(snapshot)
    assert [p.job_id for p in found.predictions] == [j.job_id for j in snapshot.pending]
    for row in found.predictions:
        assert snapshot.taken_at <= row.p10_s <= row.start_s <= row.p90_s


def test_queue_predict_live_prints_the_issue_shape(slurm_cluster: dict[str, str]) -> None:
    result = CliRunner().invoke(app, ["queue", "predict", "--live", "--json"])
    assert result.exit_code == 0, result.output
    assert set(json.loads(result.stdout)) == {"predictions"}
