"""Queue snapshots and the expected-wait model (a conservative-backfill simulation)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from knowledge_base.catalog import Catalog, NodeType, Partition, System
from knowledge_base.errors import InvalidInputError
from knowledge_base.records import JobState
from tests.conftest import FIXTURES
from tools.actuators.model import QueueEntry
from tools.actuators.slurm import parse_sinfo_pools
from tools.actuators.state import ClusterState
from tools.planning.queue import (
    PoolState,
    QueueModel,
    QueueSnapshot,
    load_snapshots,
    snapshot_from_state,
)

NOW = datetime(2024, 4, 16, 14, 0, tzinfo=UTC)
SYSTEM = System(
    name="lab",
    center="lab",
    node_types=[NodeType(name="n", cores=4, memory_mb=8000)],
    partitions=[
        Partition(name="short", node_type="n", max_nodes=4, max_cores_per_node=4,
                  max_memory_mb=8000, max_minutes=60),
        Partition(name="long", node_type="n", max_nodes=4, max_cores_per_node=4,
                  max_memory_mb=8000, max_minutes=2880),
    ],
)  # fmt: skip
CATALOG = Catalog(systems=[SYSTEM])


def _job(state: JobState, nodes: int, limit_h: float, **extra: object) -> QueueEntry:
    return QueueEntry.model_validate(
        {"job_id": "1", "state": state, "partition": "long", "nodes": nodes,
         "time_limit_s": int(limit_h * 3600), **extra}
    )  # fmt: skip


def _model(*jobs: QueueEntry, idle: int | None = None, total: int | None = 4) -> QueueModel:
    snapshot = QueueSnapshot(
        system="lab",
        taken_at=NOW,
        pools=[PoolState(name="all", node_type="n", total_nodes=total, idle_nodes=idle)],
        jobs=list(jobs),
    )
    return QueueModel([snapshot], CATALOG)


def _wait(model: QueueModel, nodes: int = 1, walltime_s: float = 3600) -> float | None:
    return model.wait(SYSTEM, SYSTEM.partition("short"), nodes, walltime_s).wait_s


def test_an_idle_pool_starts_a_job_now() -> None:
    assert _wait(_model()) == 0.0


def test_a_full_pool_waits_for_the_first_expected_end() -> None:
    # 10 h limits, just started: expected to end at max(0.4 x 10, 0.5 x 10) = 5 h
    busy = [_job(JobState.RUNNING, 1, 10, start_time=NOW) for _ in range(4)]
    assert _wait(_model(*busy)) == pytest.approx(5 * 3600)


def test_pending_jobs_ahead_push_the_wait_back() -> None:
    busy = [_job(JobState.RUNNING, 1, 10, start_time=NOW) for _ in range(4)]
    ahead = [_job(JobState.PENDING, 4, 10, submit_time=NOW - timedelta(hours=1))]
    # the 4-node job ahead runs 0.4 x 10 h = 4 h after the running ones end at 5 h
    assert _wait(_model(*busy, *ahead)) == pytest.approx(9 * 3600)


def test_a_short_job_backfills_a_hole_before_a_reservation() -> None:
    running = [
        _job(JobState.RUNNING, 1, 2, start_time=NOW),  # ends at 1 h
        *[_job(JobState.RUNNING, 1, 20, start_time=NOW) for _ in range(3)],  # end at 10 h
    ]
    wide = _job(JobState.PENDING, 4, 10, submit_time=NOW)  # reserved from 10 h
    model = _model(*running, wide)
    assert _wait(model, walltime_s=3600) == pytest.approx(3600)  # fits the 1 h-10 h hole
    assert _wait(model, walltime_s=20 * 3600) == pytest.approx(14 * 3600)  # after the wide one


def test_more_nodes_than_the_pool_has_can_never_start() -> None:
    estimate = _model().wait(SYSTEM, SYSTEM.partition("short"), 5, 60)
    assert estimate.wait_s is None and estimate.never
    assert estimate.basis.startswith("needs 5 nodes")


def test_no_snapshot_for_a_system_means_an_unknown_wait(catalog: Catalog) -> None:
    pitzer = catalog.system("pitzer")
    estimate = QueueModel([], catalog).wait(pitzer, pitzer.partition("serial"), 1, 60)
    assert estimate.wait_s is None
    assert "no queue information" in estimate.basis


def test_availability_counts_jobs_and_idle_nodes() -> None:
    model = _model(_job(JobState.RUNNING, 1, 1, start_time=NOW), _job(JobState.PENDING, 1, 1))
    seen = model.availability("lab", "short")
    assert seen is not None
    assert (seen.idle_nodes, seen.total_nodes, seen.running_jobs, seen.pending_jobs) == (3, 4, 1, 1)


def test_the_example_snapshot_gives_pitzer_gpus_a_day_long_wait(
    catalog: Catalog, pitzer_queue: QueueModel
) -> None:
    pitzer = catalog.system("pitzer")
    gpu = pitzer_queue.wait(pitzer, pitzer.partition("gpuserial"), 1, 2 * 3600).wait_s
    cpu = pitzer_queue.wait(pitzer, pitzer.partition("serial"), 1, 22 * 3600).wait_s
    assert gpu is not None and 20 * 3600 < gpu < 32 * 3600  # seed 001: 26 h
    assert cpu == 0.0


def test_a_bad_snapshot_file_names_the_field(tmp_path: Path) -> None:
    path = tmp_path / "q.json"
    path.write_text(json.dumps({"system": "lab", "taken_at": "2024-01-01T00:00:00Z",
                                "jobs": [{"job_id": "1", "state": "sleeping"}]}))  # fmt: skip
    with pytest.raises(InvalidInputError) as caught:
        load_snapshots(path)
    assert caught.value.field == "jobs.0.state"
    assert str(path) in str(caught.value)


def test_a_live_slurm_snapshot_has_one_pool_per_node_set() -> None:
    sinfo = (FIXTURES / "slurm" / "sinfo.json").read_text()  # node vm, idle, debug + long
    entries = [_job(JobState.RUNNING, 1, 1, start_time=NOW)]
    state = ClusterState.of(NOW, "slurm", parse_sinfo_pools(sinfo), entries)
    snapshot = snapshot_from_state(SYSTEM.name, state)
    assert [(p.partitions, p.total_nodes, p.idle_nodes) for p in snapshot.pools] == [
        (["debug", "long"], 1, 1)
    ]
    assert snapshot.jobs == entries
