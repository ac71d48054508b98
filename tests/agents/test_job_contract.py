"""One job contract: the script ``rightsize plan --sbatch`` writes for a plan is the script
the Scheduler submits for it (ids aside: the plan id in the job name and
``RIGHTSIZE_PLAN_ID``).

Before, ``tools/planning/render.py`` and the Scheduler each built the job: segment
variables only for cascades in one, whenever the job checkpoints in the other; a work
budget from the plan's split in one, walltime less the checkpoint overhead in the other;
the partition's QOS in one, none in the other.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path

import pytest

from agents.events import JobSubmitted, PlanApproved
from agents.scheduler import Scheduler, SchedulerConfig
from knowledge_base.seed import load_seed_catalog
from knowledge_base.workload import WorkloadSpec
from tests.agents.harness import MiniCenter
from tools.actuators.simulated import ManualClock, SimulatedCluster
from tools.actuators.slurm import render_sbatch
from tools.planning.render import sbatch_scripts
from tools.planning.selector import plan
from tools.planning.workload_files import parse_workload

NOW = datetime(2026, 11, 25, 12, 0, tzinfo=UTC)
OVERHEAD_S = 300

SPECS = {
    "resnet-cascade-on-debug": {
        "name": "resnet50-20k",
        "user": "alice",
        "account": "PAS1234",
        "workload": {
            "kind": "dnn_training", "model": "resnet50", "dataset_samples": 20000,
            "input_shape": [3, 224, 224], "epochs": 50, "batch_sizes": [64],
            "checkpointable": True, "command": "python train.py --data /scratch/images",
        },
        "goals": {"systems": ["pitzer"], "partitions": ["debug"]},
    },
    "lammps-64-ranks-per-core-memory": {
        "name": "lammps-64",
        "user": "alice",
        "account": "PAS1234",
        "workload": {
            "kind": "generic", "application": "srun lmp -in in.lj", "tasks": 64,
            "memory_per_core_mb": 3000, "walltime_s": 3600,
        },
        "goals": {"systems": ["owens"], "partitions": ["batch"]},
    },
    "resnet-on-gpus": {
        "name": "resnet-gpu",
        "user": "alice",
        "workload": {
            "kind": "dnn_training", "model": "resnet50", "dataset_samples": 20000,
            "input_shape": [3, 224, 224], "epochs": 2, "batch_sizes": [64],
        },
        "goals": {"systems": ["pitzer"], "gpu_only": True,
                  "exclude_partitions": ["condo-*", "systems"]},
    },
}  # fmt: skip


def _without_ids(script: str, plan_id: str) -> str:
    script = script.replace(f"-{plan_id}", "")
    return re.sub(r"^export RIGHTSIZE_PLAN_ID=.*\n", "", script, flags=re.MULTILINE)


@pytest.mark.parametrize("case", sorted(SPECS))
async def test_the_scheduler_submits_the_script_plan_sbatch_writes(
    tmp_path: Path, case: str
) -> None:
    spec: WorkloadSpec = parse_workload(SPECS[case], case)
    catalog = load_seed_catalog()
    chosen = plan(spec, catalog, now=NOW).recommended
    assert chosen is not None
    printed = sbatch_scripts(chosen, spec, checkpoint_overhead_s=OVERHEAD_S)[0]

    system = catalog.system(chosen.option.system)
    cluster = SimulatedCluster.of_system(system, clock=ManualClock())
    async with MiniCenter(tmp_path) as center:
        await center.kb.put_catalog(catalog)
        scheduler = Scheduler(
            center.kb,
            {system.name: cluster},
            center.bus,
            SchedulerConfig(checkpoint_overhead_s=OVERHEAD_S),
        )
        await center.start(scheduler)
        record = chosen.to_record(spec, f"{spec.name}-0123456789ab")
        await center.publish(PlanApproved(plan=record), record.id)
        await center.settle()
        [submitted] = await center.recorder.of(JobSubmitted)

    submitted_script = render_sbatch(cluster._jobs[submitted.job_id].request)
    assert _without_ids(submitted_script, record.id) == printed


def test_64_ranks_are_64_with_memory_per_core_and_a_job_name() -> None:
    spec = parse_workload(SPECS["lammps-64-ranks-per-core-memory"], "lammps")
    chosen = plan(spec, load_seed_catalog(), now=NOW).recommended
    assert chosen is not None
    [script] = sbatch_scripts(chosen, spec)
    assert "#SBATCH --ntasks=64\n" in script
    assert "#SBATCH --mem-per-cpu=3000M\n" in script
    assert "#SBATCH --mem=" not in script
    assert "#SBATCH --job-name=lammps-64-s0a1\n" in script
