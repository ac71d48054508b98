"""A planned job's sbatch script is accepted by a real SLURM (``sbatch --test-only``)."""

from __future__ import annotations

import getpass
from datetime import UTC, datetime

import pytest

from knowledge_base.catalog import Catalog
from knowledge_base.workload import WorkloadSpec
from tools.actuators.slurm_catalog import import_slurm_system
from tools.actuators.slurm_commands import SlurmCommands
from tools.planning.render import sbatch_scripts
from tools.planning.selector import plan

pytestmark = pytest.mark.slurm


def _spec(workload: dict[str, object]) -> WorkloadSpec:
    return WorkloadSpec.model_validate(
        {
            "name": "rightsize-plan-test",
            "user": getpass.getuser(),
            "workload": workload,
            "goals": {"systems": ["local"]},
        }
    )


def test_a_plan_for_the_local_cluster_passes_sbatch_test_only(
    slurm_cluster: dict[str, str],
) -> None:
    catalog = Catalog(systems=[import_slurm_system("local", "lab", SlurmCommands())])
    spec = _spec(
        {"kind": "generic", "application": "echo planned", "cores": 1, "walltime_s": "2 min",
         "memory_mb": "100 MB"}
    )  # fmt: skip
    selection = plan(spec, catalog, now=datetime.now(UTC))
    assert selection.recommended is not None, selection.infeasible
    # 2 min x 1.25 x 1.1 does not fit debug's 1 minute: the plan uses batch (10 minutes)
    assert selection.recommended.option.partition == "batch"
    assert any(i.partition == "debug" and i.constraint == "walltime" for i in selection.infeasible)
    commands = SlurmCommands(timeout_s=30)
    for script in sbatch_scripts(selection.recommended, spec):
        commands.run(["sbatch", "--test-only"], stdin=script)  # raises unless SLURM accepts it


def test_a_job_too_long_for_every_local_partition_gets_no_plan(
    slurm_cluster: dict[str, str],
) -> None:
    catalog = Catalog(systems=[import_slurm_system("local", "lab", SlurmCommands())])
    spec = _spec({"kind": "generic", "application": "sleep 3600", "walltime_s": "1 h"})
    selection = plan(spec, catalog, now=datetime.now(UTC))
    assert selection.recommended is None
    assert {i.constraint for i in selection.infeasible} == {"walltime"}
