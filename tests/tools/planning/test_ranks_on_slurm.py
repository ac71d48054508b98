"""The job contract's MPI layouts start exactly the ranks asked, on the real local SLURM.

``--ntasks`` is what bounds ``srun``: before, ``tasks: 64`` on 28-core owens nodes gave
``--nodes=3 --ntasks-per-node=22`` and srun started 66 ranks. The local cluster is one
node of 2 CPUs, so the 64-rank script runs overcommitted (``sbatch --overcommit`` on the
command line) and without its per-node directive (64 tasks on a 2-CPU node is a node
configuration SLURM refuses even overcommitted); every rank prints one line and the
lines are counted. The uneven layout (fewer ranks than the nodes' task slots) runs as
rendered, unchanged.
"""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path

import pytest

from knowledge_base.records import PlanOption
from knowledge_base.workload import WorkloadSpec
from tools.actuators.slurm import render_sbatch
from tools.planning.render import segment_request
from tools.planning.workload_files import parse_workload

pytestmark = pytest.mark.slurm


def _spec(tasks: int) -> WorkloadSpec:
    document = {
        "name": f"ranks-{tasks}",
        "user": "alice",
        "workload": {
            "kind": "generic",
            "application": "srun bash -c 'echo RANK $SLURM_PROCID'",
            "tasks": tasks,
            "walltime_s": 60,
        },
    }
    return parse_workload(document, "test")


def _run(script: str, env: dict[str, str], out: Path, *extra: str) -> list[str]:
    """Submit ``script`` and wait (bounded) for it to end; the RANK lines it printed."""
    submitted = subprocess.run(
        ["sbatch", "--parsable", f"--output={out}", *extra],
        input=script,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    job_id = submitted.stdout.strip().split(";")[0]
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        queued = subprocess.run(
            ["squeue", "-h", "-j", job_id], env=env, capture_output=True, text=True, timeout=30
        )
        if not queued.stdout.strip() and out.exists():
            break
        time.sleep(0.5)
    else:
        pytest.fail(f"job {job_id} did not end in 120 s")
    time.sleep(0.5)  # the output file is flushed as the job step ends
    return [line for line in out.read_text().splitlines() if line.startswith("RANK ")]


def test_a_64_rank_script_starts_64_ranks(slurm_cluster: dict[str, str], tmp_path: Path) -> None:
    option = PlanOption(
        system="local", partition="debug", nodes=1, cores_per_node=64, memory_mb=1024,
        walltime_s=60,
    )  # fmt: skip
    request = segment_request(_spec(64), option, qos=None, walltime_s=60)
    script = render_sbatch(request)
    assert "#SBATCH --ntasks=64\n" in script and "#SBATCH --job-name=ranks-64-s0a1\n" in script
    on_two_cpus = re.sub(r"^#SBATCH --ntasks-per-node=.*\n", "", script, flags=re.MULTILINE)

    ranks = _run(on_two_cpus, slurm_cluster, tmp_path / "out.txt", "--overcommit")

    assert len(ranks) == 64
    assert sorted(int(line.split()[1]) for line in ranks) == list(range(64))


def test_fewer_ranks_than_task_slots_start_only_the_ranks_asked(
    slurm_cluster: dict[str, str], tmp_path: Path
) -> None:
    option = PlanOption(
        system="local", partition="debug", nodes=1, cores_per_node=2, memory_mb=1024,
        walltime_s=60,
    )  # fmt: skip
    request = segment_request(_spec(1), option, qos=None, walltime_s=60)
    assert request.tasks_per_node == 2 and request.ntasks == 1  # two slots, one rank

    ranks = _run(render_sbatch(request), slurm_cluster, tmp_path / "out.txt")

    assert ranks == ["RANK 0"]  # without --ntasks, srun would start 2
