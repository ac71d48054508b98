"""The simulated cluster as the embedded center uses it: the catalog's node types and
partitions, and one journal that several processes (here: several cluster objects on
one file, as each process opens its own) share."""

from __future__ import annotations

from pathlib import Path

import pytest

from knowledge_base.records import JobState
from knowledge_base.seed import load_seed_catalog
from tests.cluster import TEST_SYSTEM
from tools.actuators.model import JobRequest, RequestRejected, SimulatedWork
from tools.actuators.simulated import ManualClock, SimulatedCluster, catalog_pools
from tools.actuators.simulated_journal import SqliteJournal


def _request(name: str = "j", **overrides: object) -> JobRequest:
    fields: dict[str, object] = dict(
        name=name,
        partition="batch",
        command="true",
        memory_mb=1000,
        walltime_s=600,
        simulated=SimulatedWork(run_s=100),
    )
    fields.update(overrides)
    return JobRequest.model_validate(fields)


def _largest(system_name: str, partition_name: str) -> JobRequest:
    system = load_seed_catalog().system(system_name)
    partition = system.partition(partition_name)
    node = system.node_type_of(partition)
    cores = partition.max_cores_per_node
    if node is not None and node.cores is not None:
        cores = min(cores, node.cores)  # as the catalog check bounds it
    return _request(
        partition=partition.name,
        nodes=partition.max_nodes,
        tasks_per_node=cores,
        gpus_per_node=partition.gpus_per_node,
        memory_mb=partition.max_memory_mb,
        walltime_s=partition.max_minutes * 60,
    )


@pytest.mark.parametrize("system", [s.name for s in load_seed_catalog().systems])
async def test_the_largest_request_every_catalog_partition_accepts_runs(system: str) -> None:
    catalog_system = load_seed_catalog().system(system)
    for partition in catalog_system.partitions:
        cluster = SimulatedCluster.of_system(catalog_system, clock=ManualClock())
        job_id = await cluster.submit(_largest(system, partition.name))
        status = await cluster.status(job_id)
        assert status.state is JobState.RUNNING, (system, partition.name)


def test_gpu_partitions_get_gpu_nodes() -> None:
    pitzer = load_seed_catalog().system("pitzer")
    pools = {p.name: p for p in catalog_pools(pitzer)}
    quad = pools["quad-gpu-48core"]
    assert quad.gpus_per_node == 4
    assert "gpuserial-quad" in quad.partitions
    # the catalog counts 4 such nodes, but a condo partition on them accepts 5 per job
    assert quad.nodes == 5


async def test_a_partition_the_cluster_has_no_nodes_for_is_refused() -> None:
    cluster = SimulatedCluster.of_system(TEST_SYSTEM, clock=ManualClock())
    cluster.system = None  # past the catalog's check: the cluster itself must refuse
    with pytest.raises(RequestRejected, match="no nodes run partition 'nowhere'"):
        await cluster.submit(_request(partition="nowhere"))


async def test_clusters_on_one_journal_share_jobs_and_never_reuse_an_id(tmp_path: Path) -> None:
    clock = ManualClock()
    path = tmp_path / "cluster.sqlite"
    first = SimulatedCluster.of_system(TEST_SYSTEM, clock=clock, journal=SqliteJournal(path))
    second = SimulatedCluster.of_system(TEST_SYSTEM, clock=clock, journal=SqliteJournal(path))

    a = await first.submit(_request("a"))
    b = await second.submit(_request("b"))
    c = await first.submit(_request("c"))

    assert len({a, b, c}) == 3
    # one node: a runs, b and c wait, whichever process asks
    assert (await second.status(a)).state is JobState.RUNNING
    assert (await first.status(b)).state is JobState.PENDING
    clock.advance(100)
    assert (await second.status(a)).state is JobState.COMPLETED
    assert (await first.status(b)).state is JobState.RUNNING
    await second.cancel(b)
    assert (await first.status(b)).state is JobState.CANCELLED
    assert (await first.status(c)).state is JobState.RUNNING

    restarted = SimulatedCluster.of_system(TEST_SYSTEM, clock=clock, journal=SqliteJournal(path))
    assert (await restarted.status(c)).state is JobState.RUNNING
    d = await restarted.submit(_request("d"))
    assert d not in {a, b, c}
    assert await first.find_by_name("d") == d


async def test_a_change_from_another_process_in_the_past_is_replayed_in_order(
    tmp_path: Path,
) -> None:
    """A reader that ran ahead of another writer's entry replays the journal from the
    start, so both agree on every job's start and end."""
    path = tmp_path / "cluster.sqlite"
    early, late = ManualClock(), ManualClock()
    late.advance(50)
    writer = SimulatedCluster.of_system(TEST_SYSTEM, clock=early, journal=SqliteJournal(path))
    reader = SimulatedCluster.of_system(TEST_SYSTEM, clock=late, journal=SqliteJournal(path))
    assert await reader.queue() == []
    job = await writer.submit(_request("x"))  # stamped at 0, before the reader's 50 s
    status = await reader.status(job)
    assert status.start_time == early.now()
    late.advance(60)  # 110 s: its 100 s are over
    assert (await reader.status(job)).state is JobState.COMPLETED
