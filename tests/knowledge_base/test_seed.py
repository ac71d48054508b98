"""The seeded catalog: what it holds, where each number came from, and that it is fresh."""

from __future__ import annotations

from pathlib import Path

from knowledge_base.seed import SEEDED_SYSTEMS, build_seed_catalog, load_seed_catalog, seed_path


def test_committed_seed_equals_a_fresh_build_from_the_shared_data(shared_data: Path) -> None:
    rebuilt = build_seed_catalog(shared_data / "centers").model_dump_json(indent=1) + "\n"
    assert seed_path().read_text(encoding="utf-8") == rebuilt, (
        "knowledge_base/seed/catalog.json is stale: "
        "python -m knowledge_base.seed --data ../shared/data/centers"
    )


def test_seed_has_the_six_systems_and_all_119_queues() -> None:
    catalog = load_seed_catalog()
    assert sorted(catalog.names()) == sorted(SEEDED_SYSTEMS)
    assert sum(len(s.partitions) for s in catalog.systems) == 119


def test_every_partition_runs_on_a_known_node_type_with_sourced_limits() -> None:
    for system in load_seed_catalog().systems:
        for partition in system.partitions:
            node_type = system.node_type_of(partition)
            assert node_type is not None, f"{system.name}/{partition.name}"
            assert partition.sources["limits"] == "queue_limits.json"
            assert partition.sources["node_type"].startswith("rightsize seed rule")
            assert node_type.sources["hardware"]  # a URL, or the third party it came from


def test_charges_stay_in_each_centers_own_unit() -> None:
    catalog = load_seed_catalog()
    rtx = catalog.system("frontera").partition("rtx")
    assert rtx.charge is not None
    assert (rtx.charge.unit, rtx.charge.basis.value, rtx.charge.rate) == ("SU", "node-hour", 3.0)
    assert rtx.charge.min_charge_minutes == 15
    gpu = catalog.system("pitzer").partition("gpuserial-48core")
    assert gpu.charge is not None
    assert (gpu.charge.unit, gpu.charge.gpu_hour_rate) == ("core-hour", 1.0)
    # TACC queues with no published rate carry no invented one.
    assert catalog.system("frontera").partition("grace").charge is None


def test_gpu_partitions_carry_gpu_memory_and_peaks() -> None:
    catalog = load_seed_catalog()
    pitzer = catalog.system("pitzer")
    node = pitzer.node_type_of(pitzer.partition("gpuserial-48core"))
    assert node is not None and node.gpu is not None
    assert node.gpu.memory_mb == 32 * 1024
    assert node.gpu.fp32_tflops == 14
    assert pitzer.partition("condo-osumed-gpu-40core-cpuonly").gpus_per_node == 0
    a100 = catalog.system("ascend").partition("gpu")
    assert a100.gpus_per_node == 4
