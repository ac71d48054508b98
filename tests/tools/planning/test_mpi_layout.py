"""Generic MPI jobs are laid out as asked (issue #19 item 3): ranks and cores per rank,
memory per node, per rank or per core, the partition's per-core share by default, and
no large-memory or GPU queue for a job that does not need one.

The sbatch scripts are golden files (``golden/``); regenerate after a deliberate change
with ``RIGHTSIZE_UPDATE_GOLDEN=1 pytest tests/tools/planning/test_mpi_layout.py``.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from knowledge_base.catalog import Catalog
from knowledge_base.workload import WorkloadSpec
from tools.planning.render import job_requests, sbatch_scripts
from tools.planning.selector import plan
from tools.planning.workload_files import parse_workload

GOLDEN = Path(__file__).parent / "golden"
NOW = datetime(2026, 11, 25, 12, 0, tzinfo=UTC)


def _golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if os.environ.get("RIGHTSIZE_UPDATE_GOLDEN"):
        path.write_text(text)
    assert text == path.read_text(), f"{name} differs from its golden file"


def _spec(**workload: Any) -> WorkloadSpec:
    document = {
        "name": "lammps",
        "user": "alice",
        "workload": {"kind": "generic", "application": "srun lmp -in in.melt",
                     "walltime_s": "2 h", **workload},
        "goals": {"systems": ["pitzer"], "partitions": ["batch"]},
    }  # fmt: skip
    return parse_workload(document, "test")


def test_64_cores_are_64_ranks_over_whole_nodes_with_the_per_core_share(
    catalog: Catalog,
) -> None:
    selection = plan(_spec(cores=64), catalog, now=NOW)
    chosen = selection.recommended
    assert chosen is not None
    [request] = job_requests(chosen, _spec(cores=64))
    assert request.nodes * request.tasks_per_node == 64 and request.cpus_per_task == 1
    node_type = catalog.system("pitzer").node_type_of(
        catalog.system("pitzer").partition(chosen.option.partition)
    )
    assert node_type is not None and node_type.memory_mb is not None
    share = node_type.memory_mb / (node_type.cores or 1) * request.tasks_per_node
    assert request.memory_mb <= share * 1.01  # the per-core share, not the whole node
    _golden("lammps_64_ranks.sbatch", sbatch_scripts(chosen, _spec(cores=64))[0])


def test_hybrid_ranks_and_memory_per_rank_are_laid_out_as_asked(catalog: Catalog) -> None:
    spec = _spec(tasks=8, cpus_per_task=4, memory_per_task_mb="6 GB")
    chosen = plan(spec, catalog, now=NOW).recommended
    assert chosen is not None
    [request] = job_requests(chosen, spec)
    assert request.cpus_per_task == 4
    assert request.nodes * request.tasks_per_node == 8
    assert request.memory_mb >= 6 * 1024 * request.tasks_per_node
    _golden("hybrid_8x4.sbatch", sbatch_scripts(chosen, spec)[0])


def test_memory_per_core_counts_the_cores_of_each_node(catalog: Catalog) -> None:
    spec = _spec(tasks=16, memory_per_core_mb="2 GB")
    chosen = plan(spec, catalog, now=NOW).recommended
    assert chosen is not None
    assert chosen.option.memory_mb >= 2 * 1024 * chosen.option.cores_per_node


def test_no_large_memory_or_gpu_queue_for_a_job_that_does_not_need_one(
    catalog: Catalog,
) -> None:
    document: dict[str, Any] = {
        "name": "mpi", "user": "alice",
        "workload": {"kind": "generic", "application": "srun a.out", "cores": 64,
                     "walltime_s": "2 h"},
        "goals": {"systems": ["pitzer", "owens"]},
    }  # fmt: skip
    selection = plan(parse_workload(document, "test"), catalog, now=NOW)
    feasible = {p.option.partition for p in selection.ranked}
    assert feasible and not any("hugemem" in p or "largemem" in p for p in feasible)
    assert all(p.option.gpus_per_node == 0 for p in selection.ranked)
    large = [i for i in selection.infeasible if "large-memory queue" in i.reason]
    assert large
    document["workload"]["memory_mb"] = "700 GB"
    needy = plan(parse_workload(document, "test"), catalog, now=NOW)
    assert needy.recommended is not None
    assert needy.recommended.option.memory_mb >= 700 * 1024


@pytest.mark.parametrize(
    ("workload", "field"),
    [
        ({"cores": 64, "tasks": 8}, "cores"),
        ({"tasks": 8, "memory_mb": "1 GB", "memory_per_core_mb": "1 GB"}, "memory"),
        ({"tasks": 0}, "tasks"),
    ],
)
def test_inconsistent_layouts_are_refused_naming_the_field(
    workload: dict[str, Any], field: str
) -> None:
    from knowledge_base.errors import InvalidInputError

    with pytest.raises(InvalidInputError) as caught:
        _spec(**workload)
    assert field in str(caught.value)
