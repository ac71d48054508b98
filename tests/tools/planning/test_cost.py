"""Charges in each center's own unit and by its own rules; dollars only as assumptions."""

from __future__ import annotations

import pytest

from knowledge_base.catalog import Catalog, ChargeBasis, ChargePolicy, Partition
from knowledge_base.errors import InvalidInputError
from tools.planning.cost import Charge, DollarRates, chain_charge, charge, dollars, normalize_unit


def _pitzer(catalog: Catalog, name: str) -> tuple[Partition, object]:
    system = catalog.system("pitzer")
    partition = system.partition(name)
    return partition, system.node_type_of(partition)


def test_tacc_bills_whole_nodes_with_a_15_minute_minimum(catalog: Catalog) -> None:
    frontera = catalog.system("frontera")
    normal = frontera.partition("normal")
    shape = {"nodes": 4, "cores_per_node": 1, "gpus_per_node": 0, "memory_mb": 100}
    five_minutes = charge(normal, frontera.node_type_of(normal), run_s=300, **shape)
    assert five_minutes == Charge(4 * 0.25 * 1.0, "SU")
    two_hours = charge(normal, frontera.node_type_of(normal), run_s=7200, **shape)
    assert two_hours == Charge(8.0, "SU")
    rtx = frontera.partition("rtx")  # 3 SU per node-hour
    assert charge(rtx, None, run_s=3600, **shape) == Charge(12.0, "SU")


def test_osc_bills_memory_above_the_per_core_share_as_cores(catalog: Catalog) -> None:
    serial, node_type = _pitzer(catalog, "serial")
    per_core = 182251 / 48  # cascadelake-48core-regular usable memory / cores
    asked = charge(
        serial, node_type, nodes=1, cores_per_node=1, gpus_per_node=0, memory_mb=14_000, run_s=3600
    )  # type: ignore[arg-type]
    assert asked == Charge(float(-(-14_000 // per_core)), "core-hour")
    plain = charge(
        serial, node_type, nodes=1, cores_per_node=4, gpus_per_node=0, memory_mb=1000, run_s=3600
    )  # type: ignore[arg-type]
    assert plain == Charge(4.0, "core-hour")


def test_osc_bills_multi_node_jobs_for_whole_nodes(catalog: Catalog) -> None:
    parallel, node_type = _pitzer(catalog, "parallel")
    billed = charge(
        parallel, node_type, nodes=10, cores_per_node=1, gpus_per_node=0, memory_mb=100, run_s=3600
    )  # type: ignore[arg-type]
    assert billed == Charge(480.0, "core-hour")  # OSC's own example: nodes=10:ppn=1 -> whole


def test_osc_gpu_jobs_record_gpu_hours_on_top(catalog: Catalog) -> None:
    gpu, node_type = _pitzer(catalog, "gpuserial")
    billed = charge(
        gpu, node_type, nodes=1, cores_per_node=24, gpus_per_node=1, memory_mb=1000, run_s=7200
    )  # type: ignore[arg-type]
    assert billed == Charge(48.0, "core-hour", gpu_hours=2.0)


def test_an_unpublished_rate_has_no_cost(catalog: Catalog) -> None:
    debug = catalog.system("frontera").partition("debug")
    assert debug.charge is None
    assert (
        charge(debug, None, nodes=1, cores_per_node=1, gpus_per_node=0, memory_mb=1, run_s=60)
        is None
    )


def test_each_job_of_a_chain_pays_its_own_minimum() -> None:
    partition = Partition(
        name="p",
        max_nodes=1,
        max_cores_per_node=1,
        max_memory_mb=1,
        max_minutes=60,
        charge=ChargePolicy(unit="SU", basis=ChargeBasis.NODE_HOUR, rate=1, min_charge_minutes=15),
    )
    shape = {"nodes": 1, "cores_per_node": 1, "gpus_per_node": 0, "memory_mb": 1}
    chained = chain_charge(partition, None, runs_s=[300, 300, 300], **shape)
    assert chained == Charge(0.75, "SU")


def test_dollars_need_a_configured_rate_and_say_it_is_assumed() -> None:
    su = Charge(10.0, "SU")
    assert dollars(su, DollarRates()) == (None, None)
    usd, basis = dollars(su, DollarRates(usd_per_su=0.5))
    assert usd == 5.0
    assert basis is not None and "assumed" in basis
    gpu_job = Charge(48.0, "core-hour", gpu_hours=2.0)
    assert dollars(gpu_job, DollarRates(usd_per_core_hour=0.01)) == (None, None)
    usd, _ = dollars(gpu_job, DollarRates(usd_per_core_hour=0.01, usd_per_gpu_hour=0.1))
    assert usd == pytest.approx(0.68)


@pytest.mark.parametrize(
    ("written", "unit"),
    [("SU", "SU"), ("SUs", "SU"), ("core-hours", "core-hour"), ("core_hour", "core-hour"),
     ("usd", "USD"), ("$", "USD")],
)  # fmt: skip
def test_budget_units_are_read_the_ways_people_write_them(written: str, unit: str) -> None:
    assert normalize_unit(written) == unit


def test_an_unknown_budget_unit_names_the_field() -> None:
    with pytest.raises(InvalidInputError, match="goals.budget_unit"):
        normalize_unit("bitcoin")
